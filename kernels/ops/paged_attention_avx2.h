// Internal to paged_attention_cpu.cc: the attention rows of one work item (a sequence's rows x the
// query heads of one kv head) on CPUs with AVX2 and FMA but not AVX-512, in 8-float vectors
// (paged_attention_avx2.cc, compiled with -mavx2 -mfma). Each query's scores, softmax and value
// sums are the same instructions in the same order whatever queries or keys are computed beside
// it, so a row computed alone (a decode step) and among others (verification, chunked prefill)
// gives the same bits. Every row's shared keys are read once per 64-key block for all queries.
#pragma once

#include <cstdint>
#include <vector>

namespace updraft::ops::cpu {

// A thread's buffers for an item's rows, kept across calls: scores, then probabilities (a
// query's row of ld), and value accumulators, per query. prepare sizes them for the rows x G
// queries of an item (acc: per_query zeros each) and returns ld (the shared keys, the longest row's
// own keys, and 16 floats to spare). It is defined in baseline code, so that no std::vector code
// built for AVX2 can stand in for the baseline's copy at link time.
struct AttentionScratch {
  std::vector<float> scores, acc;
  int64_t prepare(int64_t rows, int64_t G, int64_t ns, const std::vector<const float*>* extra_k, int64_t per_query);
};

// The rows of one item: query qi = r * G + h (r < rows, h < G) at q + r * row_stride + h * HD,
// its output at the same offset in out. Each query sees keys[0..ns) and vals[0..ns) (shared by
// the rows), then its row's own extra_k[r] / extra_v[r] (a tree row's ancestors, a causal row's
// later keys). Returns false, computing nothing, for head sizes without a specialisation (HD not
// in 32, 56, 64, 80, 96, 128). Only where cpu_has_avx2_fma().
bool attend_rows_avx2(int64_t HD, const float* q, float* out, int64_t rows, int64_t G, int64_t row_stride,
                      const float* const* keys, const float* const* vals, int64_t ns,
                      const std::vector<const float*>* extra_k, const std::vector<const float*>* extra_v, float scale,
                      AttentionScratch& scratch);

}  // namespace updraft::ops::cpu
