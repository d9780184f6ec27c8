// The draft vocabulary (eagle3.md B.2): the draft's lm_head has Vd rows, draft id j standing for
// target id draft_to_target[j]; the selected target ids are distinct and ascending. On disk it is
// two tensors: d2t i64 [Vd] of OFFSETS (target = j + d2t[j], not the id itself) and t2d bool [V]
// (t2d[v] iff v is selected).
//
// from_tensors validates: d2t has Vd entries, every j + d2t[j] lies in [0, V), the ids are
// strictly ascending (hence distinct), and t2d, when given, has V entries and marks exactly the
// selected ids. Any failure is an Error naming `where`, the index and the value.
// from_counts picks the Vd most frequent ids (ties by lower id, zero-frequency ids padding a
// short list in id order, as SpecForge and speculators do).
#pragma once

#include <string>
#include <vector>

#include "kernels/core/tensor.h"

namespace updraft {

class VocabMap {
 public:
  VocabMap() = default;
  static VocabMap identity(int64_t target_vocab);
  static VocabMap from_ids(std::vector<int32_t> ids, int64_t target_vocab, const std::string& where);
  static VocabMap from_tensors(const Tensor& d2t, const Tensor* t2d, int64_t draft_vocab, int64_t target_vocab,
                               const std::string& where);
  static VocabMap from_counts(const std::vector<int64_t>& counts, int64_t draft_vocab);

  int64_t draft_vocab() const { return static_cast<int64_t>(ids_.size()); }
  int64_t target_vocab() const { return target_vocab_; }
  bool is_identity() const { return draft_vocab() == target_vocab_; }
  int32_t to_target(int64_t draft_id) const { return ids_[static_cast<size_t>(draft_id)]; }
  const std::vector<int32_t>& ids() const { return ids_; }
  // -1 when the target id is outside the draft vocabulary.
  int32_t to_draft(int32_t target_id) const { return draft_of_[static_cast<size_t>(target_id)]; }

  Tensor d2t() const;  // i64 [Vd] offsets
  Tensor t2d() const;  // bool [V]
  // Fraction of the counted tokens that the draft vocabulary covers.
  double coverage(const std::vector<int64_t>& counts) const;

 private:
  int64_t target_vocab_ = 0;
  std::vector<int32_t> ids_, draft_of_;
};

}  // namespace updraft
