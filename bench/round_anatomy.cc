#include "bench/round_anatomy.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "bench/bench_args.h"
#include "kernels/core/error.h"
#include "kernels/ops/gemm.h"

namespace updraft::bench {
namespace {

// One step that feeds `ctx` fixed pseudo-random tokens of context into kv.
std::vector<SeqStep> context_step(SeqKv& kv, int64_t ctx, int64_t vocab) {
  std::vector<SeqStep> pre(1);
  pre[0].kv = &kv;
  for (int64_t i = 0; i < ctx; ++i)
    pre[0].tokens.push_back(static_cast<int32_t>((i * 7 + 3) % vocab));
  return pre;
}

// T policy rows after ctx tokens of context, repeatable (the rows are dropped after each run):
// the forward whose time and parts the anatomy reports, and the plain step (T = 1) that streams
// the policy's weights through the caches between two drafter passes in a round.
class PolicyRows {
 public:
  PolicyRows(const PolicyModel& m, int64_t ctx, int64_t T)
      : m_(m),
        ctx_(ctx),
        T_(T),
        cache_(m.kv_shape(), KvCache::blocks_for_bytes(m.kv_shape(), 16, int64_t{64} << 20), 16) {
    UPD_CHECK(cache_.reserve(kv_, ctx + T)) << "round anatomy: KV cache too small";
    std::vector<SeqStep> pre = context_step(kv_, ctx, m.config().vocab_size);
    m.forward(cache_, pre);
  }
  // Every row's logits, aux states when T > 1.
  void run(ForwardProfile* profile = nullptr) {
    std::vector<SeqStep> st(1);
    st[0].kv = &kv_;
    for (int64_t i = 0; i < T_; ++i) {
      st[0].tokens.push_back(static_cast<int32_t>((i * 11 + 5) % m_.config().vocab_size));
      st[0].logit_rows.push_back(static_cast<int32_t>(i));
    }
    ForwardOptions fo;
    fo.aux = T_ > 1;
    fo.profile = profile;
    m_.forward(cache_, st, fo);
    cache_.truncate(kv_, ctx_);
  }

 private:
  const PolicyModel& m_;
  int64_t ctx_, T_;
  KvCache cache_;
  SeqKv kv_;
};

// The median forward of T rows and the profile of that median forward.
struct Timed {
  double seconds = 0;
  ForwardProfile parts;
};

Timed policy_forward(const PolicyModel& m, int64_t ctx, int64_t T, int reps) {
  PolicyRows rows(m, ctx, T);
  std::vector<Timed> runs;
  for (int r = 0; r < reps; ++r) {
    Timed t;
    const double t0 = now_s();
    rows.run(&t.parts);
    t.seconds = now_s() - t0;
    runs.push_back(t);
  }
  std::sort(runs.begin(), runs.end(), [](const Timed& a, const Timed& b) { return a.seconds < b.seconds; });
  return runs[runs.size() / 2];
}

// A drafter pass of `rows` rows after ctx tokens of context, repeatable (the rows are dropped
// after each pass): with `features`, the pass that absorbs a round's committed tokens (the
// policy's aux states through fc, logits at the last row), else a draft step (logits at every row).
class DraftRows {
 public:
  DraftRows(const DraftModel& d, const PolicyModel& m, int64_t ctx, int64_t max_rows)
      : d_(d),
        ctx_(ctx),
        H_(m.config().hidden_size),
        A_(static_cast<int64_t>(d.aux_layers().size())),
        act_(m.act_dtype()),
        cache_(d.kv_shape(), KvCache::blocks_for_bytes(d.kv_shape(), 16, int64_t{16} << 20), 16) {
    UPD_CHECK(cache_.reserve(kv_, ctx + max_rows)) << "round anatomy: draft KV cache too small";
    std::vector<SeqStep> pre = context_step(kv_, ctx, m.config().vocab_size);
    d.forward(cache_, pre, Tensor::zeros({ctx, A_ * H_}, act_));
  }
  // The pass's seconds.
  double run(int64_t rows, bool features) {
    std::vector<SeqStep> st(1);
    st[0].kv = &kv_;
    for (int64_t i = 0; i < rows; ++i) {
      st[0].tokens.push_back(static_cast<int32_t>(5 + i));
      if (!features || i == rows - 1)
        st[0].logit_rows.push_back(static_cast<int32_t>(i));
    }
    const Tensor fed = Tensor::zeros({rows, features ? A_ * H_ : H_}, act_);
    const double t0 = now_s();
    d_.forward(cache_, st, fed, /*states_at_logit_rows=*/features);  // as the engine absorbs
    const double t = now_s() - t0;
    cache_.truncate(kv_, ctx_);
    return t;
  }

