// CUDA gemm / batched_gemm / linear: cuBLAS with f32 accumulation (no TF32), plus small
// kernels for the cases cuBLAS does not cover (K == 0, f32 inputs with a bf16 output, bias), and
// linear over up to a few hundred bf16 rows (decode and verification) in a kernel of our own:
// cublasGemmEx spends about 30 us of host time per call on an H200, which made a small model's
// decode step launch-bound (57 products, 1.8 ms of a 2.6 ms step), and past 16 rows it did the
// same to a batch's verification.
#include <climits>
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/ops/backend.h"

namespace updraft::ops::cuda {
namespace {

using namespace ::updraft::cuda;

cudaDataType_t cuda_type(DType t) {
  return t == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

int as_int(int64_t v, const char* what) {
  UPD_CHECK(v <= INT_MAX) << "gemm: " << what << "=" << v << " exceeds cuBLAS's int range";
  return static_cast<int>(v);
}

// c *= beta, with beta == 0 writing zeros without reading c (BLAS semantics): the K == 0 case.
template <typename T>
__global__ void scale_kernel(T* c, int64_t n, float beta) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    c[i] = from_f32<T>(beta == 0.f ? 0.f : beta * to_f32(c[i]));
}

// dst = src between storage types (RNE): used to stage an f32 result for a bf16 output.
template <typename S, typename D>
__global__ void convert_kernel(const S* src, D* dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    dst[i] = from_f32<D>(to_f32(src[i]));
}

// y[t, n] += bias[n], in f32 then rounded to y's type.
template <typename Y, typename B>
__global__ void bias_kernel(Y* y, const B* bias, int64_t n_total, int64_t n_cols) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n_total; i += int64_t{gridDim.x} * blockDim.x)
    y[i] = from_f32<Y>(to_f32(y[i]) + to_f32(bias[i % n_cols]));
}

