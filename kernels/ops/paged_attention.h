// Attention of a batch of sequences over a paged key/value cache, and the row copies that fill
// and compact it. The policy's chunked prefill, batched decode and tree verification all run
// through paged_attention.
//
// Cache layout: k_cache, v_cache [NSLOT, NKV, HD]; slot = block * block_size + offset. Key j of
// sequence b (0 <= j < kv_len[b]) lives in slot block_table[b, j / block_size] * block_size +
// j % block_size.
//
// paged_attention:
//   q           [T, NH, HD]  the new tokens of every sequence; sequence b owns rows
//                            q_start[b] .. q_start[b+1]-1 (n_b rows), already rotated
//   block_table i32 [B, MAXB], kv_len i32 [B], q_start i32 [B+1]   (CPU tensors)
//   tree_mask   bool [T, MAXW] (CPU) or undefined
//   mask_len    i32 [B] (CPU) or undefined (then mask_len[b] = n_b)
//   out         [T, NH, HD]
// The new tokens of sequence b are its last n_b keys (their K/V must already be in the cache).
// Without a mask, new token i sees every earlier key and new token j iff j <= i (causal). With
// a mask, the last w_b = mask_len[b] keys form the masked window: new token i sees window key
// j iff tree_mask[q_start[b] + i, j], and every key before the window. The window may be wider
// than the new tokens (w_b > n_b): the draft tree's later levels see their ancestors, which are
// earlier speculative entries, that way. Softmax of q·k * scale in f32. Requires
// n_b <= kv_len[b] <= MAXB * block_size, n_b <= w_b <= kv_len[b], w_b <= MAXW.
// CPU: f32.  CUDA: q, caches, out f32 or bf16 (same dtype).
//
// copy_rows: dst[dst_idx[m]] = src[src_idx[m]] for m < M, where a row is everything after the
//   first dimension (src [N, ...], dst [P, ...], same row size and dtype). src_idx, dst_idx
//   i32 [M] on the CPU. Destination rows must be distinct and no destination row may be a
//   source row (no copy may read what another writes); src and dst may be the same tensor.
#pragma once

#include "kernels/core/tensor.h"

namespace updraft::ops {

struct PagedKv {
  Tensor k_cache, v_cache;  // [NSLOT, NKV, HD]
  int64_t block_size = 16;
};

void paged_attention(const Tensor& q, const PagedKv& kv, const Tensor& block_table, const Tensor& kv_len,
                     const Tensor& q_start, const Tensor& tree_mask, float scale, Tensor out,
                     const Tensor& mask_len = Tensor());

void copy_rows(const Tensor& src, const Tensor& src_idx, Tensor dst, const Tensor& dst_idx);

}  // namespace updraft::ops
