#include "bench/spec_measure.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "bench/bench_args.h"
#include "kernels/core/host_arena.h"
#include "rollout/engine/engine.h"
#include "rollout/spec/adaptive.h"

namespace updraft::bench {

Arm::Arm(const PolicyModel& model, const DraftModel* draft, const SpecSettings& s, const Workload& w, bool adaptive,
         DraftSampling drafts)
    : w_(w) {
  size_t longest = 0;
  for (const auto& p : *w.prompts)
    longest = std::max(longest, p.size());
  EngineOptions o;
  o.max_batch = w.B;
  o.prefill_chunk = w.B * static_cast<int64_t>(longest);
  // Four times what the batch can hold at once (prompt, tokens, a round's tree; finished
  // sequences kept for prefix reuse are evicted as needed), 16 MiB to 1 GiB: the arms hold their
  // engines side by side, and each cache is allocated whole.
  const int64_t per_seq = static_cast<int64_t>(longest) + w.tokens + 2 + std::max<int64_t>(1, s.draft_tokens);
  const int64_t blocks = w.B * ((per_seq + o.block_size - 1) / o.block_size + 1);
  o.kv_cache_bytes = std::clamp<int64_t>(4 * blocks * KvCache::block_bytes(model.kv_shape(), o.block_size),
                                         int64_t{16} << 20, int64_t{1} << 30);
  o.spec = s;
  o.draft_sampling = drafts;
  engine_ = std::make_unique<Engine>(model, o, draft);
  if (adaptive && draft != nullptr) {
    chooser_ = std::make_unique<AdaptiveDepth>(s);
    engine_->set_depth_chooser(chooser_.get());
  }
}

Arm::~Arm() = default;

void Arm::run_batch(int64_t g, bool timed) {
  Engine& e = *engine_;
  const std::vector<std::vector<int32_t>>& prompts = *w_.prompts;
  for (int64_t b = 0; b < w_.B; ++b) {
    const int64_t i = g * w_.B + b;
    GenRequest q;
    q.prompt = prompts[static_cast<size_t>(i) % prompts.size()];
    q.params.temperature = w_.temperature;
    q.params.has_seed = true;
    q.params.seed = static_cast<uint64_t>(i + 1);
    q.params.max_new_tokens = w_.tokens + 1;
    q.params.ignore_eos = w_.ignore_eos;
    q.capture = w_.capture;
    e.submit(q);
  }
  e.step();  // prefill (+ the first token, + the first proposal)
  const SpecStats before = e.stats().spec;
  const std::vector<int64_t> depths0 = e.stats().depth_steps;
  const int64_t gen0 = e.stats().generated_tokens;
  const double cap0 = e.stats().capture_seconds;
  const double t0 = now_s();
  while (e.has_work())
    e.step();
  if (!timed)
    return;
  run_.seconds += now_s() - t0;
  run_.capture_seconds += e.stats().capture_seconds - cap0;
  run_.tokens += e.stats().generated_tokens - gen0;
  SpecStats d = e.stats().spec;
  d.subtract(before);
  run_.spec.merge(d);
  const std::vector<int64_t>& depths = e.stats().depth_steps;
  run_.depth_steps.resize(std::max(run_.depth_steps.size(), depths.size()), 0);
  for (size_t k = 0; k < depths.size(); ++k)
    run_.depth_steps[k] += depths[k] - (k < depths0.size() ? depths0[k] : 0);
}

Run Arm::result() const {
  Run r = run_;
  r.tokens_per_s = r.seconds > 0 ? static_cast<double>(r.tokens) / r.seconds : 0.0;
  r.forwards = engine_->decode_forward_parts();
  return r;
}

std::vector<Run> take_turns(const PolicyModel& model, const std::vector<ArmSpec>& arms, int64_t groups, int reps,
                            const Workload& w, int64_t warmup) {
  std::vector<Run> total(arms.size());
  for (int rep = 0; rep < reps; ++rep) {
    std::vector<std::unique_ptr<Arm>> live;
    const bool huge = host_huge_pages();
    for (const ArmSpec& a : arms) {
      set_host_huge_pages(huge && !a.small_pages);
      live.push_back(
          std::make_unique<Arm>(a.model != nullptr ? *a.model : model, a.draft, a.settings, w, a.adaptive, a.drafts));
      set_host_huge_pages(huge);
    }
    for (size_t i = 0; i < arms.size(); ++i)
      for (int64_t g = 0; arms[i].adaptive && g < warmup; ++g)
        live[i]->run_batch(groups + g, false);
    // Each batch the order turns by one arm: an arm that always followed plain decoding's turn
    // found the drafter's weights evicted (two copies of one setting, side by side, read 2.65x
    // and 2.84x plain in one run).
    for (int64_t g = 0; g < groups; ++g)
      for (size_t i = 0; i < live.size(); ++i)
        live[(static_cast<size_t>(g) + i) % live.size()]->run_batch(g);
    for (size_t i = 0; i < arms.size(); ++i)
      total[i].add(live[i]->result());
  }
  return total;
}

void print_capture_cost(const PolicyModel& model, const DraftModel& draft, const std::vector<int64_t>& batches,
                        int64_t sequences, int reps, Workload w) {
  const int pairs = std::max(reps, 5);
  std::printf("\ncapture cost (aux states + teacher top-16 of every position, in-engine; %d interleaved pairs):\n",
              pairs);
  const SpecSettings chain{4, 1, 5};
  for (int64_t B : batches)
    for (const bool spec : {false, true}) {
      std::vector<double> cost, share;
      double off_tps = 0, on_tps = 0;
      const int64_t groups = std::max<int64_t>(1, sequences / B);
      w.B = B;
      for (int rep = 0; rep < pairs; ++rep) {
        Run a, b;  // a without capture, b with
        for (int half = 0; half < 2; ++half) {
          w.capture = (half == 0) == (rep % 2 == 1);
          const ArmSpec arm{spec ? &draft : nullptr, spec ? chain : SpecSettings{}};
          (w.capture ? b : a) = take_turns(model, {arm}, groups, 1, w).front();
        }
        cost.push_back(100.0 * (1.0 - b.tokens_per_s / a.tokens_per_s));
        share.push_back(100.0 * b.capture_seconds / b.seconds);
        off_tps += a.tokens_per_s / pairs;
        on_tps += b.tokens_per_s / pairs;
      }
      std::string each;
      for (double c : cost) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%s%.1f", each.empty() ? "" : " ", c);
        each += buf;
      }
      std::printf(
          "  %-8s batch %3ld: %8.1f t/s without, %8.1f t/s with (means): cost median %.1f%% (pairs: %s); "
          "capture work timed in-engine %.1f%% of the time\n",
          spec ? "chain 4" : "plain", B, off_tps, on_tps, median(cost), each.c_str(), median(share));
    }
}

