#include "drafter/vocab_map.h"

#include <algorithm>
#include <numeric>

namespace updraft {

VocabMap VocabMap::identity(int64_t target_vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(target_vocab));
  std::iota(ids.begin(), ids.end(), 0);
  return from_ids(std::move(ids), target_vocab, "identity vocabulary");
}

VocabMap VocabMap::from_ids(std::vector<int32_t> ids, int64_t target_vocab, const std::string& where) {
  UPD_REQUIRE(!ids.empty() && static_cast<int64_t>(ids.size()) <= target_vocab)
      << where << ": draft vocabulary of " << ids.size() << " ids for a target vocabulary of " << target_vocab;
  VocabMap m;
  m.target_vocab_ = target_vocab;
  m.draft_of_.assign(static_cast<size_t>(target_vocab), -1);
  for (size_t j = 0; j < ids.size(); ++j) {
    UPD_REQUIRE(ids[j] >= 0 && ids[j] < target_vocab)
        << where << ": draft id " << j << " maps to target id " << ids[j] << ", outside [0, " << target_vocab << ")";
    UPD_REQUIRE(j == 0 || ids[j] > ids[j - 1])
        << where << ": draft id " << j << " maps to target id " << ids[j] << ", not above the previous " << ids[j - 1]
        << " (the draft vocabulary must be ascending target ids)";
    m.draft_of_[static_cast<size_t>(ids[j])] = static_cast<int32_t>(j);
  }
  m.ids_ = std::move(ids);
  return m;
}

VocabMap VocabMap::from_tensors(const Tensor& d2t, const Tensor* t2d, int64_t draft_vocab, int64_t target_vocab,
                                const std::string& where) {
  UPD_REQUIRE(d2t.dtype() == DType::I64 || d2t.dtype() == DType::I32)
      << where << ": d2t has dtype " << dtype_name(d2t.dtype()) << " (expected I64)";
  UPD_REQUIRE(d2t.dim() == 1 && d2t.size(0) == draft_vocab)
      << where << ": d2t has shape " << shape_str(d2t.shape()) << ", expected [" << draft_vocab << "]";
  Tensor c = d2t.to(Device::CPU);
  std::vector<int32_t> ids(static_cast<size_t>(draft_vocab));
  for (int64_t j = 0; j < draft_vocab; ++j) {
    const int64_t off = c.dtype() == DType::I64 ? c.data<int64_t>()[j] : c.data<int32_t>()[j];
    const int64_t t = j + off;
    UPD_REQUIRE(t >= 0 && t < target_vocab)
        << where << ": d2t[" << j << "] = " << off << " maps draft id " << j << " to " << t
        << ", outside the target vocabulary [0, " << target_vocab << ") (d2t holds offsets, not ids)";
    ids[static_cast<size_t>(j)] = static_cast<int32_t>(t);
  }
  VocabMap m = from_ids(std::move(ids), target_vocab, where + " (d2t)");
  if (t2d != nullptr) {
    UPD_REQUIRE(t2d->dtype() == DType::Bool && t2d->dim() == 1 && t2d->size(0) == target_vocab)
        << where << ": t2d is " << t2d->str() << ", expected Bool [" << target_vocab << "]";
    Tensor tc = t2d->to(Device::CPU);
    for (int64_t v = 0; v < target_vocab; ++v)
      UPD_REQUIRE((tc.data<uint8_t>()[v] != 0) == (m.draft_of_[static_cast<size_t>(v)] >= 0))
          << where << ": t2d[" << v << "] disagrees with d2t";
  }
  return m;
}

VocabMap VocabMap::from_counts(const std::vector<int64_t>& counts, int64_t draft_vocab) {
  const int64_t V = static_cast<int64_t>(counts.size());
  UPD_REQUIRE(draft_vocab > 0 && draft_vocab <= V)
      << "draft vocabulary of " << draft_vocab << " for a target vocabulary of " << V;
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return counts[a] > counts[b]; });
  order.resize(static_cast<size_t>(draft_vocab));
  std::sort(order.begin(), order.end());
  return from_ids(std::move(order), V, "token counts");
}

Tensor VocabMap::d2t() const {
  Tensor t = Tensor::empty({draft_vocab()}, DType::I64);
  for (int64_t j = 0; j < draft_vocab(); ++j)
    t.data<int64_t>()[j] = ids_[static_cast<size_t>(j)] - j;
  return t;
}

Tensor VocabMap::t2d() const {
  Tensor t = Tensor::zeros({target_vocab_}, DType::Bool);
  for (int32_t id : ids_)
    t.data<uint8_t>()[id] = 1;
  return t;
}

double VocabMap::coverage(const std::vector<int64_t>& counts) const {
  int64_t all = 0, in = 0;
  for (size_t v = 0; v < counts.size(); ++v) {
    all += counts[v];
    if (static_cast<int64_t>(v) < target_vocab_ && draft_of_[v] >= 0)
      in += counts[v];
  }
  return all == 0 ? 0.0 : static_cast<double>(in) / static_cast<double>(all);
}

}  // namespace updraft
