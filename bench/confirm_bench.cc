// Decoding beside a rollback confirmation (rollout/worker/confirmation.h), side by side in one
// run on the built-in policy and drafter: batch-1 speculative decoding of --sequences held-out
// prompts (temperature 1, --tokens each) alone, beside confirmations at idle priority (how a
// worker runs them), and beside confirmations at normal priority; confirmations run back to back
// during a phase, each scoring both drafters teacher-forced on --samples captured completions.
// --reps interleaved repetitions; each figure is the median. Also the confirmation's own time on
// an idle machine: what a worker's engine thread stalled for when it ran them inline.
//
// usage: confirm_bench [--model DIR] [--draft DIR] [--sequences N] [--tokens N] [--samples N] [--reps R]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "app/worker_role.h"
#include "bench/bench_args.h"
#include "rollout/capture/capture.h"
#include "rollout/engine/engine.h"
#include "rollout/tokenizer.h"
#include "rollout/worker/confirmation.h"
#include "trainer/corpus.h"

#ifndef UPDRAFT_SOURCE_DIR
#define UPDRAFT_SOURCE_DIR "."
#endif

namespace updraft {
namespace {

using bench::median;
using bench::now_s;

struct Setup {
  std::shared_ptr<const PolicyModel> policy;
  std::shared_ptr<const DraftModel> draft;
  std::vector<std::vector<int32_t>> prompts;
  int64_t tokens = 64;
};

GenRequest request(const Setup& s, size_t i, bool capture) {
  GenRequest q;
  q.prompt = s.prompts[i % s.prompts.size()];
  q.params.temperature = 1;
  q.params.has_seed = true;
  q.params.seed = i + 1;
  q.params.max_new_tokens = s.tokens;
  q.params.ignore_eos = true;
  q.capture = capture;
  return q;
}

// Confirmations back to back until stop(): each at idle priority, or hurried to normal at once.
class Confirmer {
 public:
  Confirmer(const Setup& s, std::vector<TttSample> samples, bool normal)
      : s_(s), samples_(std::move(samples)), normal_(normal) {
    next();
  }
  void poll() {
    if (!c_->done())
      return;
    seconds_.push_back(c_->wait().seconds);
    next();
  }
  std::vector<double> stop() {
    c_->hurry();
    c_.reset();
    return seconds_;
  }

 private:
  void next() {
    c_ = std::make_unique<BackgroundConfirmation>(teacher_forced_scorer(), s_.draft, s_.draft, s_.policy, samples_, 4,
                                                  nullptr);
    if (normal_)
      c_->hurry();
  }
  const Setup& s_;
  std::vector<TttSample> samples_;
  bool normal_;
  std::unique_ptr<BackgroundConfirmation> c_;
  std::vector<double> seconds_;
};

// Tokens per second of decoding `n` requests one at a time; `between` runs after every step.
template <class F>
double decode(Engine& e, const Setup& s, int64_t n, F between) {
  int64_t tokens = 0;
  const double t0 = now_s();
  for (int64_t i = 0; i < n; ++i) {
    e.submit(request(s, 1000 + static_cast<size_t>(i), false));
    while (e.has_work()) {
      for (const GenResult& g : e.step())
        tokens += static_cast<int64_t>(g.tokens.size());
      between();
    }
  }
  return static_cast<double>(tokens) / (now_s() - t0);
}

}  // namespace
}  // namespace updraft

int main(int argc, char** argv) {
  using namespace updraft;
  std::string model_dir = std::string(UPDRAFT_SOURCE_DIR) + "/models/small",
              draft_dir = std::string(UPDRAFT_SOURCE_DIR) + "/models/small-eagle3";
  int64_t sequences = 16, samples = 16, reps = 3;
  Setup s;
  CLI::App app{"updraft confirm_bench: batch-1 decoding beside rollback confirmations, at idle and normal priority"};
  app.add_option("--model", model_dir, "the policy")->capture_default_str();
  app.add_option("--draft", draft_dir, "the drafter")->capture_default_str();
  app.add_option("--sequences", sequences, "held-out prompts decoded per phase")
      ->check(CLI::Range(1, bench::kMost))
      ->capture_default_str();
  app.add_option("--tokens", s.tokens, "new tokens per sequence")
      ->check(CLI::Range(1, bench::kMost))
      ->capture_default_str();
  app.add_option("--samples", samples, "captured completions each confirmation scores")
      ->check(CLI::Range(1, bench::kMost))
      ->capture_default_str();
  app.add_option("--reps", reps, "interleaved repetitions")->check(CLI::Range(1, bench::kMost))->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  s.policy = std::make_shared<const PolicyModel>(PolicyModel::load(model_dir));
  s.draft = std::make_shared<const DraftModel>(DraftModel::load(draft_dir, s.policy->draft_target()));
  const Tokenizer tok = Tokenizer::load(model_dir);
  for (const corpus::Sample& smp : corpus::make_samples(corpus::Mix(), corpus::Split::kHeldOut, 64, 3))
    s.prompts.push_back(tok.encode(smp.prompt));
  EngineOptions o;
  o.max_batch = 1;
  o.kv_cache_bytes = int64_t{1} << 30;
  o.spec = SpecSettings{4, 1, 5};
  Engine e(*s.policy, o, s.draft.get());
  std::vector<TttSample> data;  // captured completions, as a worker keeps them
  for (int64_t i = 0; i < samples; ++i) {
    e.submit(request(s, static_cast<size_t>(i), true));
    while (e.has_work())
      for (const GenResult& g : e.step())
        data.push_back(sample_of(g, 1));
  }
  std::printf(
      "updraft decoding beside a rollback confirmation: built-in pair, batch 1, chain of 4, T = 1, "
      "%lld sequences x %lld tokens, confirmations on %lld completions, %lld reps\n",
      static_cast<long long>(sequences), static_cast<long long>(s.tokens), static_cast<long long>(samples),
      static_cast<long long>(reps));
  std::vector<double> alone, idle, normal, idle_conf, normal_conf, inline_s;
  const auto beside = [&](bool hurried, std::vector<double>& tps, std::vector<double>& conf) {
    Confirmer c(s, data, hurried);
    tps.push_back(decode(e, s, sequences, [&] { c.poll(); }));
    const std::vector<double> done = c.stop();
    conf.push_back(static_cast<double>(done.size()));
  };
  for (int64_t r = 0; r < reps; ++r) {
    const double t0 = now_s();
    BackgroundConfirmation(teacher_forced_scorer(), s.draft, s.draft, s.policy, data, 4, nullptr).wait();
    inline_s.push_back(now_s() - t0);
    alone.push_back(decode(e, s, sequences, [] {}));
    beside(false, idle, idle_conf);
    beside(true, normal, normal_conf);
    std::printf("rep %lld: alone %.0f t/s, beside idle %.0f, beside normal %.0f\n", static_cast<long long>(r),
                alone.back(), idle.back(), normal.back());
  }
  const double a = median(alone);
  std::printf("confirmation alone (both drafters): %.2f s\n", median(inline_s));
  std::printf(
      "decode alone %.0f t/s; beside an idle-priority confirmation %.0f t/s (%.2fx, %.0f finished per "
      "phase); beside a normal-priority one %.0f t/s (%.2fx, %.0f finished per phase)\n",
      a, median(idle), median(idle) / a, median(idle_conf), median(normal), median(normal) / a, median(normal_conf));
  return 0;
}
