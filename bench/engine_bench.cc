// The long-lived engine with per-step adaptive speculation (rollout/engine/engine.h,
// rollout/spec/adaptive.h), side by side in one run on the built-in policy and drafter:
//
//   --sweep  decode throughput at batch B: --sequences held-out prompts per batch size, B at a
//            time, each to end of text or --tokens (as RL rollouts end; --ignore-eos runs all to
//            --tokens, past the answers), timed after prefill, at temperatures 0 and 1: plain
//            decoding, always speculating at the full settings, and adaptive (the depth chosen per
//            step); one persistent engine per mode, as in a worker, warmed over every batch size
//            first (the adaptive model learns there), then --reps interleaved repetitions; each
//            figure is the median.
//   --rl     an RL-shaped batch: --prompts prompts x --group samples at temperature 1, each to end
//            of text or --max-new tokens (the spread of lengths of the demo's rollouts), submitted
//            at once and run to the last one: time to finish all per mode (median of --reps,
//            interleaved), and how the live batch and the chosen depth move over the run; plain and
//            adaptive again without prefix reuse (every sample prefills its prompt).
//
//   --dump-prompts FILE  writes the held-out prompts (token ids, one JSON list per line) and
//            exits: the request mix of bench/serve_load.py.
//
// `engine_bench --help` lists the options. usage: engine_bench [--sweep] [--rl] [--model DIR] [--draft DIR] [--tokens
// N] [--sequences S]
//                     [--ignore-eos] [--reps R]
//                     [--batches 1,2,4] [--prompts P] [--group G] [--max-new N] [--domain D]
//                     [--dump-prompts FILE] [--cpu-kernel auto|portable|fma|dot|amx] [--draft-weights bf16|int8|auto]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "bench/bench_args.h"
#include "bench/machine_probe.h"
#include "kernels/ops/gemm.h"
#include "rollout/engine/engine.h"
#include "rollout/tokenizer.h"
#include "trainer/corpus.h"

#ifndef UPDRAFT_SOURCE_DIR
#define UPDRAFT_SOURCE_DIR "."
#endif

using namespace updraft;

