// Plain decoding throughput of the policy runtime at batch 1, 4, 16 and 64, on a random
// Llama-style model whose weights far exceed the last-level cache, measured side by side in one
// run with the machine's streaming read bandwidth. Decode is memory-bound: each step reads every
// weight once (plus the KV cache), so the figure of merit at batch 1 is achieved GB/s as a
// fraction of the measured bandwidth; at larger batches the same bytes serve more tokens.
//
// `decode_bench --help` lists the options. usage: decode_bench [--quick] [--steps N] [--batch B (only this batch size)]
//                     [--cpu-kernel auto|portable|fma|dot|amx]
//                     [--teams [--model DIR]]: batch-1 decode on a second thread, alone and beside
//                     an idle OpenMP team (kernels/core/cpu_team.h), on the bench policy or DIR's
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_args.h"
#include "bench/bench_policy.h"
#include "bench/machine_probe.h"
#include "kernels/core/cpu_team.h"
#include "kernels/ops/gemm.h"
#include "rollout/engine/engine.h"
#include "rollout/random_policy.h"

using namespace updraft;

namespace {

using bench::now_s;

struct Row {
  int64_t batch;
  double step_ms, tokens_per_s, gbps;
};

// Seconds per greedy decode step of B sequences after a `prompt`-token prefill, over `steps`.
double step_seconds(const PolicyModel& model, int64_t B, int64_t prompt, int64_t steps) {
  const int64_t vocab = model.config().vocab_size;
  EngineOptions o;
  o.max_batch = B;
  o.prefill_chunk = B * prompt;
  o.kv_cache_bytes = int64_t{1} << 30;
  Engine e(model, o);
  for (int64_t b = 0; b < B; ++b) {
    GenRequest r;
    for (int64_t i = 0; i < prompt; ++i)
      r.prompt.push_back(static_cast<int32_t>((b * 7919 + i * 104729) % vocab));
    r.params.temperature = 0;
    r.params.max_new_tokens = steps + 2;
    r.params.ignore_eos = true;
    e.submit(r);
  }
  e.step();  // prefill of every prompt (+ first token)
  e.step();  // warm-up decode step
  const double s0 = now_s();
  for (int64_t s = 0; s < steps; ++s)
    e.step();
  return (now_s() - s0) / static_cast<double>(steps);
}

// --teams: batch-1 decode on a second thread (as a worker decodes), alone and beside the main
// thread's idle OpenMP team (kernels/core/cpu_team.h), arms interleaved, medians of `reps`.
void compare_teams(const PolicyModel& model, int64_t steps, int reps) {
  const int threads = omp_get_max_threads();
  auto on_thread = [&] {
    double dt = 0;
    std::thread t([&] {
      omp_set_num_threads(threads);
      dt = step_seconds(model, 1, 32, steps);
    });
    t.join();
    return dt;
  };
  std::vector<double> alone, beside;
  for (int r = 0; r < reps; ++r) {
    release_cpu_team();
    alone.push_back(on_thread());
    std::atomic<int> ran{0};
#pragma omp parallel num_threads(threads)
    ran += 1;  // this thread now holds an idle team
    beside.push_back(on_thread());
    release_cpu_team();
  }
  std::sort(alone.begin(), alone.end());
  std::sort(beside.begin(), beside.end());
  const double a = alone[alone.size() / 2], b = beside[beside.size() / 2];
  std::printf(
      "batch-1 decode on a second thread, %d OpenMP threads, median of %d interleaved runs:\n"
      "  alone (the main thread's team released)  %.3f ms/step\n"
      "  beside the main thread's idle team       %.3f ms/step  (%.2fx slower)\n",
      threads, reps, 1e3 * a, 1e3 * b, b / a);
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, teams = false;
  std::string model_dir;
  int64_t steps = 24;
  std::vector<int64_t> batches = {1, 4, 16, 64};
  int64_t batch = 0;
  std::string cpu_kernel;
  CLI::App app{"updraft decode_bench: plain decoding's throughput against the machine's read bandwidth"};
  app.add_flag("--quick", quick, "a smaller policy and fewer steps");
  app.add_option("--steps", steps, "decode steps timed per batch size")
      ->check(CLI::Range(1, bench::kMost))
      ->capture_default_str();
  app.add_option("--batch", batch, "one batch size instead of 1, 4, 16 and 64")->check(CLI::Range(1, bench::kMost));
  app.add_option("--cpu-kernel", cpu_kernel, "the CPU's bf16 kernel: auto, portable, avx2, fma, dot or amx");
  app.add_flag("--teams", teams, "batch-1 decode on a second thread, alone and beside an idle OpenMP team");
  app.add_option("--model", model_dir, "with --teams: this policy instead of the bench policy");
  CLI11_PARSE(app, argc, argv);
  if (batch > 0)
    batches = {batch};
  if (!cpu_kernel.empty())
    ops::set_cpu_bf16_kernel(ops::parse_cpu_bf16_kernel(cpu_kernel));
  if (!model_dir.empty()) {
    if (!teams) {
      std::fprintf(stderr, "decode_bench: --model is read by --teams only\n");
      return 2;
    }
    const PolicyModel model = PolicyModel::load(model_dir);
    std::printf("updraft decode benchmark: CPU teams, policy %s, cpu bf16 kernel %s\n", model_dir.c_str(),
                ops::cpu_bf16_kernel_name(ops::cpu_bf16_kernel()));
    compare_teams(model, steps, 3);
    return 0;
  }
  const PolicyConfig cfg = bench::bench_policy_config(quick);

  std::printf("updraft decode benchmark (%s)\n", quick ? "quick" : "full");
  const bench::MachineLimits m = bench::probe_machine(quick ? (size_t{256} << 20) : (size_t{1} << 30));
  std::printf("machine: %d threads, measured streaming read bandwidth %.1f GB/s, cpu bf16 kernel %s\n", m.threads,
              m.read_gbps, ops::cpu_bf16_kernel_name(ops::cpu_bf16_kernel()));
  const double t0 = now_s();
  PolicyModel model = random_policy(cfg, 1, DType::BF16);
  const int64_t wbytes = cfg.weight_bytes(DType::BF16);
  const int64_t embed_bytes = cfg.vocab_size * cfg.hidden_size * 2;  // gathered, not streamed
  std::printf(
      "model: Llama-style, %ld layers, hidden %ld, heads %ld/%ld, vocab %ld, bf16 weights %.0f MiB "
      "(built in %.1f s); activations and KV cache f32\n",
      cfg.num_layers, cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.vocab_size, wbytes / 1048576.0,
      now_s() - t0);
  if (teams) {
    compare_teams(model, steps, 3);
    return 0;
  }
  const int64_t prompt = 32;
  std::printf("workload: prompt %ld tokens, then %ld greedy decode steps timed (prefill excluded)\n\n", prompt, steps);
  std::printf("%6s %10s %12s %10s %10s\n", "batch", "ms/step", "tokens/s", "GB/s", "of probe");

  std::vector<Row> rows;
  for (int64_t B : batches) {
    const double dt = step_seconds(model, B, prompt, steps);
    // Bytes one decode step must move: every weight except the embedding table (B rows of it),
    // plus the KV cache read (mean length) and written.
    const double kv_row = 2.0 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * 4;
    const double mean_len = prompt + 2 + steps / 2.0;
    const double bytes = static_cast<double>(wbytes - embed_bytes) + B * (mean_len + 1) * kv_row;
    Row r{B, dt * 1e3, B / dt, bytes / dt / 1e9};
    rows.push_back(r);
    std::printf("%6ld %10.2f %12.1f %10.1f %9.0f%%\n", r.batch, r.step_ms, r.tokens_per_s, r.gbps,
                100.0 * r.gbps / m.read_gbps);
    std::fflush(stdout);
  }
  if (rows.size() < 4)
    return 0;
  std::printf(
      "\nbatch-1 decode at %.0f%% of measured bandwidth (target >= 60%%); batch-16 throughput %.1fx batch 1 "
      "(target >= 5x); batch-64 %.1fx\n",
      100.0 * rows[0].gbps / m.read_gbps, rows[2].tokens_per_s / rows[0].tokens_per_s,
      rows[3].tokens_per_s / rows[0].tokens_per_s);
  return 0;
}