// One line of the table: a setting at batch B against plain decoding in the same turns.
void print_setting_row(const std::string& name, const SpecSettings& s, int64_t B, const Run& plain, const Run& sp,
                       const char* roof) {
  const double other = sp.seconds - sp.spec.draft_seconds - sp.spec.verify_seconds;
  std::string acc;
  for (size_t j = 0; j < static_cast<size_t>(s.steps); ++j) {
    const double a = sp.spec.rounds == 0 || j >= sp.spec.accepted_at.size()
                         ? 0.0
                         : static_cast<double>(sp.spec.accepted_at[j]) / static_cast<double>(sp.spec.rounds);
    acc += (j ? " " : "") + std::to_string(a).substr(0, 4);
  }
  std::printf("%-18s %5ld %10.1f %10.1f %6.2fx %6.2f %8s %6.0f%% %6.0f%% %6.0f%%  %s\n", name.c_str(), B,
              plain.tokens_per_s, sp.tokens_per_s, sp.tokens_per_s / plain.tokens_per_s, sp.spec.tau(), roof,
              100.0 * sp.spec.draft_seconds / sp.seconds, 100.0 * sp.spec.verify_seconds / sp.seconds,
              100.0 * other / sp.seconds, acc.c_str());
  std::fflush(stdout);
}

// The adaptive arm's line (the depth chosen per step, up to `s`'s), then the share of its timed
// decode steps at each depth.
void print_adaptive_row(const std::pair<std::string, SpecSettings>& s, int64_t B, const Run& plain, const Run& sp,
                        const char* roof) {
  print_setting_row("adaptive", s.second, B, plain, sp, roof);
  int64_t steps = 0;
  for (int64_t n : sp.depth_steps)
    steps += n;
  std::string shares;
  for (size_t d = 0; d < sp.depth_steps.size(); ++d)
    if (sp.depth_steps[d] > 0) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%s%zu: %.0f%%", shares.empty() ? "" : ", ", d,
                    100.0 * static_cast<double>(sp.depth_steps[d]) / static_cast<double>(std::max<int64_t>(1, steps)));
      shares += buf;
    }
  std::printf("  (adaptive: depth chosen per step up to %s; its decode steps by depth: %s)\n", s.first.c_str(),
              shares.c_str());
}

}  // namespace updraft::bench
