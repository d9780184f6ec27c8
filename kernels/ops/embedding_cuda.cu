// CUDA embedding gather: one block per token row.
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/ops/backend.h"

namespace updraft::ops::cuda {
namespace {

using namespace ::updraft::cuda;

// out[t, :] = table[ids[t], :]; ids were validated on the host, but a bad id still only zeroes
// its row instead of reading out of bounds. Same-type rows are copied bit for bit.
template <typename S, typename D>
__global__ void embedding_kernel(const int32_t* ids, const S* table, D* out, int64_t V, int64_t H) {
  const int64_t id = ids[blockIdx.x];
  D* outr = out + blockIdx.x * H;
  const bool valid = id >= 0 && id < V;
  const S* row = table + (valid ? id : 0) * H;
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) {
    if (!valid) {
      outr[i] = from_f32<D>(0.f);
    } else if constexpr (std::is_same_v<S, D>) {
      outr[i] = row[i];
    } else {
      outr[i] = from_f32<D>(to_f32(row[i]));
    }
  }
}

}  // namespace

void embedding(const Tensor& ids, const Tensor& table, Tensor& out) {
  const int64_t T = ids.size(0), V = table.size(0), H = table.size(1);
  if (T == 0 || H == 0)
    return;
  UPD_CHECK(T <= INT32_MAX) << "embedding: too many ids for one launch: " << T;
  dispatch_float(table.dtype(), "embedding", [&](auto stag) {
    using S = typename decltype(stag)::type;
    dispatch_f32_bf16(out.dtype(), "embedding", [&](auto dtag) {
      using D = typename decltype(dtag)::type;
      embedding_kernel<<<static_cast<unsigned>(T), row_threads(H, 256), 0, stream()>>>(
          ids.data<int32_t>(), table.data<S>(), out.data<D>(), V, H);
      UPD_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace updraft::ops::cuda