namespace {

using bench::median;
using bench::now_s;

// One mode: a persistent engine (and its chooser for adaptive).
struct Mode {
  std::string name;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<AdaptiveDepth> chooser;
};

std::vector<Mode> make_modes(const PolicyModel& model, const DraftModel& draft, const EngineOptions& eo) {
  std::vector<Mode> modes(3);
  modes[0] = {"plain", std::make_unique<Engine>(model, eo, nullptr), nullptr};
  modes[1] = {"always", std::make_unique<Engine>(model, eo, &draft), nullptr};
  modes[2] = {"adaptive", std::make_unique<Engine>(model, eo, &draft), std::make_unique<AdaptiveDepth>(eo.spec)};
  modes[2].engine->set_depth_chooser(modes[2].chooser.get());
  return modes;
}

struct Timed {
  double seconds = 0;
  int64_t tokens = 0, depth_steps = 0;
  double depth_sum = 0;
};

struct Workload {
  std::vector<std::vector<int32_t>> prompts;
  int64_t sequences = 32, tokens = 96;
  bool ignore_eos = false;
};

// Decode phases of `sequences` prompts, B at a time (each group timed after its prefill step).
Timed decode_phase(Engine& e, const Workload& w, int64_t B, float temp, uint64_t seed) {
  Timed t;
  for (int64_t g0 = 0; g0 < std::max(w.sequences, B); g0 += B) {
    for (int64_t b = 0; b < B; ++b) {
      GenRequest q;
      q.prompt = w.prompts[static_cast<size_t>(g0 + b) % w.prompts.size()];
      q.params.temperature = temp;
      q.params.has_seed = true;
      q.params.seed = seed + static_cast<uint64_t>(g0 + b);
      q.params.max_new_tokens = w.tokens + 1;
      q.params.ignore_eos = w.ignore_eos;
      e.submit(q);
    }
    e.step();  // prefill and the first token of every sequence
    const int64_t gen0 = e.stats().generated_tokens;
    const double t0 = now_s();
    while (e.has_work()) {
      e.step();
      if (e.stats().last_decoding > 0) {
        ++t.depth_steps;
        t.depth_sum += static_cast<double>(e.stats().last_depth);
      }
    }
    t.seconds += now_s() - t0;
    t.tokens += e.stats().generated_tokens - gen0;
  }
  return t;
}

// The adaptive model as it stands: per live-batch bucket the depth it runs, and each depth's
// measured cost per sequence-step relative to plain (samples) and predicted throughput.
void print_model(const AdaptiveDepth& a) {
  const AdaptiveDepth::Snapshot s = a.snapshot();
  std::printf("  adaptive model after %ld steps (%ld explored); reach per position:", s.steps, s.explore_steps);
  for (double r : s.reach)
    std::printf(" %.2f", r);
  std::printf("\n");
  for (int b = 0; b < AdaptiveDepth::kBuckets; ++b) {
    const auto& row = s.cells[static_cast<size_t>(b)];
    if (row[0].samples == 0 && row.back().samples == 0)
      continue;
    std::printf("    batch %3ld+ last chose depth %ld |", int64_t{1} << b, s.current[static_cast<size_t>(b)]);
    for (size_t d = 0; d < row.size(); ++d)
      std::printf(" d%ld: %s x%.2f (%ld) pred %.0f |", s.depths[d], row[d].samples ? "cost" : "n/a ",
                  row[0].cost > 0 && row[d].cost > 0 ? row[d].cost / row[0].cost : 0.0, row[d].samples,
                  a.predicted(b, s.depths[d]));
    std::printf("\n");
  }
}

void sweep(std::vector<Mode>& modes, const Workload& w, const std::vector<int64_t>& batches, int reps) {
  std::printf("%-5s %5s %10s %10s %10s %8s %8s %7s %9s\n", "temp", "batch", "plain t/s", "always t/s", "adapt t/s",
              "always", "adaptive", "depth", "explored");
  for (const float temp : {0.0f, 1.0f}) {
    for (Mode& m : modes)  // warm-up: every batch size once (the adaptive model learns its buckets)
      for (int64_t B : batches)
        decode_phase(*m.engine, w, B, temp, 7);
    for (int64_t B : batches) {
      std::vector<std::vector<double>> tps(modes.size());
      double depth = 0;
      int64_t depth_steps = 0;
      const int64_t explored0 = modes[2].chooser->snapshot().explore_steps, steps0 = modes[2].chooser->snapshot().steps;
      for (int r = 0; r < reps; ++r)
        for (size_t k = 0; k < modes.size(); ++k) {
          const size_t i = (k + static_cast<size_t>(r)) % modes.size();  // rotate who goes first
          const Timed t = decode_phase(*modes[i].engine, w, B, temp, 1000 + 100 * r);
          tps[i].push_back(static_cast<double>(t.tokens) / t.seconds);
          if (i == 2) {
            depth += t.depth_sum;
            depth_steps += t.depth_steps;
          }
        }
      const AdaptiveDepth::Snapshot s = modes[2].chooser->snapshot();
      const double plain = median(tps[0]), always = median(tps[1]), adaptive = median(tps[2]);
      std::printf("%-5.1f %5ld %10.1f %10.1f %10.1f %7.2fx %7.2fx %7.2f %8.1f%%\n", temp, B, plain, always, adaptive,
                  always / plain, adaptive / plain, depth_steps > 0 ? depth / static_cast<double>(depth_steps) : 0.0,
                  100.0 * static_cast<double>(s.explore_steps - explored0) /
                      std::max<double>(1.0, static_cast<double>(s.steps - steps0)));
      std::fflush(stdout);
    }
    print_model(*modes[2].chooser);
  }
}

struct RlRun {
  double seconds = 0;
  int64_t tokens = 0, reused_tokens = 0;
  std::vector<std::pair<double, std::pair<int64_t, int64_t>>> trace;  // (t, (live batch, depth)) per step
};

RlRun rl_batch(Engine& e, const std::vector<std::vector<int32_t>>& prompts, int64_t group, int64_t max_new,
               uint64_t seed) {
  e.drop_prefix_donors();  // an RL step's prompts are new: nothing from the last run may be taken
  const int64_t reused0 = e.stats().reused_tokens;
  for (size_t p = 0; p < prompts.size(); ++p)
    for (int64_t g = 0; g < group; ++g) {
      GenRequest q;
      q.prompt = prompts[p];
      q.params.temperature = 1.0f;
      q.params.has_seed = true;
      q.params.seed = seed + p * 131 + static_cast<uint64_t>(g);
      q.params.max_new_tokens = max_new;
      e.submit(q);
    }
  RlRun r;
  const int64_t g0 = e.stats().generated_tokens;
  const double t0 = now_s();
  while (e.has_work()) {
    e.step();
    r.trace.push_back({now_s() - t0, {e.stats().last_decoding, e.stats().last_depth}});
  }
  r.seconds = now_s() - t0;
  r.tokens = e.stats().generated_tokens - g0;
  r.reused_tokens = e.stats().reused_tokens - reused0;
  return r;
}

void rl(std::vector<Mode>& modes, const std::vector<std::vector<int32_t>>& prompts, int64_t group, int64_t max_new,
        int reps) {
  std::printf("RL-shaped batch: %zu prompts x %ld samples, temperature 1, up to %ld new tokens, submitted at once\n",
              prompts.size(), group, max_new);
  for (Mode& m : modes)  // warm-up (the adaptive model learns)
    rl_batch(*m.engine, prompts, group, max_new, 5);
  std::vector<std::vector<double>> secs(modes.size());
  std::vector<RlRun> last(modes.size());
  for (int r = 0; r < reps; ++r)
    for (size_t k = 0; k < modes.size(); ++k) {
      const size_t i = (k + static_cast<size_t>(r)) % modes.size();
      last[i] = rl_batch(*modes[i].engine, prompts, group, max_new, 99 + 1000 * r);
      secs[i].push_back(last[i].seconds);
    }
  const double plain = median(secs[0]);
  for (size_t i = 0; i < modes.size(); ++i)
    std::printf("  %-26s time to finish all %.3f s (median of %d)  %.2fx plain  tokens %ld  prompt tokens taken "
                "from the cache %ld\n",
                modes[i].name.c_str(), median(secs[i]), reps, plain / median(secs[i]), last[i].tokens,
                last[i].reused_tokens);
  std::printf("  adaptive over the last run, by tenths of its time: live batch / mean depth\n   ");
  const RlRun& a = last[2];
  for (int slice = 0; slice < 10; ++slice) {
    double batch = 0, depth = 0;
    int n = 0;
    for (const auto& [t, bd] : a.trace)
      if (t >= a.seconds * slice / 10 && t < a.seconds * (slice + 1) / 10) {
        batch += static_cast<double>(bd.first);
        depth += static_cast<double>(bd.second);
        ++n;
      }
    std::printf(" %4.1f/%.1f", n ? batch / n : 0.0, n ? depth / n : 0.0);
  }
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  bool do_sweep = false, do_rl = false;
  std::string dump;
  std::string model_dir = std::string(UPDRAFT_SOURCE_DIR) + "/models/small",
              draft_dir = std::string(UPDRAFT_SOURCE_DIR) + "/models/small-eagle3";
  int64_t tokens = 96, sequences = 32, prompts_n = 16, group = 4, max_new = 96;
  bool ignore_eos = false;
  int reps = 3;
  std::vector<int64_t> batches = {1, 2, 4, 8, 16, 32, 64};
  corpus::Mix mix;
  std::string domain, cpu_kernel, draft_weights;
  CLI::App app{"updraft engine_bench: the engine's adaptive depth against plain decoding and always speculating"};
  app.add_flag("--sweep", do_sweep, "batch sizes: plain, always speculating and adaptive");
  app.add_flag("--rl", do_rl, "the RL-shaped batch: prompts x group completions decoded together");
  app.add_option("--model", model_dir, "the policy")->capture_default_str();
  app.add_option("--draft", draft_dir, "the drafter")->capture_default_str();
  app.add_option("--tokens", tokens, "new tokens per sequence at most (--sweep)")
      ->check(CLI::Range(1, bench::kMost))
      ->capture_default_str();
  app.add_option("--sequences", sequences, "sequences per batch size (--sweep)")
      ->check(CLI::Range(1, bench::kMost))
      ->capture_default_str();
  app.add_flag("--ignore-eos", ignore_eos, "run every sequence to its token limit");
  app.add_option("--reps", reps, "turns of each arm")->check(CLI::Range(1, bench::kMost))->capture_default_str();
  app.add_option("--batches", batches, "batch sizes (--sweep)")->delimiter(',')->check(CLI::Range(1, bench::kMost));
  app.add_option("--prompts", prompts_n, "prompts per RL batch (--rl)")
      ->check(CLI::Range(1, bench::kMost))
      ->capture_default_str();
  app.add_option("--group", group, "completions per prompt (--rl)")
      ->check(CLI::Range(1, bench::kMost))
      ->capture_default_str();
  app.add_option("--max-new", max_new, "new tokens per completion at most (--rl)")
      ->check(CLI::Range(1, bench::kMost))
      ->capture_default_str();
  app.add_option("--domain", domain, "prompts of one domain only (default: the mix)")
      ->check(CLI::IsMember({"arith", "code"}));
  app.add_option("--dump-prompts", dump, "write the prompts to this file");
  app.add_option("--cpu-kernel", cpu_kernel, "the CPU's bf16 kernel: auto, portable, avx2, fma, dot or amx");
  app.add_option("--draft-weights", draft_weights, "the drafter's serving weights: bf16, int8 or auto")
      ->check(CLI::IsMember({"bf16", "int8", "auto"}));
  CLI11_PARSE(app, argc, argv);
  if (!domain.empty())
    mix = corpus::Mix::only(corpus::domain_from_name(domain));
  if (!cpu_kernel.empty())
    ops::set_cpu_bf16_kernel(ops::parse_cpu_bf16_kernel(cpu_kernel));
  if (!draft_weights.empty())
    set_draft_weights(parse_draft_weights(draft_weights));
  if (!do_sweep && !do_rl)
    do_sweep = do_rl = true;
  const bench::MachineLimits mach = bench::probe_machine(size_t{256} << 20);
  const PolicyModel model = PolicyModel::load(model_dir);
  const DraftModel draft = DraftModel::load(draft_dir, model.draft_target());
  const Tokenizer tok = Tokenizer::load(model_dir);
  std::vector<std::vector<int32_t>> prompts;
  for (const corpus::Sample& s : corpus::make_samples(mix, corpus::Split::kHeldOut, 64, 3))
    prompts.push_back(tok.encode(s.prompt));
  if (!dump.empty()) {
    FILE* f = std::fopen(dump.c_str(), "w");
    if (f == nullptr) {
      std::fprintf(stderr, "engine_bench: cannot write %s\n", dump.c_str());
      return 1;
    }
    for (const auto& p : prompts) {
      std::string line = "[";
      for (size_t i = 0; i < p.size(); ++i)
        line += (i ? "," : "") + std::to_string(p[i]);
      std::fprintf(f, "%s]\n", line.c_str());
    }
    std::fclose(f);
    return 0;
  }
  EngineOptions eo;
  eo.spec = SpecSettings{4, 1, 5};
  eo.max_batch = 64;
  eo.prefill_chunk = 4096;
  std::printf("updraft engine benchmark\nmachine: %d threads, streaming read %.1f GB/s, cpu bf16 kernel %s\n",
              mach.threads, mach.read_gbps, ops::cpu_bf16_kernel_name(ops::cpu_bf16_kernel()));
  std::printf("policy %s (%ld layers, hidden %ld), drafter %s (%s weights), speculation chain of %ld\n\n",
              model_dir.c_str(), model.config().num_layers, model.config().hidden_size, draft_dir.c_str(),
              draft_weights_name(draft.weights()), eo.spec.steps);
  std::vector<Mode> modes = make_modes(model, draft, eo);
  if (do_sweep) {
    std::printf("decode sweep: %ld held-out prompts per batch size, each to %s%ld new tokens, median of %d "
                "interleaved reps\n", sequences, ignore_eos ? "" : "end of text or ", tokens, reps);
    sweep(modes, Workload{prompts, sequences, tokens, ignore_eos}, batches, reps);
    std::printf("\n");
  }
  if (do_rl) {
    prompts.resize(static_cast<size_t>(std::min<int64_t>(prompts_n, static_cast<int64_t>(prompts.size()))));
    // The same engines without prefix reuse: each sample prefills its prompt.
    EngineOptions no_reuse = eo;
    no_reuse.prefix_reuse = false;
    std::vector<Mode> more = make_modes(model, draft, no_reuse);
    more[0].name = "plain, no prefix reuse";
    more[2].name = "adaptive, no prefix reuse";
    modes.push_back(std::move(more[0]));
    modes.push_back(std::move(more[2]));
    rl(modes, prompts, group, max_new, reps);
  }
  return 0;
}
