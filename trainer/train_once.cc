#include "trainer/train_once.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "kernels/io/atomic_file.h"
#include "rollout/engine/engine.h"
#include "rollout/tokenizer.h"
#include "rollout/capture/capture.h"
#include "trainer/corpus.h"

namespace updraft::train {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::vector<int32_t>> corpus_prompts(const Tokenizer& tok, const std::string& domain, corpus::Split split,
                                                 int64_t n, uint64_t seed) {
  const corpus::Mix mix = domain == "mix" ? corpus::Mix{} : corpus::Mix::only(corpus::domain_from_name(domain));
  std::vector<std::vector<int32_t>> out;
  for (const auto& s : corpus::make_samples(mix, split, static_cast<size_t>(n), seed))
    out.push_back(tok.encode(s.prompt));
  return out;
}

struct GenRun {
  std::vector<GenResult> results;
  double seconds = 0;
  int64_t tokens = 0;
  SpecStats spec;
};

GenRun generate(const PolicyModel& policy, const DraftModel* draft, const std::vector<std::vector<int32_t>>& prompts,
                int64_t max_new, float temperature, uint64_t seed, int64_t spec_steps,
                const std::function<void(int64_t)>& on_done) {
  EngineOptions eo;
  eo.seed = seed;
  eo.spec = SpecSettings{spec_steps, 1, spec_steps + 1};
  Engine e(policy, eo, draft);
  for (const auto& p : prompts) {
    GenRequest r;
    r.prompt = p;
    r.params.temperature = temperature;
    r.params.max_new_tokens = max_new;
    e.submit(std::move(r));
  }
  GenRun run;
  const auto t0 = Clock::now();
  while (e.has_work()) {
    for (auto& r : e.step()) {
      run.tokens += static_cast<int64_t>(r.tokens.size());
      run.results.push_back(std::move(r));
      if (on_done)
        on_done(static_cast<int64_t>(run.results.size()));
    }
  }
  run.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  std::sort(run.results.begin(), run.results.end(), [](const GenResult& a, const GenResult& b) { return a.id < b.id; });
  run.spec = e.stats().spec;
  return run;
}

std::string fmt(const char* f, double a) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, a);
  return buf;
}

}  // namespace