 private:
  const DraftModel& d_;
  int64_t ctx_, H_, A_;
  DType act_;
  KvCache cache_;
  SeqKv kv_;
};

// The median drafter pass of `rows` rows (DraftRows::run). With `after`, each timed pass follows a
// plain policy step, as the absorbing pass follows the verification in a round: the drafter's
// weights come back from the cache level the policy's stream left them in.
double draft_step_s(const DraftModel& d, const PolicyModel& m, int64_t ctx, int64_t rows, int reps, bool features,
                    PolicyRows* after = nullptr) {
  DraftRows pass(d, m, ctx, rows);
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    if (after != nullptr)
      after->run();
    t.push_back(pass.run(rows, features));
  }
  return median(t);
}

// Medians over rounds run in the engine's order (the verification, the pass that absorbs the
// committed tokens, the draft steps), each part timed in place, so each meets the caches the
// previous parts left; the plain steps run back to back, as in plain decoding. Blocks of rounds
// and blocks of plain steps take turns, so both come from the same spells of the machine.
struct InRound {
  double plain = 0, verify = 0, absorb = 0, drafts = 0;
  double round() const { return verify + absorb + drafts; }
};

InRound in_round(const PolicyModel& m, const DraftModel& d, const SpecSettings& s, int64_t committed, int64_t ctx,
                 int reps) {
  constexpr int kBlock = 5;
  PolicyRows plain(m, ctx, 1), verify(m, ctx, s.draft_tokens);
  DraftRows draft(d, m, ctx, std::max(committed, s.top_k));
  std::vector<double> p, v, a, ds;
  for (int r = 0; r < reps; r += kBlock) {
    for (int i = 0; i < kBlock; ++i) {
      const double t0 = now_s();
      plain.run();
      p.push_back(now_s() - t0);
    }
    for (int i = 0; i < kBlock; ++i) {
      const double t0 = now_s();
      verify.run();
      v.push_back(now_s() - t0);
      a.push_back(draft.run(committed, true));
      double sum = 0;
      for (int64_t k = 1; k < s.steps; ++k)
        sum += draft.run(s.top_k, false);
      ds.push_back(sum);
    }
  }
  return {median(p), median(v), median(a), median(ds)};
}

// Multiply-adds per row of the policy's matmuls (projections, MLP, LM head).
double matmul_params(const PolicyConfig& c) {
  const double H = static_cast<double>(c.hidden_size), I = static_cast<double>(c.intermediate_size);
  const double q = H * static_cast<double>(c.num_heads * c.head_dim);
  const double kv = H * static_cast<double>(c.num_kv_heads * c.head_dim);
  return static_cast<double>(c.num_layers) * (2 * q + 2 * kv + 3 * H * I) + H * static_cast<double>(c.vocab_size);
}

struct Bound {
  double seconds;
  const char* by;
};

Bound matmul_bound(const PolicyModel& m, int64_t T, double read_gbps, double peak_gflops) {
  const double params = matmul_params(m.config());
  const double bytes = params * static_cast<double>(dtype_size(m.lm_head().dtype()));
  const double by_bytes = bytes / (read_gbps * 1e9);
  const double by_flops = 2.0 * params * static_cast<double>(T) / (peak_gflops * 1e9);
  return by_bytes >= by_flops ? Bound{by_bytes, "bytes"} : Bound{by_flops, "flops"};
}

// Attention over T new causal rows after ctx cached keys (row i sees ctx + i + 1 keys): every
// layer's keys and values read once, and 4 flops per head, visible key and dimension (scores and
// value sums) at the f32 FMA peak.
Bound attention_bound(const PolicyModel& m, int64_t ctx, int64_t T, double read_gbps, double fma_gflops) {
  const PolicyConfig& c = m.config();
  const double per_key = static_cast<double>(c.num_layers * c.head_dim);
  const double bytes = 2.0 * per_key * static_cast<double>(c.num_kv_heads * (ctx + T) * dtype_size(m.act_dtype()));
  const double visible = static_cast<double>(T * ctx) + static_cast<double>(T * (T + 1)) / 2.0;
  const double flops = 4.0 * per_key * static_cast<double>(c.num_heads) * visible;
  const double by_bytes = bytes / (read_gbps * 1e9), by_flops = flops / (fma_gflops * 1e9);
  return by_bytes >= by_flops ? Bound{by_bytes, "bytes"} : Bound{by_flops, "flops"};
}

void print_forward(const char* what, const Timed& f, const Bound& b, const Bound& a, double plain_s) {
  std::printf(
      "%s %.3f ms (%.2f plain steps): matmuls %.3f ms (their bound %.3f ms by %s: %.0f%%), attention "
      "%.3f ms (its bound %.3f ms by %s: %.0f%%), the rest %.3f ms\n",
      what, 1e3 * f.seconds, f.seconds / plain_s, 1e3 * f.parts.matmul_s, 1e3 * b.seconds, b.by,
      100.0 * b.seconds / f.parts.matmul_s, 1e3 * f.parts.attention_s, 1e3 * a.seconds, a.by,
      100.0 * a.seconds / f.parts.attention_s, 1e3 * (f.parts.total_s - f.parts.matmul_s - f.parts.attention_s));
}

// The engine's policy forwards of one kind, averaged, under the anatomy's line for that forward.
void print_engine_forwards(const ForwardProfile& ef, const char* which) {
  if (ef.forwards == 0)
    return;
  const double n = static_cast<double>(ef.forwards);
  std::printf(
      "  %-18s   in the engine, %s averaged %.3f ms: matmuls %.3f ms, attention %.3f ms, the rest %.3f ms (%ld "
      "forwards)\n",
      "", which, 1e3 * ef.total_s / n, 1e3 * ef.matmul_s / n, 1e3 * ef.attention_s / n,
      1e3 * (ef.total_s - ef.matmul_s - ef.attention_s) / n, ef.forwards);
}

struct Limits {
  double bw, peak, fma;
};

// One setting's lines: its verification alone and its parts, then its rounds in the engine's order.
void print_setting(const PolicyModel& policy, const DraftModel& dm, const AnatomySetting& r, const Limits& lim,
                   const Timed& p1, int64_t ctx, int reps) {
  const SpecSettings& s = r.settings;
  const Timed v = policy_forward(policy, ctx, s.draft_tokens, reps);
  // A round's drafter passes: one absorbs its committed tokens (tau of them, all the drafts and
  // the bonus token where tau is not measured) through fc and proposes the first level, then
  // steps - 1 passes of top_k rows propose the rest. The absorbing pass is timed right after a
  // policy step, as it runs in a round (the verification streamed the policy's weights through
  // the cores' L2 and left the drafter's further out); the proposing passes follow it.
  const int64_t committed = r.tau > 0 ? std::max<int64_t>(1, std::lround(r.tau)) : s.steps + 1;
  const double absorb_warm = draft_step_s(dm, policy, ctx, committed, reps, true);
  PolicyRows between(policy, ctx, 1);
  const double absorb = draft_step_s(dm, policy, ctx, committed, reps, true, &between);
  const double d = draft_step_s(dm, policy, ctx, s.top_k, reps, false);
  const double round = v.seconds + absorb + static_cast<double>(s.steps - 1) * d;
  char what[96];
  std::snprintf(what, sizeof what, "  %-18s verify %2ld rows", r.name.c_str(), s.draft_tokens);
  print_forward(what, v, matmul_bound(policy, s.draft_tokens, lim.bw, lim.peak),
                attention_bound(policy, ctx, s.draft_tokens, lim.bw, lim.fma), p1.seconds);
  print_engine_forwards(r.engine_forwards, "the same forward");
  std::printf(
      "  %-18s + absorbing %ld tokens %.3f ms (after a policy step; %.3f ms with the drafter's weights warm) + %ld "
      "draft steps of %.3f ms (%.2f each) = %.2f plain steps per round\n",
      "", committed, 1e3 * absorb, 1e3 * absorb_warm, s.steps - 1, 1e3 * d, d / p1.seconds, round / p1.seconds);
  const InRound o = in_round(policy, dm, s, committed, ctx, reps);
  std::printf(
      "  %-18s in round order (taking turns with plain steps of %.3f ms): verify %.3f ms (%.2f plain steps) + "
      "absorbing %.3f ms + draft steps %.3f ms = %.2f plain steps per round, %.2fx the parts alone",
      "", 1e3 * o.plain, 1e3 * o.verify, o.verify / o.plain, 1e3 * o.absorb, 1e3 * o.drafts, o.round() / o.plain,
      (o.round() / o.plain) / (round / p1.seconds));
  if (r.tau > 0)
    std::printf(
        "; at the measured tau %.2f that predicts %.2fx; the engine's round took %.3f ms (%.2fx the round in "
        "order)",
        r.tau, r.tau * o.plain / o.round(), 1e3 * r.engine_round_s, r.engine_round_s / o.round());
  std::printf("\n");
}

}  // namespace