// Row-major C[M,N] = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, so B goes first and
// the row-major leading dimensions are used unchanged.
void cublas_gemm(const void* a, bool ta, const void* b, bool tb, void* c, cudaDataType_t ab_type, cudaDataType_t c_type,
                 int64_t M, int64_t N, int64_t K, int64_t batch, bool batched, float alpha, float beta) {
  const cublasOperation_t op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int m = as_int(N, "N"), n = as_int(M, "M"), k = as_int(K, "K");
  const int ld_b = as_int(tb ? K : N, "ldb"), ld_a = as_int(ta ? M : K, "lda"), ld_c = m;
  cublasHandle_t h = cublas_handle();
  if (!batched) {
    UPD_CUBLAS_CHECK(cublasGemmEx(h, op_b, op_a, m, n, k, &alpha, b, ab_type, ld_b, a, ab_type, ld_a, &beta, c, c_type,
                                  ld_c, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  } else {
    UPD_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        h, op_b, op_a, m, n, k, &alpha, b, ab_type, ld_b, static_cast<long long>(K * N), a, ab_type, ld_a,
        static_cast<long long>(M * K), &beta, c, c_type, ld_c, static_cast<long long>(M * N), as_int(batch, "batch"),
        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
}

void run_gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& c, float alpha, float beta, bool batched) {
  const int64_t M = c.size(-2), N = c.size(-1), K = ta ? a.size(-2) : a.size(-1);
  const int64_t batch = batched ? c.size(0) : 1;
  const int64_t n_c = batch * M * N;
  if (n_c == 0)
    return;
  if (K == 0) {  // empty sum: c = beta * c (cuBLAS rejects lda = 0)
    dispatch_f32_bf16(c.dtype(), "gemm", [&](auto tag) {
      using T = typename decltype(tag)::type;
      scale_kernel<<<elementwise_blocks(n_c), kElementwiseThreads, 0, stream()>>>(c.data<T>(), n_c, beta);
      UPD_CUDA_CHECK_LAUNCH();
    });
    return;
  }
  if (a.dtype() == DType::F32 && c.dtype() == DType::BF16) {
    // cuBLAS has no f32 x f32 -> bf16 GEMM: compute into f32 scratch and round once.
    Scratch tmp(static_cast<size_t>(n_c) * sizeof(float));
    float* t = tmp.get<float>();
    const unsigned blocks = elementwise_blocks(n_c);
    if (beta != 0.f) {
      convert_kernel<<<blocks, kElementwiseThreads, 0, stream()>>>(c.data<__nv_bfloat16>(), t, n_c);
      UPD_CUDA_CHECK_LAUNCH();
    }
    cublas_gemm(a.raw(), ta, b.raw(), tb, t, CUDA_R_32F, CUDA_R_32F, M, N, K, batch, batched, alpha, beta);
    convert_kernel<<<blocks, kElementwiseThreads, 0, stream()>>>(static_cast<const float*>(t), c.data<__nv_bfloat16>(),
                                                                 n_c);
    UPD_CUDA_CHECK_LAUNCH();
    return;
  }
  cublas_gemm(a.raw(), ta, b.raw(), tb, c.raw(), cuda_type(a.dtype()), cuda_type(c.dtype()), M, N, K, batch, batched,
              alpha, beta);
}

// ---- linear over a few bf16 rows -----------------------------------------------------------

constexpr int kRowsMax = 16;   // rows a block computes, their sums in registers
constexpr int kRowsWarps = 8;  // warps per block, one output column each
// Past kRowsMax rows the grid takes chunks of kRowsMax rows, each block reading its weight rows
// again (mostly from L2): worth it while the chunks' re-reads stay under kRereadBytes (about
// 16 us at an H200's bandwidth, against cuBLAS's 30 us of host time), up to kRowsCap rows.
constexpr int64_t kRowsCap = 256;
constexpr int64_t kRereadBytes = int64_t{64} << 20;

// Up to kProductsMax products of one x in one launch (q, k and v; gate and up): product p's
// output columns are blocks [first[p], first[p + 1]) of the grid's first dimension.
constexpr int kProductsMax = 4;
template <typename Y>
struct RowsProducts {
  const __nv_bfloat16* w[kProductsMax];
  Y* y[kProductsMax];
  int64_t n[kProductsMax];
  int64_t first[kProductsMax + 1];
  int count;
};

// y[t, n] = sum_k x[t, k] w[n, k] for t < rows, for each product: block (b, c) computes rows
// [c * kRowsMax, min(rows, (c + 1) * kRowsMax)) of its product's output columns from b's first on,
// kRowsWarps of them. One warp per output column reads the weight row once for every row of its
// chunk, with f32 partial sums in registers. Lane l takes the elements l * 8 + j + 256 i (j =
// 0..7) and adds them in that order, loaded 16 bytes at a time where K % 8 == 0 and the rows are
// aligned (Vec), else one by one in the same order; the warp then sums its lanes by a fixed
// butterfly. So each row's result comes from the same arithmetic in the same order whatever
// `rows` is, whichever chunk holds it, however the rows are aligned and whichever products share
// the launch: a decode step and a verification pass give a row the same bits (what greedy
// speculation's token identity rests on).
template <typename Y, bool Vec>
__global__ void __launch_bounds__(kRowsWarps * 32)
    linear_rows_kernel(const __nv_bfloat16* __restrict__ x, const RowsProducts<Y> ps, int rows, int64_t K) {
  int p = 0;
  while (p + 1 < ps.count && int64_t{blockIdx.x} >= ps.first[p + 1])
    ++p;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t n = (int64_t{blockIdx.x} - ps.first[p]) * kRowsWarps + threadIdx.x / 32;
  const int64_t N = ps.n[p];
  if (n >= N)
    return;
  const int r0 = static_cast<int>(blockIdx.y) * kRowsMax;
  x += int64_t{r0} * K;
  Y* __restrict__ y = ps.y[p] + int64_t{r0} * N;
  rows = min(rows - r0, kRowsMax);
  float acc[kRowsMax];
#pragma unroll
  for (int r = 0; r < kRowsMax; ++r)
    acc[r] = 0.f;
  const __nv_bfloat16* wn = ps.w[p] + n * K;
  if constexpr (Vec) {
    for (int64_t k = int64_t{lane} * 8; k < K; k += 256) {
      const uint4 wv = *reinterpret_cast<const uint4*>(wn + k);
      const __nv_bfloat16* wb = reinterpret_cast<const __nv_bfloat16*>(&wv);
#pragma unroll
      for (int r = 0; r < kRowsMax; ++r) {
        if (r < rows) {
          const uint4 xv = *reinterpret_cast<const uint4*>(x + r * K + k);
          const __nv_bfloat16* xb = reinterpret_cast<const __nv_bfloat16*>(&xv);
#pragma unroll
          for (int j = 0; j < 8; ++j)
            acc[r] = fmaf(to_f32(wb[j]), to_f32(xb[j]), acc[r]);
        }
      }
    }
  } else {
    for (int64_t k0 = int64_t{lane} * 8; k0 < K; k0 += 256) {
      for (int j = 0; j < 8 && k0 + j < K; ++j) {
        const float wk = to_f32(wn[k0 + j]);
#pragma unroll
        for (int r = 0; r < kRowsMax; ++r)
          if (r < rows)
            acc[r] = fmaf(wk, to_f32(x[r * K + k0 + j]), acc[r]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsMax; ++r) {
    if (r < rows) {
      float v = acc[r];
#pragma unroll
      for (int off = 16; off > 0; off /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, off);
      if (lane == 0)
        y[r * N + n] = from_f32<Y>(v);
    }
  }
}

}  // namespace

// Runs linear_rows_kernel when it applies (bf16 x and weights, one output dtype, dense row-major
// tensors, at most kProductsMax products, 1 to kRowsMax rows, or up to kRowsCap where the chunks'
// weight re-reads stay under kRereadBytes); false otherwise (the caller runs cuBLAS).
bool linear_rows(const Tensor& x, const std::vector<const Tensor*>& ws, const std::vector<Tensor*>& ys) {
  const int64_t T = x.size(0), K = x.size(1);
  const int64_t chunks = ceil_div(T, int64_t{kRowsMax});
  int64_t bytes = 0;
  bool ok = x.dtype() == DType::BF16 && T > 0 && K > 0 && !ws.empty() && ws.size() <= kProductsMax;
  bool vec = K % 8 == 0 && reinterpret_cast<uintptr_t>(x.raw()) % 16 == 0;
  for (size_t i = 0; ok && i < ws.size(); ++i) {
    ok = ws[i]->dtype() == DType::BF16 && ws[i]->size(0) > 0 && ys[i]->dtype() == ys[0]->dtype();
    vec = vec && reinterpret_cast<uintptr_t>(ws[i]->raw()) % 16 == 0;
    bytes += chunks * ws[i]->size(0) * K * 2;
  }
  if (!ok || !(T <= kRowsMax || (T <= kRowsCap && bytes <= kRereadBytes)))
    return false;
  dispatch_f32_bf16(ys[0]->dtype(), "linear", [&](auto ytag) {
    using Y = typename decltype(ytag)::type;
    RowsProducts<Y> ps{};
    ps.count = static_cast<int>(ws.size());
    for (int i = 0; i < ps.count; ++i) {
      ps.w[i] = ws[static_cast<size_t>(i)]->data<__nv_bfloat16>();
      ps.y[i] = ys[static_cast<size_t>(i)]->data<Y>();
      ps.n[i] = ws[static_cast<size_t>(i)]->size(0);
      ps.first[i + 1] = ps.first[i] + ceil_div(ps.n[i], kRowsWarps);
    }
    const dim3 blocks(static_cast<unsigned>(ps.first[ps.count]), static_cast<unsigned>(chunks));
    const auto* xp = x.data<__nv_bfloat16>();
    if (vec)
      linear_rows_kernel<Y, true><<<blocks, kRowsWarps * 32, 0, stream()>>>(xp, ps, static_cast<int>(T), K);
    else
      linear_rows_kernel<Y, false><<<blocks, kRowsWarps * 32, 0, stream()>>>(xp, ps, static_cast<int>(T), K);
    UPD_CUDA_CHECK_LAUNCH();
  });
  return true;
}

void gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& c, float alpha, float beta) {
  run_gemm(a, ta, b, tb, c, alpha, beta, false);
}

void batched_gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& c, float alpha, float beta) {
  run_gemm(a, ta, b, tb, c, alpha, beta, true);
}

void linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) {
  if (!linear_rows(x, {&w}, {&y}))
    run_gemm(x, false, w, true, y, 1.f, 0.f, false);
  const int64_t n = y.numel(), cols = y.size(1);
  if (bias == nullptr || n == 0)
    return;
  dispatch_f32_bf16(y.dtype(), "linear", [&](auto ytag) {
    using Y = typename decltype(ytag)::type;
    dispatch_f32_bf16(bias->dtype(), "linear", [&](auto btag) {
      using B = typename decltype(btag)::type;
      bias_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream()>>>(y.data<Y>(), bias->data<B>(), n, cols);
      UPD_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace updraft::ops::cuda