TrainOnceResult train_once(const TrainOnceOptions& o) {
  UPD_REQUIRE(!o.model_dir.empty() && !o.out_dir.empty()) << "train --once: --model and --out are required";
  UPD_REQUIRE(o.prompts >= 2 && o.heldout_prompts >= 1) << "train --once: need at least 2 prompts and 1 held-out";
  auto say = [&](const std::string& s) {
    if (o.progress)
      o.progress(s);
  };
  const PolicyModel policy = PolicyModel::load(o.model_dir);
  const Tokenizer tok = Tokenizer::load(o.model_dir);
  const PolicyConfig& pc = policy.config();
  UPD_REQUIRE(tok.vocab_size() <= pc.vocab_size)
      << o.model_dir << ": the tokenizer has " << tok.vocab_size() << " tokens, the model " << pc.vocab_size;

  // 1. Rollouts of the policy on training prompts.
  const auto prompts = corpus_prompts(tok, o.domain, corpus::Split::kTrain, o.prompts, o.seed);
  const int64_t every = std::max<int64_t>(1, o.prompts / 8);
  const GenRun gen =
      generate(policy, nullptr, prompts, o.max_new_tokens, o.temperature, o.seed, o.spec_steps, [&](int64_t done) {
        if (done % every == 0 || done == o.prompts)
          say("rollouts " + std::to_string(done) + "/" + std::to_string(o.prompts));
      });
  say("rollouts: " + std::to_string(gen.tokens) + " tokens in " + fmt("%.1f s", gen.seconds) + " (" +
      fmt("%.0f tokens/s", static_cast<double>(gen.tokens) / gen.seconds) + ")");

  // 2. Capture, split off the last tenth as held-out.
  std::vector<Rollout> rollouts;
  for (const auto& r : gen.results)
    if (!r.tokens.empty())
      rollouts.push_back({r.prompt, r.tokens});
  CaptureOptions co;
  co.teacher_k = o.teacher_k;
  const auto t_cap = Clock::now();
  std::vector<TttSample> samples = capture_samples(policy, rollouts, co);
  say("captured " + std::to_string(samples.size()) + " samples (aux " + std::to_string(3 * pc.hidden_size) +
      " wide, teacher top-" + std::to_string(co.teacher_k) + ") in " +
      fmt("%.1f s", std::chrono::duration<double>(Clock::now() - t_cap).count()));
  const size_t n_held = std::max<size_t>(1, samples.size() / 10);
  InMemoryDataset held(std::vector<TttSample>(samples.end() - static_cast<std::ptrdiff_t>(n_held), samples.end()));
  samples.resize(samples.size() - n_held);
  InMemoryDataset train(std::move(samples));

  // 3. Vocabulary, model (fresh, or the drafter to continue), training.
  std::unique_ptr<TrainableDraft> fresh_or_init;
  double coverage = 0;
  int64_t vd = std::min(o.draft_vocab, pc.vocab_size);
  if (o.init_dir.empty()) {
    const VocabMap vocab = choose_draft_vocab(train, vd, pc.vocab_size, &coverage);
    say("draft vocabulary: " + std::to_string(vd) + " tokens covering " + fmt("%.1f%%", 100 * coverage) +
        " of response tokens");
    fresh_or_init = std::make_unique<TrainableDraft>(draft_config_for(pc, vd), vocab, policy.draft_target(),
                                                     policy.lm_head(), o.seed);
  } else {
    const DraftModel init = DraftModel::load(o.init_dir, policy.draft_target());
    vd = init.config().draft_vocab_size;
    fresh_or_init = std::make_unique<TrainableDraft>(init, policy.draft_target());
    say("continuing the drafter in " + o.init_dir + " (its draft vocabulary)");
  }
  TrainableDraft& draft = *fresh_or_init;
  DraftTrainOptions to = o.train;
  to.progress = o.progress;
  TrainOnceResult res;
  res.training = train_drafter(draft, train, held, to);
  draft.save(o.out_dir);
  say("saved the drafter to " + o.out_dir);

  // 4. Measure on held-out prompts: plain and speculative, greedy, side by side.
  const DraftModel served = DraftModel::load(o.out_dir, policy.draft_target());
  const auto hp = corpus_prompts(tok, o.domain, corpus::Split::kHeldOut, o.heldout_prompts, o.seed);
  const GenRun plain = generate(policy, nullptr, hp, o.max_new_tokens, 0.f, o.seed, o.spec_steps, nullptr);
  const GenRun spec = generate(policy, &served, hp, o.max_new_tokens, 0.f, o.seed, o.spec_steps, nullptr);
  for (size_t i = 0; i < plain.results.size(); ++i)
    UPD_CHECK(plain.results[i].tokens == spec.results[i].tokens) << "greedy speculative output differs from plain";
  res.tau = spec.spec.tau();
  res.plain_tokens_per_s = static_cast<double>(plain.tokens) / plain.seconds;
  res.spec_tokens_per_s = static_cast<double>(spec.tokens) / spec.seconds;
  std::string alphas;
  for (size_t j = 0; j < static_cast<size_t>(o.spec_steps); ++j)
    alphas += fmt(j ? " %.2f" : "%.2f", spec.spec.alpha(j));
  say("held-out greedy, chain of " + std::to_string(o.spec_steps) + ": tau " + fmt("%.2f", res.tau) + ", n-alpha " +
      alphas + "; " + fmt("%.1f", res.spec_tokens_per_s) + " vs " + fmt("%.1f", res.plain_tokens_per_s) +
      " tokens/s plain (" + fmt("%.2fx", res.spec_tokens_per_s / res.plain_tokens_per_s) + ", batch " +
      std::to_string(hp.size()) + ")");

  nlohmann::json steps = nlohmann::json::array();
  for (size_t k = 0; k < res.training.heldout_after.rows.size(); ++k)
    steps.push_back({{"step", k},
                     {"accuracy_before", res.training.heldout_before.accuracy(k)},
                     {"accuracy_after", res.training.heldout_after.accuracy(k)}});
  nlohmann::json alpha = nlohmann::json::array();
  for (size_t j = 0; j < static_cast<size_t>(o.spec_steps); ++j)
    alpha.push_back(spec.spec.alpha(j));
  const nlohmann::json report = {{"policy", o.model_dir},
                                 {"prompts", o.prompts},
                                 {"domain", o.domain},
                                 {"rollout_tokens", gen.tokens},
                                 {"draft_vocab", vd},
                                 {"vocab_coverage", coverage},
                                 {"train_steps", res.training.steps},
                                 {"ttt_steps", to.ttt.steps},
                                 {"heldout_loss_before", res.training.heldout_before.mean_loss()},
                                 {"heldout_loss_after", res.training.heldout_after.mean_loss()},
                                 {"ttt_accuracy", steps},
                                 {"train_seconds", res.training.seconds},
                                 {"tau", res.tau},
                                 {"n_alpha", alpha},
                                 {"plain_tokens_per_s", res.plain_tokens_per_s},
                                 {"spec_tokens_per_s", res.spec_tokens_per_s}};
  write_file_atomic((std::filesystem::path(o.out_dir) / "train_report.json").string(), report.dump(2) + "\n");
  return res;
}

}  // namespace updraft::train
