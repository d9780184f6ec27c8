// spec_bench's side-by-side measurement: the decode-phase throughput of plain or speculative
// decoding over batches of prompts, with the engine's counters, on the policy's device.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "drafter/draft_model.h"
#include "drafter/draft_tree.h"
#include "rollout/policy_model.h"
#include "rollout/spec/draft_sampling.h"
#include "rollout/spec/spec_stats.h"

namespace updraft {
class Engine;
class AdaptiveDepth;
}

namespace updraft::bench {

struct Run {
  double tokens_per_s = 0, seconds = 0;
  double capture_seconds = 0;  // in-engine time of the capture work (EngineStats::capture_seconds)
  int64_t tokens = 0;
  SpecStats spec;
  ForwardProfile forwards;  // the engine's policy forwards after prefill (Engine::decode_forward_parts)
  std::vector<int64_t> depth_steps;  // [d]: timed decode steps that ran at depth d (EngineStats)

  void add(const Run& o) {  // totals of interleaved repeats
    forwards.matmul_s += o.forwards.matmul_s;
    forwards.attention_s += o.forwards.attention_s;
    forwards.total_s += o.forwards.total_s;
    forwards.forwards += o.forwards.forwards;
    seconds += o.seconds;
    capture_seconds += o.capture_seconds;
    tokens += o.tokens;
    depth_steps.resize(std::max(depth_steps.size(), o.depth_steps.size()), 0);
    for (size_t d = 0; d < o.depth_steps.size(); ++d)
      depth_steps[d] += o.depth_steps[d];
    tokens_per_s = static_cast<double>(tokens) / seconds;
    spec.merge(o.spec);
  }
};

// What every arm decodes: batches of B sequences, batch g taking prompts g * B .. g * B + B - 1
// (wrapping around the list), each seeded by its index, up to `tokens` new tokens.
struct Workload {
  int64_t B = 1;
  const std::vector<std::vector<int32_t>>* prompts = nullptr;
  int64_t tokens = 0;
  float temperature = 0;
  bool ignore_eos = false;
  bool capture = false;  // the drafter's training data (aux states + teacher top-k) while generating
};

// One arm (plain: no drafter) on an engine of its own, batch by batch, so that several arms can
// take turns a batch at a time: the slow spells of a shared machine, which come and go within
// seconds, then touch every arm alike. Each batch is prefilled (and its first tokens drawn)
// before its decode phase is timed; times, tokens and counters add up over the batches run.
// With `adaptive`, the engine chooses the drafter's depth per step (rollout/spec/adaptive.h, up to
// the settings' depth), as `updraft serve` does.
class Arm {
 public:
  Arm(const PolicyModel& model, const DraftModel* draft, const SpecSettings& s, const Workload& w,
      bool adaptive = false, DraftSampling drafts = DraftSampling::kAuto);
  ~Arm();
  Arm(const Arm&) = delete;
  Arm& operator=(const Arm&) = delete;

  void run_batch(int64_t g, bool timed = true);  // untimed: adds nothing to result()
  Run result() const;                            // the timed batches run so far

 private:
  Workload w_;
  std::unique_ptr<AdaptiveDepth> chooser_;  // declared before the engine that points to it
  std::unique_ptr<Engine> engine_;
  Run run_;
};

// Arms taking turns batch by batch over `groups` batches (the order rotating by one arm each
// batch), `reps` times over (fresh engines each time): for each arm, the total over its turns.
struct ArmSpec {
  const DraftModel* draft;  // nullptr: plain decoding
  SpecSettings settings;
  const PolicyModel* model = nullptr;  // nullptr: take_turns' model
  bool small_pages = false;            // the engine's KV cache in 4 KiB pages (kernels/core/host_arena.h)
  bool adaptive = false;               // the depth chosen per step (Arm)
  DraftSampling drafts = DraftSampling::kAuto;  // EngineOptions::draft_sampling
};
// An adaptive arm first decodes `warmup` untimed batches of other prompts (batches groups ..
// groups + warmup - 1), as a long-lived engine has learned its costs and acceptance before.
std::vector<Run> take_turns(const PolicyModel& model, const std::vector<ArmSpec>& arms, int64_t groups, int reps,
                            const Workload& w, int64_t warmup = 0);

// Record capture's cost on tokens/s (docs/messaging.md), plain and chain 4 at each batch size:
// runs without and with capture (w.capture), back to back in alternating order so that the
// machine's slow drifts hit both sides of a pair alike; the median over pairs of the per-pair
// cost, and the in-engine timer's share of the captured runs' time (the work only capture does).
void print_capture_cost(const PolicyModel& model, const DraftModel& draft, const std::vector<int64_t>& batches,
                        int64_t sequences, int reps, Workload w);

// One line of spec_bench's table: a setting at batch B against plain decoding in the same turns
// (`roof`: plain decoding's share of the bandwidth bound, printed as given).
void print_setting_row(const std::string& name, const SpecSettings& s, int64_t B, const Run& plain, const Run& sp,
                       const char* roof);
// The adaptive arm's line (the depth chosen per step, up to `s`'s), then the share of its timed
// decode steps at each depth.
void print_adaptive_row(const std::pair<std::string, SpecSettings>& s, int64_t B, const Run& plain, const Run& sp,
                        const char* roof);

}  // namespace updraft::bench
