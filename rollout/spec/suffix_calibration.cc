#include "rollout/spec/suffix_calibration.h"

#include <algorithm>

#include "kernels/core/error.h"

namespace updraft {

int SuffixCalibration::bucket(int64_t match) {
  UPD_CHECK(match >= 1) << "suffix calibration: a matched context of " << match << " tokens";
  return match <= 4 ? 0 : match < 8 ? 1 : match < 16 ? 2 : 3;
}

const SuffixCalibration::Cell& SuffixCalibration::cell(DraftSource source, int64_t match) const {
  UPD_CHECK(source == DraftSource::kGroup || source == DraftSource::kHistory)
      << "suffix calibration: source " << draft_source_name(source) << " is not a suffix index";
  return cells_[source == DraftSource::kGroup ? 0 : 1][static_cast<size_t>(bucket(match))];
}

SuffixCalibration::Cell& SuffixCalibration::cell(DraftSource source, int64_t match) {
  return const_cast<Cell&>(static_cast<const SuffixCalibration&>(*this).cell(source, match));
}

double SuffixCalibration::kappa(DraftSource source, int64_t match) const {
  const Cell& c = cell(source, match);
  return (c.accepted + kPrior) / (c.prob + kPrior);
}

double SuffixCalibration::calibrated(DraftSource source, int64_t match, double prob) const {
  return std::min(1.0, prob * kappa(source, match));
}

void SuffixCalibration::observe(const DraftTree& tree, const std::vector<int32_t>& accepted) {
  for (auto& per_source : cells_)
    for (Cell& c : per_source) {
      c.trials *= kDecay;
      c.accepted *= kDecay;
      c.prob *= kDecay;
    }
  if (tree.graft_prob.empty())
    return;
  const auto n = static_cast<size_t>(tree.size());
  UPD_CHECK(tree.graft_prob.size() == n && tree.graft_match.size() == n && tree.source.size() == n)
      << "suffix calibration: a tree of " << n << " nodes with " << tree.graft_prob.size() << " graft entries";
  std::vector<uint8_t> on_path(n, 0);
  on_path[0] = 1;
  for (int32_t a : accepted) {
    UPD_CHECK(a > 0 && static_cast<size_t>(a) < n) << "suffix calibration: accepted node " << a << " of " << n;
    on_path[static_cast<size_t>(a)] = 1;
  }
  for (size_t i = 1; i < n; ++i) {
    if (tree.graft_match[i] < 1 || on_path[static_cast<size_t>(tree.parent[i])] == 0)
      continue;  // not grafted, or verification never reached it
    Cell& c = cell(tree.source[i], tree.graft_match[i]);
    c.trials += 1;
    c.accepted += on_path[i];
    c.prob += tree.graft_prob[i];
  }
}

}  // namespace updraft
