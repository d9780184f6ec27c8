// Scaled dot-product attention over a key/value cache with grouped-query heads.
//
//   q   [T, NH, HD]   queries (already rotated)
//   k,v [S, NKV, HD]  keys/values of every position the queries may see (NH % NKV == 0;
//                     query head h reads kv head h / (NH / NKV))
//   out [T, NH, HD]
//   lse (optional) f32 [T, NH]: log-sum-exp of the scaled, masked scores (for backward)
// Scores are q·k * scale, softmax in f32. Three mask kinds:
//
//   Causal: query i is at key index q_offset + i and sees keys 0 .. q_offset + i.
//           Requires S >= q_offset + T. (Prefill: q_offset = 0; decode: q_offset = S - 1.)
//   Tree:   keys 0 .. q_offset-1 are the committed prefix, seen by every query; keys
//           q_offset + j (j < T) are the tree nodes; query i sees node j iff tree_mask[i, j].
//           Requires S == q_offset + T and tree_mask bool [T, T] on the CPU.
//   TTT:    training-time test (EAGLE-3, eagle3.md C.4) over R = q_offset + T rows, the queries
//           being rows q_offset .. R-1 (q_offset > 0 when the first rows are not needed at this
//           step). Keys are step-major: S = (steps+1)*R, key s*R + p is step s's key for row p.
//           Row p sees step-0 keys 0..p (causal) and the step-s key s*R + p for s = 1..steps
//           (the "diagonal"); never an R×R block for steps >= 1.
//
// CPU: f32 everywhere. CUDA: q, k, v, out f32 or bf16 (same), accumulation in f32.
#pragma once

#include "kernels/core/tensor.h"

namespace updraft::ops {

enum class MaskKind { Causal, Tree, TTT };

struct AttentionMask {
  MaskKind kind = MaskKind::Causal;
  int64_t q_offset = 0;   // Causal, Tree; TTT: the row of the first query
  Tensor tree_mask;       // Tree: bool [T, T], CPU
  int64_t ttt_steps = 0;  // TTT: extra steps after step 0

  static AttentionMask causal(int64_t q_offset) { return {MaskKind::Causal, q_offset, {}, 0}; }
  static AttentionMask tree(int64_t prefix, Tensor mask) { return {MaskKind::Tree, prefix, std::move(mask), 0}; }
  static AttentionMask ttt(int64_t steps, int64_t first_row = 0) { return {MaskKind::TTT, first_row, {}, steps}; }
};

// True when query i may see key j under `mask` (T queries, S keys). The reference
// definition that every backend implements; also used by tests.
bool attention_visible(const AttentionMask& mask, int64_t T, int64_t i, int64_t j);

void attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask, float scale, Tensor out,
               Tensor* lse = nullptr);

}  // namespace updraft::ops
