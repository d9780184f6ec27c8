// Plain decoding throughput of the policy runtime at batch 1, 4, 16 and 64, on a random
// Llama-style model whose weights far exceed the last-level cache, measured side by side in one
// run with the machine's streaming read bandwidth. Decode is memory-bound: each step reads every
// weight once (plus the KV cache), so the figure of merit at batch 1 is achieved GB/s as a
// fraction of the measured bandwidth; at larger batches the same bytes serve more tokens.
//
// usage: decode_bench [--quick] [--steps N] [--batch B (only this batch size)]
//                     [--cpu-kernel auto|portable|fma|dot|amx]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_policy.h"
#include "bench/machine_probe.h"
#include "kernels/ops/gemm.h"
#include "rollout/engine/engine.h"
#include "rollout/random_policy.h"

using namespace updraft;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Row {
  int64_t batch;
  double step_ms, tokens_per_s, gbps;
};

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  int64_t steps = 24;
  std::vector<int64_t> batches = {1, 4, 16, 64};
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick"))
      quick = true;
    else if (!std::strcmp(argv[i], "--cpu-kernel") && i + 1 < argc)
      ops::set_cpu_bf16_kernel(ops::parse_cpu_bf16_kernel(argv[++i]));
    else if (!std::strcmp(argv[i], "--steps") && i + 1 < argc)
      steps = std::stoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--batch") && i + 1 < argc)
      batches = {std::stoll(argv[++i])};
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
  const int64_t prompt = 32;
  std::printf("workload: prompt %ld tokens, then %ld greedy decode steps timed (prefill excluded)\n\n", prompt, steps);
  std::printf("%6s %10s %12s %10s %10s\n", "batch", "ms/step", "tokens/s", "GB/s", "of probe");

  std::vector<Row> rows;
  for (int64_t B : batches) {
    EngineOptions o;
    o.max_batch = B;
    o.prefill_chunk = B * prompt;
    o.kv_cache_bytes = int64_t{1} << 30;
    Engine e(model, o);
    for (int64_t b = 0; b < B; ++b) {
      GenRequest r;
      for (int64_t i = 0; i < prompt; ++i)
        r.prompt.push_back(static_cast<int32_t>((b * 7919 + i * 104729) % cfg.vocab_size));
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
    const double dt = (now_s() - s0) / static_cast<double>(steps);
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
