// Kernels benchmark: how close decode-shaped GEMV gets to the memory bandwidth and
// prefill-shaped GEMM to the FMA peak, both measured on this machine in the same run.
//
//   build/bin/kernels_bench [--quick] [--cpu-kernel auto|portable|avx2|fma|dot|amx]
//
// Prints the machine limits, then one line per shape with the achieved rate and its fraction
// (the process's bf16 kernel), the draft proposal's top k, the built-in policy's attention over
// 1-16 rows, the built-in drafter's products in bf16 and int8, then a decode step's matmuls at policy shapes for every
// bf16 kernel this CPU has against their roofline bound: one call per product, and (lines "-grp", "amx-panel") grouped
// as the policy's forward issues them, the two taking turns.
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_args.h"
#include "bench/machine_probe.h"
#include "kernels/core/host_arena.h"
#include "kernels/ops.h"

using namespace updraft;

namespace {

Tensor random_tensor(const Shape& s, DType dt, uint64_t seed) {
  Tensor t = Tensor::empty(s, DType::F32);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i)
    p[i] = d(rng);
  return t.to_dtype(dt);
}

template <typename F>
double median_seconds(int reps, F&& f) {
  f();  // warm-up
  std::vector<double> ts;
  for (int i = 0; i < reps; ++i) {
    const double t0 = bench::now_s();
    f();
    ts.push_back(bench::now_s() - t0);
  }
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

// Two ways of doing the same work, taking turns (`reps` rounds): the median seconds of each, so
// that their ratio holds on a host whose speed drifts. Each turn runs its way twice and times the
// second run, which meets the caches as the way's own previous call left them (as a decode step
// meets the last one's), not as the other way's did: the two ways' weights together overflow the
// last-level cache where one way's alone partly stays in it from call to call.
template <typename F, typename G>
std::pair<double, double> median_seconds_pair(int reps, F&& f, G&& g) {
  std::vector<double> tf, tg;
  for (int i = 0; i < reps; ++i) {
    f();
    double t0 = bench::now_s();
    f();
    tf.push_back(bench::now_s() - t0);
    g();
    t0 = bench::now_s();
    g();
    tg.push_back(bench::now_s() - t0);
  }
  std::sort(tf.begin(), tf.end());
  std::sort(tg.begin(), tg.end());
  return {tf[tf.size() / 2], tg[tg.size() / 2]};
}

// One decode step's matmuls of a Llama-shaped policy (q, k, v, o, gate, up, down per layer, then
// the LM head), bf16 weights, T rows each.
struct PolicyShapes {
  const char* name;
  int64_t layers, hidden, inter, q_out, kv_out, vocab;
};

// For each bf16 kernel this CPU has: the step's matmuls at T rows, against their roofline bound
// max(weight bytes / read bandwidth over the weights, flops / the kernel's peak); kernels and row
// counts take turns (`reps` rounds) and each figure is the median.
void policy_shapes_section(const bench::MachineLimits& m, const PolicyShapes& p, int reps) {
  std::vector<Tensor> ws;
  for (int64_t l = 0; l < p.layers; ++l)
    for (auto [n, k] : std::vector<std::array<int64_t, 2>>{{p.q_out, p.hidden}, {p.kv_out, p.hidden},
                                                           {p.kv_out, p.hidden}, {p.hidden, p.q_out},
                                                           {p.inter, p.hidden}, {p.inter, p.hidden},
                                                           {p.hidden, p.inter}})
      ws.push_back(random_tensor({n, k}, DType::BF16, 10 + ws.size()));
  ws.push_back(random_tensor({p.vocab, p.hidden}, DType::BF16, 9));
  double bytes = 0;
  for (const Tensor& w : ws)
    bytes += static_cast<double>(w.nbytes());
  const double bw = bench::probe_read_gbps(static_cast<size_t>(bytes));
  std::printf("\nlinear at %s's shapes (one decode step's matmuls, %.0f MiB bf16; read bandwidth over that much: "
              "%.1f GB/s; median of %d rounds)\n%-9s %4s %10s %12s %9s\n",
              p.name, bytes / 1048576.0, bw, reps, "kernel", "T", "ms", "bound ms", "of bound");
  const ops::CpuBf16Kernel saved = ops::cpu_bf16_kernel();
  // Each kernel twice: one call per product, then grouped as the policy's forward issues them (q,
  // k and v in one call, gate and up in one, each group sharing its input: one pass of the thread
  // team, one rounding or packing), from the weights' tile panels (prepare_linear) on AMX. Then
  // the process's kernel grouped from panels in huge pages (as prepared for serving) against the
  // same panels in 4 KiB pages (kernels/core/host_arena.h), taking turns.
  std::map<ops::CpuBf16Kernel, std::vector<ops::LinearWeight>> prepared;
  std::vector<ops::LinearWeight> small_pages;
  if (host_huge_pages()) {
    set_host_huge_pages(false);
    for (const Tensor& w : ws)
      small_pages.push_back(ops::prepare_linear(w));
    set_host_huge_pages(true);
  }
  for (ops::CpuBf16Kernel k :
       {ops::CpuBf16Kernel::kAvx2, ops::CpuBf16Kernel::kFma, ops::CpuBf16Kernel::kDot, ops::CpuBf16Kernel::kAmx}) {
    if (!ops::cpu_bf16_kernel_available(k))
      continue;
    ops::set_cpu_bf16_kernel(k);
    for (const Tensor& w : ws)
      prepared[k].push_back(ops::prepare_linear(w));
  }
  ops::set_cpu_bf16_kernel(saved);
  const auto grouped = [&](const std::vector<ops::LinearWeight>& pw, const std::vector<Tensor>& xs,
                           const std::vector<Tensor>& ys) {
    return [&pw, &xs, &ys] {
      for (size_t i = 0; i < pw.size();) {
        const size_t n = i == pw.size() - 1 ? 1 : std::array<size_t, 7>{3, 0, 0, 1, 2, 0, 1}[i % 7];
        std::vector<ops::LinearProduct> group;
        for (size_t j = i; j < i + n; ++j)
          group.push_back({&pw[j], nullptr, ys[j]});
        ops::linear_shared_input(xs[i], group);
        i += n;
      }
    };
  };
  for (int64_t T : {1, 2, 3, 5, 7, 10, 16}) {
    std::vector<Tensor> xs, ys;
    for (const Tensor& w : ws) {
      xs.push_back(random_tensor({T, w.size(1)}, DType::F32, 2));
      ys.push_back(Tensor::empty({T, w.size(0)}, DType::F32));
    }
    for (ops::CpuBf16Kernel k : {ops::CpuBf16Kernel::kPortable, ops::CpuBf16Kernel::kAvx2, ops::CpuBf16Kernel::kFma,
                                 ops::CpuBf16Kernel::kDot, ops::CpuBf16Kernel::kAmx}) {
      if (!ops::cpu_bf16_kernel_available(k))
        continue;
      ops::set_cpu_bf16_kernel(k);
      const auto one_by_one = [&] {
        for (size_t i = 0; i < ws.size(); ++i)
          ops::linear(xs[i], ws[i], nullptr, ys[i]);
      };
      const double bound = std::max(bytes / (bw * 1e9), T * bytes / (bench::bf16_peak_gflops(m, k) * 1e9));
      const auto print = [&](const std::string& name, double s) {
        std::printf("%-9s %4ld %10.3f %12.3f %8.0f%%\n", name.c_str(), T, s * 1e3, bound * 1e3, 100 * bound / s);
      };
      if (prepared.count(k) == 0) {
        print(ops::cpu_bf16_kernel_name(k), median_seconds(reps, one_by_one));
        continue;
      }
      const auto [s, sg] = median_seconds_pair(reps, one_by_one, grouped(prepared[k], xs, ys));
      const std::string grp =
          k == ops::CpuBf16Kernel::kAmx ? "amx-panel" : ops::cpu_bf16_kernel_name(k) + std::string("-grp");
      print(ops::cpu_bf16_kernel_name(k), s);
      print(grp, sg);
      if (k == saved && !small_pages.empty()) {
        const auto [sh, s4] = median_seconds_pair(reps, grouped(prepared[k], xs, ys), grouped(small_pages, xs, ys));
        print(grp + "-huge", sh);
        print(grp + "-4k", s4);
      }
    }
  }
  ops::set_cpu_bf16_kernel(saved);
}

// The built-in drafter's products as a draft step issues them (q, k and v from the 2H-wide input;
// o; gate and up; down; the draft vocabulary's head), plus fc for the pass that absorbs a round's
// tokens (T >= 4), with bf16 weights (the process's kernel, its panels) and with int8 weights (the
// CPU's int8 kernel), the two taking turns. Its few MiB stay in the caches between calls here: in
// a round the policy's stream evicts them (spec_bench's round anatomy measures that case).
void drafter_section(int reps) {
  if (!ops::cpu_has_int8_tiles() && !ops::cpu_has_int8_vectors())
    return;
  const int64_t H = 448, I = 1216, KV = 224, V = 1024;
  const std::vector<std::vector<std::array<int64_t, 2>>> groups = {
      {{H, 2 * H}, {KV, 2 * H}, {KV, 2 * H}}, {{H, H}}, {{I, H}, {I, H}}, {{H, I}}, {{V, H}}, {{H, 3 * H}}};
  std::vector<std::vector<ops::LinearWeight>> bf16(groups.size()), int8(groups.size());
  double bytes = 0;
  for (size_t g = 0; g < groups.size(); ++g)
    for (auto [n, k] : groups[g]) {
      const Tensor w = random_tensor({n, k}, DType::BF16, 40 + n + k);
      bf16[g].push_back(ops::prepare_linear(w));
      int8[g].push_back(ops::prepare_linear_int8(w));
      bytes += g + 1 < groups.size() ? static_cast<double>(w.nbytes()) : 0;
    }
  std::printf(
      "\nthe built-in drafter's products (%.1f MiB in bf16 per draft step, fc too from 4 rows; %s; int8 %s; "
      "taking turns, median of %d)\n",
      bytes / 1048576.0, ops::cpu_bf16_kernel_name(ops::cpu_bf16_kernel()), ops::cpu_int8_kernel_name(), reps);
  std::printf("%-4s %10s %10s %14s\n", "T", "bf16 ms", "int8 ms", "int8 / bf16");
  for (const int64_t T : {1, 2, 3, 4, 5, 6, 7, 8}) {
    const size_t used = T >= 4 ? groups.size() : groups.size() - 1;
    std::vector<Tensor> xs, ys;
    for (size_t g = 0; g < used; ++g) {
      xs.push_back(random_tensor({T, groups[g][0][1]}, DType::F32, 50 + g));
      for (auto [n, k] : groups[g])
        ys.push_back(Tensor::empty({T, n}, DType::F32));
    }
    const auto step = [&](const std::vector<std::vector<ops::LinearWeight>>& w) {
      size_t y = 0;
      for (size_t g = 0; g < used; ++g) {
        std::vector<ops::LinearProduct> products;
        for (const ops::LinearWeight& lw : w[g])
          products.push_back({&lw, nullptr, ys[y++]});
        ops::linear_shared_input(xs[g], products);
      }
    };
    const auto [sb, si] = median_seconds_pair(
        reps, [&] { step(bf16); }, [&] { step(int8); });
    std::printf("%-4ld %10.3f %10.3f %13.2fx\n", T, sb * 1e3, si * 1e3, si / sb);
  }
}

// The drafter's proposal at every draft step (drafter/proposer.cc): the top k of log_softmax
// over the built-in drafter's 1024-token draft vocabulary, for R rows; one fused op against
// log_softmax then topk, as the proposer ran them until session 26.
void proposal_section(int reps) {
  const int64_t C = 1024;
  std::printf("\ndraft proposal, top k of log_softmax over %ld columns (microseconds per call, 200 calls per sample)\n",
              C);
  std::printf("%-4s %-4s %10s %12s %8s\n", "R", "k", "fused", "two ops", "ratio");
  for (const int64_t R : {1, 4, 16})
    for (const int64_t k : {1, 8, 64}) {  // 64: a sampling chain's fetch (q's support)
      Tensor x = random_tensor({R, C}, DType::F32, 5), lp = Tensor::empty({R, C}, DType::F32),
             v = Tensor::empty({R, k}, DType::F32), i = Tensor::empty({R, k}, DType::I32);
      const auto per_call = [&](auto f) {
        return median_seconds(reps,
                              [&] {
                                for (int n = 0; n < 200; ++n)
                                  f();
                              }) /
               200 * 1e6;
      };
      const double fused = per_call([&] { ops::top_log_softmax(x, k, v, i); });
      const double two = per_call([&] {
        ops::log_softmax(x, lp);
        ops::topk(lp, k, v, i);
      });
      std::printf("%-4ld %-4ld %10.2f %12.2f %7.2fx\n", R, k, fused, two, two / fused);
    }
}

// The built-in policy's attention (8 layers of 8 query heads over 4 kv heads of 56) for T new rows
// of one sequence after `ctx` cached keys, each row seeing the context and the rows before it
// through a tree mask (a chain: what verifying T - 1 drafts computes): the time of the 8 layers'
// paged_attention, its cost per row against one row's, and its share of the f32 FMA peak (2 x 2
// flops per row, head, visible key and dimension: scores and value sums).
void attention_section(const bench::MachineLimits& m, int reps) {
  const int64_t layers = 8, NH = 8, NKV = 4, HD = 56, BS = 16;
  std::printf(
      "\nattention at the built-in policy's shapes (%ld layers, %ld heads over %ld kv heads of %ld; median of %d)\n",
      layers, NH, NKV, HD, reps);
  std::printf("%-6s %-4s %10s %14s %10s\n", "ctx", "T", "us", "per row / 1", "of peak");
  for (const int64_t ctx : {int64_t{64}, int64_t{1024}}) {
    const int64_t slots = (ctx + 16 + BS - 1) / BS * BS;
    ops::PagedKv kv{random_tensor({slots, NKV, HD}, DType::F32, 6), random_tensor({slots, NKV, HD}, DType::F32, 7), BS};
    std::vector<int32_t> blocks(static_cast<size_t>(slots / BS));
    for (size_t b = 0; b < blocks.size(); ++b)
      blocks[b] = static_cast<int32_t>(blocks.size() - 1 - b);  // scattered the other way round
    double one_row = 0;
    for (const int64_t T : {1, 2, 5, 10, 16}) {
      Tensor q = random_tensor({T, NH, HD}, DType::F32, 8), out = Tensor::empty({T, NH, HD}, DType::F32);
      Tensor mask = Tensor::zeros({T, T}, DType::Bool);
      for (int64_t i = 0; i < T; ++i)
        for (int64_t j = 0; j <= i; ++j)
          mask.data<uint8_t>()[i * T + j] = 1;
      const Tensor table = Tensor::from_i32(blocks, {1, static_cast<int64_t>(blocks.size())});
      const Tensor kv_len = Tensor::from_i32({static_cast<int32_t>(ctx + T)}, {1});
      const Tensor q_start = Tensor::from_i32({0, static_cast<int32_t>(T)}, {2});
      const double s = median_seconds(reps, [&] {
        for (int64_t l = 0; l < layers; ++l)
          ops::paged_attention(q, kv, table, kv_len, q_start, mask, 0.13f, out);
      });
      if (T == 1)
        one_row = s;
      const double flops = 4.0 * static_cast<double>(layers * NH * HD) * static_cast<double>(T * ctx + T * (T + 1) / 2);
      std::printf("%-6ld %-4ld %10.1f %13.2fx %9.0f%%\n", ctx, T, s * 1e6, s / static_cast<double>(T) / one_row,
                  100 * flops / s / 1e9 / m.fma_gflops);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::string cpu_kernel;
  CLI::App app{"updraft kernels_bench: the CPU kernels against the machine's measured limits"};
  app.add_flag("--quick", quick, "smaller shapes and fewer rounds");
  app.add_option("--cpu-kernel", cpu_kernel, "the CPU's bf16 kernel: auto, portable, avx2, fma, dot or amx");
  CLI11_PARSE(app, argc, argv);
  if (!cpu_kernel.empty())
    ops::set_cpu_bf16_kernel(ops::parse_cpu_bf16_kernel(cpu_kernel));
  std::printf("updraft kernels benchmark (%s)\n", quick ? "quick" : "full");
  const bench::MachineLimits m = bench::probe_machine(quick ? (size_t{256} << 20) : (size_t{1} << 30));
  std::printf("machine: %d threads, AVX-512 %s, cpu bf16 kernel %s\n", m.threads, m.avx512 ? "yes" : "no",
              ops::cpu_bf16_kernel_name(ops::cpu_bf16_kernel()));
  std::printf("measured streaming read bandwidth : %7.1f GB/s\n", m.read_gbps);
  std::printf("measured f32 FMA peak             : %7.1f GFLOP/s\n\n", m.fma_gflops);

  // Decode: y[T,N] = x[T,K] w[N,K]^T with w far larger than the last-level cache.
  const int64_t K = 4096, N = 16384;  // 128 MiB in bf16: four times the 32 MiB L3 of these machines
  std::printf("GEMV (decode) w[%ld,%ld]: bf16 %.0f MiB, f32 %.0f MiB\n", N, K, N * K * 2 / 1048576.0,
              N * K * 4 / 1048576.0);
  struct Row {
    DType wt;
    int64_t T;
    double ms, gbps;
  };
  std::vector<Row> rows;
  for (DType wt : {DType::BF16, DType::F32}) {
    // Prepared as the policy's serving weights are (ops::prepare_linear: the bf16 kernel's panels
    // where it has them; a bf16 weight without them is packed on every call on the dot kernel).
    const ops::LinearWeight w = ops::prepare_linear(random_tensor({N, K}, wt, 1));
    for (int64_t T : {1, 2, 4, 8}) {
      Tensor x = random_tensor({T, K}, DType::F32, 2), y = Tensor::empty({T, N}, DType::F32);
      const double s = median_seconds(quick ? 5 : 15, [&] { ops::linear(x, w, nullptr, y); });
      const double bytes = static_cast<double>(w.w.nbytes() + x.nbytes() + y.nbytes());
      rows.push_back({wt, T, s * 1e3, bytes / s / 1e9});
    }
  }
  // The probe is a lower bound: the batch-1 GEMV itself can stream faster than the probe's
  // loop. The stricter reference is the best rate any measured read achieved in this run.
  double best_bw = m.read_gbps;
  for (const Row& r : rows)
    best_bw = std::max(best_bw, r.gbps);
  std::printf("reference bandwidth: probe %.1f GB/s, best observed read %.1f GB/s\n", m.read_gbps, best_bw);
  std::printf("%-6s %-4s %10s %10s %12s %12s %14s\n", "wtype", "T", "ms", "GB/s", "of probe", "of best",
              "FMA-bound at");
  double worst_gemv = 1.0, worst_gemv_strict = 1.0;
  for (const Row& r : rows) {
    // Roofline: 2*T flops per weight; the FMA peak caps the weight stream at peak/(2T) weights/s.
    const double ceiling = m.fma_gflops / (2.0 * r.T) * static_cast<double>(dtype_size(r.wt));
    worst_gemv = std::min(worst_gemv, r.gbps / m.read_gbps);
    worst_gemv_strict = std::min(worst_gemv_strict, r.gbps / best_bw);
    std::printf("%-6s %-4ld %10.3f %10.1f %11.0f%% %11.0f%% %9.1f GB/s\n", dtype_name(r.wt), r.T, r.ms, r.gbps,
                100 * r.gbps / m.read_gbps, 100 * r.gbps / best_bw, ceiling);
  }

  // Prefill: y[T,N] = x[T,K] w[N,K]^T.
  std::printf("\nGEMM (prefill)\n%-6s %-16s %10s %10s %10s\n", "wtype", "T x K x N", "ms", "GFLOP/s", "of peak");
  double best_gemm_f32 = 0;
  for (DType wt : {DType::F32, DType::BF16}) {
    for (auto [T, Kp, Np] : std::vector<std::array<int64_t, 3>>{{256, 2048, 2048}, {512, 2048, 5632}}) {
      if (quick && T > 256)
        continue;
      Tensor w = random_tensor({Np, Kp}, wt, 3), x = random_tensor({T, Kp}, DType::F32, 4),
             y = Tensor::empty({T, Np}, DType::F32);
      const double s = median_seconds(quick ? 3 : 7, [&] { ops::linear(x, w, nullptr, y); });
      const double gflops = 2.0 * T * Kp * Np / s / 1e9;
      if (wt == DType::F32)
        best_gemm_f32 = std::max(best_gemm_f32, gflops);
      char shape[64];
      std::snprintf(shape, sizeof shape, "%ldx%ldx%ld", T, Kp, Np);
      std::printf("%-6s %-16s %10.2f %10.1f %9.0f%%\n", dtype_name(wt), shape, s * 1e3, gflops,
                  100 * gflops / m.fma_gflops);
    }
  }
  proposal_section(quick ? 5 : 15);
  attention_section(m, quick ? 15 : 101);
  drafter_section(quick ? 15 : 101);
  policy_shapes_section(m, {"the built-in policy", 8, 448, 1216, 448, 224, 1964}, quick ? 5 : 15);
  if (!quick)
    policy_shapes_section(m, {"the benchmarks' 383 MiB policy", 12, 1024, 2816, 1024, 256, 32000}, 5);
  std::printf(
      "\nsummary: GEMV worst fraction of bandwidth %.0f%% of probe, %.0f%% of best observed (target 70%%);"
      " GEMM f32 best fraction of FMA peak %.0f%% (target 60%%)\n",
      100 * worst_gemv, 100 * worst_gemv_strict, 100 * best_gemm_f32 / m.fma_gflops);
  return 0;
}
