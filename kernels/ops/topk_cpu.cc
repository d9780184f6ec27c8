#include <algorithm>
#include <numeric>
#include <vector>

#include "kernels/ops/backend.h"

namespace updraft::ops::cpu {

void argmax(const Tensor& x, Tensor& out) {
  const int64_t R = x.size(0), C = x.size(1);
  const float* xp = x.data<float>();
  int32_t* o = out.data<int32_t>();
  for (int64_t r = 0; r < R; ++r) {
    const float* xr = xp + r * C;
    int64_t best = 0;
    for (int64_t i = 1; i < C; ++i)
      if (xr[i] > xr[best])
        best = i;
    o[r] = static_cast<int32_t>(best);
  }
}

void topk(const Tensor& x, int64_t k, Tensor& values, Tensor& indices) {
  const int64_t R = x.size(0), C = x.size(1);
  const float* xp = x.data<float>();
  float* vo = values.data<float>();
  int32_t* io = indices.data<int32_t>();
#pragma omp parallel if (R * C > (1 << 16))
  {
    std::vector<int32_t> idx(static_cast<size_t>(C));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < R; ++r) {
      const float* xr = xp + r * C;
      std::iota(idx.begin(), idx.end(), 0);
      auto better = [xr](int32_t a, int32_t b) { return xr[a] > xr[b] || (xr[a] == xr[b] && a < b); };
      std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), better);
      for (int64_t j = 0; j < k; ++j) {
        io[r * k + j] = idx[static_cast<size_t>(j)];
        vo[r * k + j] = xr[idx[static_cast<size_t>(j)]];
      }
    }
  }
}

}  // namespace updraft::ops::cpu
