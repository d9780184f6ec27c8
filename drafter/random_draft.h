// Random drafter weights for tests and benchmarks (until a trained drafter exists): every tensor
// a DraftConfig implies, EAGLE names, seeded values (linear weights ~ U(-a, a) with
// a = sqrt(3 / fan_in), norms ~ 1 +- 0.1), stored in `dtype`; the draft vocabulary is `vocab`.
#pragma once

#include <map>
#include <string>

#include "drafter/draft_model.h"

namespace updraft {

std::map<std::string, Tensor> random_draft_tensors(const DraftConfig& cfg, const VocabMap& vocab, uint64_t seed,
                                                   DType dtype);
DraftModel random_draft(const DraftConfig& cfg, const VocabMap& vocab, const DraftTarget& target, uint64_t seed,
                        DType dtype);
// Evenly spread draft vocabulary (target ids j * V / Vd).
VocabMap spread_vocab(int64_t draft_vocab, int64_t target_vocab);

}  // namespace updraft
