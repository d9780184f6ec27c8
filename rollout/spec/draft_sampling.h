// Whether a sampling request's chain draws its drafts from the drafter's distribution q
// (drafter/proposer.h: verified with min(1, p(x) / q(x))) or takes the drafter's top tokens
// (verified as point masses, accepted with p(x)). Neither wins everywhere: a drafter close to the
// policy accepts more with draws (expected acceptance sum_x min(p(x), q(x))), one that drifted
// (a domain it was not trained on) can accept more with its top token (p(argmax q)); the built-in
// pair at temperature 1 before the demo's domain switch: tau 3.87-4.03 drawing against 3.43-3.56,
// after it 1.28-1.54 against 1.55-1.74 in the first steps.
//
// kAuto measures both at every first child the verifier tries (a node the drafter proposed with
// its q recorded, whichever way it was chosen; rollout/spec/verifier.h, Verdict::q_overlap and
// q_top) and draws while the draws' expected acceptance is at least the top tokens' (hysteresis:
// the other must lead by `margin` to switch). Estimates are exponential means over about the last
// 1 / ema nodes; until min_nodes are measured (and again after a drafter swap) it draws. The
// choice is made before a step drafts, from earlier steps' rounds only, so every round stays
// lossless whichever way it goes.
//
// Thread safety: none; the engine's thread owns it.
#pragma once

#include <cstdint>
#include <string>

namespace updraft {

enum class DraftSampling { kAuto, kOn, kOff };
const char* draft_sampling_name(DraftSampling m);          // "auto", "on", "off"
DraftSampling parse_draft_sampling(const std::string& s);  // Error naming the choices otherwise

class DrawChooser {
 public:
  explicit DrawChooser(DraftSampling mode = DraftSampling::kAuto) : mode_(mode) {}
  bool draw() const;  // for the next step's chains
  // A step's verified first children: the sums over them of sum_x min(p(x), q(x)) and of
  // p(argmax q), and how many there were.
  void observe(double overlap_sum, double top_sum, int64_t nodes);
  void drafter_changed();  // a new drafter's q is measured afresh

  static constexpr double kEma = 0.01, kMargin = 0.02;
  static constexpr int64_t kMinNodes = 32;
  struct Snapshot {
    double overlap = 0, top = 0;  // the estimates (0: none yet)
    int64_t nodes = 0;            // nodes measured since the last drafter swap
    bool draw = true;
  };
  Snapshot snapshot() const { return s_; }

 private:
  DraftSampling mode_;
  Snapshot s_;
};

}  // namespace updraft
