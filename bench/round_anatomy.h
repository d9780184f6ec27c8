// The round anatomy spec_bench prints at batch 1: one policy forward of T causal rows (what
// verifying T - 1 drafts computes), the drafter pass that absorbs a round's committed tokens
// (tau of them where measured, else all drafts and the bonus token) and one drafter step, each
// timed alone after `ctx` tokens of context (median of `reps`), in plain decode steps; the
// policy's parts (matmuls, attention, the rest) with the matmuls against their roofline bound
// max(weight bytes / bandwidth, flops / peak), the bandwidth measured over a buffer the size of
// the weights (so it is the cache's where they fit, as they stay there from step to step) and the
// peak the process's bf16 kernel's, and attention against max(key and value bytes / the same
// bandwidth, its flops / the f32 FMA peak); the engine's forwards (plain decoding's, each
// setting's verifications) under the anatomy's; then each setting's rounds run in the engine's
// order (verification, absorbing pass, draft steps, each part timed where it meets the caches the
// others left), taking turns with blocks of plain steps, and the engine's measured round against
// that sum.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "bench/machine_probe.h"
#include "drafter/draft_model.h"
#include "drafter/draft_tree.h"
#include "rollout/policy_model.h"

namespace updraft::bench {

struct AnatomySetting {
  std::string name;
  SpecSettings settings;
  double tau = 0;             // measured in the engine run
  double engine_round_s = 0;  // that run's seconds per round
  ForwardProfile engine_forwards;  // that run's policy forwards (all verifications at batch 1)
  const DraftModel* draft = nullptr;  // the drafter its draft steps time; nullptr: the one passed
};

void print_round_anatomy(const PolicyModel& policy, const DraftModel& draft, const std::vector<AnatomySetting>& rows,
                         const MachineLimits& machine, int64_t ctx, int reps, const ForwardProfile& engine_plain);

}  // namespace updraft::bench
