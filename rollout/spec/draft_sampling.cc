#include "rollout/spec/draft_sampling.h"

#include <cmath>

#include "kernels/core/error.h"

namespace updraft {

const char* draft_sampling_name(DraftSampling m) {
  switch (m) {
    case DraftSampling::kAuto:
      return "auto";
    case DraftSampling::kOn:
      return "on";
    case DraftSampling::kOff:
      return "off";
  }
  return "?";
}

DraftSampling parse_draft_sampling(const std::string& s) {
  for (DraftSampling m : {DraftSampling::kAuto, DraftSampling::kOn, DraftSampling::kOff})
    if (s == draft_sampling_name(m))
      return m;
  throw Error("sampled drafts: '" + s + "' is not one of auto, on, off");
}

bool DrawChooser::draw() const {
  return mode_ == DraftSampling::kOn || (mode_ == DraftSampling::kAuto && s_.draw);
}

void DrawChooser::observe(double overlap_sum, double top_sum, int64_t nodes) {
  if (nodes <= 0)
    return;
  const double n = static_cast<double>(nodes), w = s_.nodes == 0 ? 1.0 : 1.0 - std::pow(1.0 - kEma, n);
  s_.overlap = (1 - w) * s_.overlap + w * overlap_sum / n;
  s_.top = (1 - w) * s_.top + w * top_sum / n;
  s_.nodes += nodes;
  if (s_.nodes < kMinNodes)
    return;
  if (s_.draw && s_.top > s_.overlap * (1 + kMargin))
    s_.draw = false;
  else if (!s_.draw && s_.overlap > s_.top * (1 + kMargin))
    s_.draw = true;
}

void DrawChooser::drafter_changed() {
  s_ = Snapshot();
}

}  // namespace updraft
