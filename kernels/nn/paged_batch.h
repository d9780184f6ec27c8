// One batched step of a paged-cache model (the policy or the drafter): what each sequence adds,
// and the index tensors paged_attention and the KV writes need, validated before anything runs.
//
// For each sequence, SeqStep appends the KV entries of `tokens` (n new tokens) after the
// kv->length cached ones, at RoPE `positions` (default kv->length + i). Attention among the new
// tokens is causal, or follows `tree_mask` (bool [n, w], CPU, w >= n): the last w keys of the
// sequence (its n new tokens and the w - n entries before them) form the masked window, new
// token i sees window key j iff mask[i, j], and every key before the window. `logit_rows` are
// local indices of the rows whose outputs are wanted.
//
// PagedBatch::build checks (before anything is written) that KV blocks are reserved for
// kv->length + n entries (CheckFailure otherwise), that masks and positions have their shapes,
// and that token ids lie in [0, vocab) (Error: bad input from a caller).
#pragma once

#include <string>
#include <vector>

#include "kernels/nn/kv_cache.h"

namespace updraft {

struct SeqStep {
  SeqKv* kv = nullptr;
  std::vector<int32_t> tokens;
  std::vector<int32_t> positions;   // empty: kv->length + i
  Tensor tree_mask;                 // undefined: causal; else bool [n, w], w >= n
  std::vector<int32_t> logit_rows;  // local indices into tokens
};

namespace nn {

struct PagedBatch {
  int64_t T = 0, R = 0;
  std::vector<int32_t> ids, positions;  // [T]
  Tensor block_table, kv_len, q_start;  // CPU i32 [B, MAXB], [B], [B + 1]
  Tensor tree_mask, mask_len;           // CPU, undefined when every sequence is causal
  Tensor src_rows, dst_slots;           // CPU i32 [T]: row t goes to cache slot dst_slots[t]
  Tensor logit_rows;                    // CPU i32 [R]: global rows, in sequence order
  Tensor out_rows;                      // CPU i32 [R]: 0 .. R-1 (gather destinations)

  static PagedBatch build(const KvCache& cache, const std::vector<SeqStep>& seqs, int64_t vocab, const char* who);
  // Advances every sequence's kv->length by its token count (after the KV writes).
  static void advance(std::vector<SeqStep>& seqs);
};

}  // namespace nn
}  // namespace updraft
