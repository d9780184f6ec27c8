// Speculative vs plain decoding, side by side in one run, at batch 1, 4, 16 and 64, for a chain
// and a tree setting: tokens/s of each, their ratio, tau (mean accepted drafts + 1 per round),
// acceptance per draft position, and where the speculative time goes (draft, verify, the rest).
// Roofline: the plain step's weight bytes over the machine's measured read bandwidth.
//
// The policy is a random Llama-style model larger than the last-level cache; the drafter is
// random too unless --draft DIR names a trained one (the speed targets belong to trained
// drafters; a random one accepts almost nothing, so this measures the cost side honestly).
//
// With --model DIR (a policy with its tokenizer.json, e.g. the built-in small one) the prompts are
// held-out prompts of the built-in corpus, encoded by that tokenizer; --temperature T samples
// (seeded per sequence) instead of greedy decoding.
//
// usage: spec_bench [--quick] [--capture-cost] [--tokens N] [--batch B] [--draft DIR] [--model DIR] [--temperature T]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_policy.h"
#include "bench/machine_probe.h"
#include "drafter/random_draft.h"
#include "rollout/engine.h"
#include "rollout/random_policy.h"
#include "rollout/tokenizer.h"
#include "trainer/corpus.h"

using namespace updraft;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Run {
  double tokens_per_s = 0, seconds = 0;
  SpecStats spec;
};

