#include "kernels/nn/paged_batch.h"

#include <algorithm>

namespace updraft::nn {

PagedBatch PagedBatch::build(const KvCache& cache, const std::vector<SeqStep>& seqs, int64_t vocab, const char* who) {
  const int64_t B = static_cast<int64_t>(seqs.size());
  PagedBatch p;
  std::vector<int32_t> slots, q_start = {0}, kv_len, rows, windows;
  int64_t max_blocks = 1, max_window = 0;
  bool any_tree = false;
  for (int64_t b = 0; b < B; ++b) {
    const SeqStep& s = seqs[b];
    UPD_CHECK(s.kv != nullptr) << who << ": sequence " << b << " has no KV state";
    const int64_t n = static_cast<int64_t>(s.tokens.size()), base = s.kv->length;
    UPD_CHECK(cache.blocks_needed(base + n) <= static_cast<int64_t>(s.kv->blocks.size()))
        << who << ": sequence " << b << " needs " << base + n << " KV entries; reserve them first";
    UPD_CHECK(s.positions.empty() || static_cast<int64_t>(s.positions.size()) == n)
        << who << ": positions must match tokens";
    int64_t w = n;
    if (s.tree_mask.defined()) {
      w = s.tree_mask.dim() == 2 ? s.tree_mask.size(1) : -1;
      UPD_CHECK(s.tree_mask.is_cpu() && s.tree_mask.dtype() == DType::Bool && s.tree_mask.dim() == 2 &&
                s.tree_mask.size(0) == n && w >= n && w <= base + n)
          << who << ": sequence " << b << " tree_mask must be a CPU bool [n, w] with n <= w <= cached + n";
      any_tree = true;
    }
    windows.push_back(static_cast<int32_t>(w));
    max_window = std::max(max_window, w);
    for (int64_t i = 0; i < n; ++i) {
      const int32_t t = s.tokens[i];
      UPD_REQUIRE(t >= 0 && t < vocab) << "token id " << t << " is outside the vocabulary [0, " << vocab << ")";
      p.ids.push_back(t);
      p.positions.push_back(s.positions.empty() ? static_cast<int32_t>(base + i) : s.positions[i]);
      slots.push_back(static_cast<int32_t>(cache.slot(*s.kv, base + i)));
    }
    for (int32_t r : s.logit_rows) {
      UPD_CHECK(r >= 0 && r < n) << who << ": logit row " << r << " outside the sequence's new tokens";
      rows.push_back(q_start.back() + r);
    }
    q_start.push_back(static_cast<int32_t>(q_start.back() + n));
    kv_len.push_back(static_cast<int32_t>(base + n));
    max_blocks = std::max<int64_t>(max_blocks, static_cast<int64_t>(s.kv->blocks.size()));
  }
  p.T = q_start.back();
  p.R = static_cast<int64_t>(rows.size());
  std::vector<int32_t> table(static_cast<size_t>(B * max_blocks), 0);
  for (int64_t b = 0; b < B; ++b)
    std::copy(seqs[b].kv->blocks.begin(), seqs[b].kv->blocks.end(), table.begin() + b * max_blocks);
  if (any_tree) {  // sequences without a mask get the causal pattern over their new tokens
    const int64_t W = std::max<int64_t>(max_window, 1);
    p.tree_mask = Tensor::zeros({p.T, W}, DType::Bool);
    uint8_t* tm = p.tree_mask.data<uint8_t>();
    for (int64_t b = 0; b < B; ++b) {
      const int64_t n = q_start[b + 1] - q_start[b], w = windows[b];
      const uint8_t* sm = seqs[b].tree_mask.defined() ? seqs[b].tree_mask.data<uint8_t>() : nullptr;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < w; ++j)
          tm[(q_start[b] + i) * W + j] = sm ? sm[i * w + j] : static_cast<uint8_t>(j <= i);
    }
    p.mask_len = Tensor::from_i32(windows, {B});
  }
  p.block_table = Tensor::from_i32(table, {B, max_blocks});
  p.kv_len = Tensor::from_i32(kv_len, {B});
  p.q_start = Tensor::from_i32(q_start, {B + 1});
  std::vector<int32_t> iota(static_cast<size_t>(p.T));
  for (int64_t t = 0; t < p.T; ++t)
    iota[t] = static_cast<int32_t>(t);
  p.src_rows = Tensor::from_i32(iota, {p.T});
  p.dst_slots = Tensor::from_i32(slots, {p.T});
  p.logit_rows = Tensor::from_i32(rows, {p.R});
  std::vector<int32_t> out_iota(static_cast<size_t>(p.R));
  for (int64_t r = 0; r < p.R; ++r)
    out_iota[r] = static_cast<int32_t>(r);
  p.out_rows = Tensor::from_i32(out_iota, {p.R});
  return p;
}

void PagedBatch::advance(std::vector<SeqStep>& seqs) {
  for (auto& s : seqs)
    s.kv->length += static_cast<int64_t>(s.tokens.size());
}

}  // namespace updraft::nn
