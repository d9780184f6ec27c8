// Internal: the inner loop of the CPU attention backward (backward_cpu.cc) in AVX-512, for one
// (query, head) item over its visible keys. Each dot product sums 16-lane partial sums in a fixed
// order, so results repeat exactly from run to run on a machine (they differ from the portable
// loop's in the last bits). Only where cpu_has_avx512() (gemv_cpu.h).
#pragma once

#include <cstdint>

namespace updraft::ops::cpu {

// q, dout: the item's query and output gradient [HD]; l: its log-sum-exp; di = dout · out.
// Key j's vectors are k + (j * NKV + g) * HD and the same in v. Adds into dq [HD] and into the
// thread's dk/dv partial sums at the same offsets as the keys.
void attention_backward_keys_avx512(const float* q, const float* dout, float* dq, const int64_t* keys, int64_t nkeys,
                                    const float* k, const float* v, int64_t NKV, int64_t g, int64_t HD, float scale,
                                    float l, float di, float* dk, float* dv);

}  // namespace updraft::ops::cpu