// Decode-phase throughput: prompts are prefilled (and the first tokens drawn) before timing.
Run measure(const PolicyModel& model, const DraftModel* draft, const SpecSettings& s, int64_t B,
            const std::vector<std::vector<int32_t>>& prompts, int64_t tokens, float temperature, bool capture = false) {
  const int64_t prompt = static_cast<int64_t>(prompts[0].size());
  EngineOptions o;
  o.max_batch = B;
  o.prefill_chunk = B * prompt;
  o.kv_cache_bytes = int64_t{1} << 30;
  o.spec = s;
  Engine e(model, o, draft);
  for (int64_t b = 0; b < B; ++b) {
    GenRequest r;
    r.prompt = prompts[static_cast<size_t>(b) % prompts.size()];
    r.params.temperature = temperature;
    r.params.has_seed = true;
    r.params.seed = static_cast<uint64_t>(b + 1);
    r.params.max_new_tokens = tokens + 1;
    r.params.ignore_eos = true;
    r.capture = capture;  // the drafter's training data (aux states + teacher top-k) while generating
    e.submit(r);
  }
  e.step();  // prefill (+ the first token, + the first proposal)
  const SpecStats before = e.stats().spec;
  const int64_t gen0 = e.stats().generated_tokens;
  const double t0 = now_s();
  while (e.has_work())
    e.step();
  Run r;
  r.seconds = now_s() - t0;
  r.tokens_per_s = static_cast<double>(e.stats().generated_tokens - gen0) / r.seconds;
  r.spec = e.stats().spec;
  r.spec.rounds -= before.rounds;
  r.spec.accepted -= before.accepted;
  r.spec.drafted -= before.drafted;
  r.spec.draft_seconds -= before.draft_seconds;
  r.spec.verify_seconds -= before.verify_seconds;
  for (size_t j = 0; j < before.accepted_at.size(); ++j)
    r.spec.accepted_at[j] -= before.accepted_at[j];
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, capture_cost = false;
  int64_t tokens = 32;
  std::vector<int64_t> batches = {1, 4, 16, 64};
  std::string draft_dir, model_dir;
  float temperature = 0;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--capture-cost"))
      capture_cost = true;
    else if (!std::strcmp(argv[i], "--quick"))
      quick = true;
    else if (!std::strcmp(argv[i], "--tokens") && i + 1 < argc)
      tokens = std::stoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--batch") && i + 1 < argc)
      batches = {std::stoll(argv[++i])};
    else if (!std::strcmp(argv[i], "--draft") && i + 1 < argc)
      draft_dir = argv[++i];
    else if (!std::strcmp(argv[i], "--model") && i + 1 < argc)
      model_dir = argv[++i];
    else if (!std::strcmp(argv[i], "--temperature") && i + 1 < argc)
      temperature = std::stof(argv[++i]);
  }

  std::printf("updraft speculative decoding benchmark (%s)\n", quick ? "quick" : "full");
  const bench::MachineLimits m = bench::probe_machine(quick ? (size_t{256} << 20) : (size_t{1} << 30));
  std::printf("machine: %d threads, measured streaming read bandwidth %.1f GB/s\n", m.threads, m.read_gbps);
  PolicyModel model = model_dir.empty() ? random_policy(bench::bench_policy_config(quick), 1, DType::BF16)
                                        : PolicyModel::load(model_dir);
  const PolicyConfig cfg = model.config();
  // Prompts: held-out corpus prompts through the model's tokenizer, or fixed pseudo-random ids.
  std::vector<std::vector<int32_t>> prompts;
  if (!model_dir.empty()) {
    const Tokenizer tok = Tokenizer::load(model_dir);
    for (const corpus::Sample& smp : corpus::make_samples(corpus::Mix{}, corpus::Split::kHeldOut, 64, 3))
      prompts.push_back(tok.encode(smp.prompt));
  } else {
    for (int64_t b = 0; b < 64; ++b) {
      std::vector<int32_t> p;
      for (int64_t i = 0; i < 32; ++i)
        p.push_back(static_cast<int32_t>((b * 7919 + i * 104729) % cfg.vocab_size));
      prompts.push_back(p);
    }
  }
  const double wbytes = static_cast<double>(cfg.weight_bytes(DType::BF16) - cfg.vocab_size * cfg.hidden_size * 2);
  DraftConfig dc;
  dc.hidden_size = dc.target_hidden_size = cfg.hidden_size;
  dc.intermediate_size = cfg.intermediate_size;
  dc.num_heads = cfg.num_heads;
  dc.num_kv_heads = cfg.num_kv_heads;
  dc.head_dim = cfg.head_dim;
  dc.vocab_size = cfg.vocab_size;
  dc.draft_vocab_size = cfg.vocab_size / 4;
  const DraftModel draft = draft_dir.empty() ? random_draft(dc, spread_vocab(dc.draft_vocab_size, cfg.vocab_size),
                                                            model.draft_target(), 2, DType::BF16)
                                             : DraftModel::load(draft_dir, model.draft_target());
  std::printf("policy: %s, Llama-style, %ld layers, hidden %ld, vocab %ld, bf16 weights %.0f MiB\n", model_dir.empty() ? "random" : model_dir.c_str(),
              cfg.num_layers, cfg.hidden_size, cfg.vocab_size, cfg.weight_bytes(DType::BF16) / 1048576.0);
  std::printf("drafter: %s, draft vocabulary %ld\n", draft_dir.empty() ? "random (untrained)" : draft_dir.c_str(),
              draft.config().draft_vocab_size);
  std::printf("workload: %s prompts, %ld tokens per sequence at temperature %.2f, timed after prefill\n\n",
              model_dir.empty() ? "32-token pseudo-random" : "held-out corpus", tokens, temperature);
  std::printf("%-18s %5s %10s %10s %7s %6s %8s %7s %7s %7s  %s\n", "setting", "batch", "plain t/s", "spec t/s", "ratio",
              "tau", "roofline", "draft", "verify", "other", "accept per position");
  const std::vector<std::pair<const char*, SpecSettings>> settings = {{"chain 4", {4, 1, 5}},
                                                                      {"tree 4x3 (10 tok)", {4, 3, 10}}};
  for (int64_t B : batches) {
    const Run plain = measure(model, nullptr, {}, B, prompts, tokens, temperature);
    const double steps_per_s = plain.tokens_per_s / static_cast<double>(B);
    const double roof = wbytes * steps_per_s / 1e9 / m.read_gbps;
    for (const auto& [name, s] : settings) {
      const Run sp = measure(model, &draft, s, B, prompts, tokens, temperature);
      const double other = sp.seconds - sp.spec.draft_seconds - sp.spec.verify_seconds;
      std::string acc;
      for (size_t j = 0; j < static_cast<size_t>(s.steps); ++j) {
        const double a = sp.spec.rounds == 0 || j >= sp.spec.accepted_at.size()
                             ? 0.0
                             : static_cast<double>(sp.spec.accepted_at[j]) / static_cast<double>(sp.spec.rounds);
        acc += (j ? " " : "") + std::to_string(a).substr(0, 4);
      }
      std::printf("%-18s %5ld %10.1f %10.1f %6.2fx %6.2f %7.0f%% %6.0f%% %6.0f%% %6.0f%%  %s\n", name, B,
                  plain.tokens_per_s, sp.tokens_per_s, sp.tokens_per_s / plain.tokens_per_s, sp.spec.tau(),
                  100.0 * roof, 100.0 * sp.spec.draft_seconds / sp.seconds, 100.0 * sp.spec.verify_seconds / sp.seconds,
                  100.0 * other / sp.seconds, acc.c_str());
      std::fflush(stdout);
    }
  }
  if (capture_cost) {  // record capture (docs/messaging.md): its cost on tokens/s, side by side
    std::printf("\ncapture cost (aux states + teacher top-16 of every position, in-engine):\n");
    const SpecSettings chain{4, 1, 5};
    for (int64_t B : batches)
      for (const bool spec : {false, true}) {
        Run off, on;
        for (int rep = 0; rep < 2; ++rep) {  // interleaved, best of two each
          const Run a = measure(model, spec ? &draft : nullptr, spec ? chain : SpecSettings{}, B, prompts, tokens, temperature);
          const Run b = measure(model, spec ? &draft : nullptr, spec ? chain : SpecSettings{}, B, prompts, tokens, temperature, true);
          if (a.tokens_per_s > off.tokens_per_s)
            off = a;
          if (b.tokens_per_s > on.tokens_per_s)
            on = b;
        }
        std::printf("  %-8s batch %3ld: %8.1f t/s without, %8.1f t/s with capture: cost %.1f%%\n", spec ? "chain 4" : "plain",
                    B, off.tokens_per_s, on.tokens_per_s, 100.0 * (1.0 - on.tokens_per_s / off.tokens_per_s));
      }
  }
  std::printf(
      "\nroofline: plain decode's weight bytes per second as a share of the measured read bandwidth. draft, "
      "verify, other: shares of the speculative run's time (other = sampling, bookkeeping).\n");
  return 0;
}