void print_round_anatomy(const PolicyModel& policy, const DraftModel& draft, const std::vector<AnatomySetting>& rows,
                         const MachineLimits& machine, int64_t ctx, int reps, const ForwardProfile& engine_plain) {
  const double wbytes = matmul_params(policy.config()) * static_cast<double>(dtype_size(policy.lm_head().dtype()));
  const Limits lim{probe_read_gbps(static_cast<size_t>(wbytes)), bf16_peak_gflops(machine, ops::cpu_bf16_kernel()),
                   machine.fma_gflops};
  std::printf(
      "\nround anatomy at batch 1, context %ld (median of %d; cpu bf16 kernel %s, bounds at %.1f GB/s read over "
      "the weights' %.0f MiB, a %.0f GFLOP/s peak for the matmuls and the f32 FMA peak of %.0f GFLOP/s for "
      "attention):\n",
      ctx, reps, ops::cpu_bf16_kernel_name(ops::cpu_bf16_kernel()), lim.bw, wbytes / 1048576.0, lim.peak, lim.fma);
  const Timed p1 = policy_forward(policy, ctx, 1, reps);
  print_forward("  plain step", p1, matmul_bound(policy, 1, lim.bw, lim.peak),
                attention_bound(policy, ctx, 1, lim.bw, lim.fma), p1.seconds);
  print_engine_forwards(engine_plain, "plain decoding's forward");
  for (const AnatomySetting& r : rows)
    print_setting(policy, r.draft != nullptr ? *r.draft : draft, r, lim, p1, ctx, reps);
  std::printf("\n");
}

}  // namespace updraft::bench
