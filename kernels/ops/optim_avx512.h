// Internal: AVX-512 element loops behind optim_cpu.cc, bitwise equal to its scalar loops. Only
// where cpu_has_avx512() (gemv_cpu.h).
#pragma once

#include <cstdint>

#include "kernels/ops/optim.h"

namespace updraft::ops::cpu {

// The sum of squares of p[begin, end) in doubles: eight interleaved accumulators (element i goes
// to accumulator (i - begin) % 8), combined as ((0+1)+(2+3))+((4+5)+(6+7)).
double sum_squares_chunk_avx512(const float* p, int64_t begin, int64_t end);
// AdamW on elements [begin, begin + 16k) for the largest such k within end (optim_cpu.cc's
// formula, operation for operation); returns the first element not updated.
int64_t adamw_range_avx512(float* pw, const float* pg, float* pm, float* pv, int64_t begin, int64_t end,
                           const AdamWCoefficients& c);

}  // namespace updraft::ops::cpu
