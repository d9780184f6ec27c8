// CPU matrix products: OpenBLAS sgemm for f32 weights beyond decode shapes (T > 8) and for
// gemm(); our own GEMV kernels for every product with 16-bit weights. With bf16
// weights the activations are rounded to bf16 first and every shape runs the process's bf16
// kernel (gemm.h: vdpbf16ps, widening + FMA in 512- or 256-bit vectors, or AMX tiles; the portable
// path without AVX2).
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <new>
#include <utility>
#include <vector>

#include "kernels/core/host_arena.h"
#include "kernels/ops/backend.h"
#include "kernels/ops/gemm.h"
#include "kernels/ops/gemv_cpu.h"
#include "kernels/ops/team_for.h"

namespace updraft::ops::cpu {
namespace {

// 64-byte aligned storage for the kernels' prepared activations (aligned vector loads).
template <typename T>
struct AlignedAllocator {
  using value_type = T;
  AlignedAllocator() = default;
  template <typename U>
  AlignedAllocator(const AlignedAllocator<U>&) {}  // NOLINT(google-explicit-constructor): rebinding
  T* allocate(size_t n) { return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{64})); }
  void deallocate(T* p, size_t) { ::operator delete (p, std::align_val_t{64}); }
  bool operator==(const AlignedAllocator&) const { return true; }
};

Tensor as_f32(const Tensor& t) {
  return t.dtype() == DType::F32 ? t : t.to_dtype(DType::F32);
}

void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* a, int64_t lda, const float* b,
           int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<blasint>(M),
              static_cast<blasint>(N), static_cast<blasint>(K), alpha, a, static_cast<blasint>(lda), b,
              static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

void gemm_2d(const float* a, bool ta, int64_t a_rows, int64_t a_cols, const float* b, bool tb, int64_t b_rows,
             int64_t b_cols, float* c, float alpha, float beta) {
  const int64_t M = ta ? a_cols : a_rows, K = ta ? a_rows : a_cols, N = tb ? b_rows : b_cols;
  if (M == 0 || N == 0)
    return;
  if (K == 0) {
    for (int64_t i = 0; i < M * N; ++i)
      c[i] = beta == 0.f ? 0.f : beta * c[i];
    return;
  }
  sgemm(ta, tb, M, N, K, alpha, a, a_cols, b, b_cols, beta, c, N);
}

}  // namespace

void add_bias_rows(const Tensor* bias, int64_t T, int64_t N, float* yp) {
  if (bias == nullptr)
    return;
  Tensor bf = as_f32(*bias);
  const float* bp = bf.data<float>();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n)
      yp[t * N + n] += bp[n];
}

void gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& c, float alpha, float beta) {
  // Products with 16-bit weights outside linear() are rare (tools, training): widen b whole.
  Tensor bf = as_f32(b);
  gemm_2d(a.data<float>(), ta, a.size(0), a.size(1), bf.data<float>(), tb, bf.size(0), bf.size(1), c.data<float>(),
          alpha, beta);
}

void batched_gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& c, float alpha, float beta) {
  Tensor bf = as_f32(b);
  const int64_t Bt = a.size(0);
  const int64_t sa = a.size(1) * a.size(2), sb = bf.size(1) * bf.size(2), sc = c.size(1) * c.size(2);
  for (int64_t i = 0; i < Bt; ++i)
    gemm_2d(a.data<float>() + i * sa, ta, a.size(1), a.size(2), bf.data<float>() + i * sb, tb, bf.size(1), bf.size(2),
            c.data<float>() + i * sc, alpha, beta);
}

namespace {

// How a kernel takes T token rows: all at once up to `whole`, else in tiles of at most `split`
// as even as possible (T = 10 runs as 5 + 5, not 8 + 2: the short tile would pay the full
// per-row overhead for little work); each thread's weight rows start at a multiple of `align`
// (the dot kernel's panels are 32 rows).
struct GemvTiles {
  int64_t whole, split, align = 8;
};
constexpr GemvTiles kGemvTiles{kGemvMaxT, kGemvMaxT};
constexpr GemvTiles kDotTiles{kDotPanelsMaxT, kDotPanelsTileT, kDotPanelRows};
constexpr GemvTiles kAvx2Tiles{kAvx2MaxT, kAvx2MaxT};

// Thread `id` of `nt`'s share of fn(t0, tn, n0, n1, next) — rows [t0, t0 + tn) of x against
// weight rows [n0, n1) — over the whole [T, N] output, in the token tiles of `tiles`.
// T <= tiles.whole: contiguous chunks of weight rows (multiples of 8), one per thread, each
// streamed once; next = -1 (linear_bf16_gemv splits several products as one, shared_rows_share
// below). Larger T: blocks of weight rows small enough to stay in L2 while
// every tile of tokens is multiplied with them, so the weights are read from memory once. Each
// thread takes a contiguous run of blocks, and its last tile of a block gets next = the first
// row of the thread's next block (else -1), so that a kernel can fetch that block from memory
// while it computes from L2. How the rows are split never changes a row's bits (each kernel
// computes a row the same way wherever it falls in a chunk).
int64_t gemv_tile_rows(int64_t T, GemvTiles tiles) {
  if (T <= tiles.whole)
    return T;
  const int64_t count = (T + tiles.split - 1) / tiles.split;
  return (T + count - 1) / count;
}

template <typename Fn>
void gemv_tiles_share(int64_t T, int64_t K, int64_t N, int64_t id, int64_t nt, GemvTiles tiles, Fn&& fn) {
  const int64_t a = tiles.align;
  if (T <= tiles.whole) {
    // ceil(N / threads), rounded up to `align`: at most one chunk per thread.
    const int64_t chunk = std::max<int64_t>(a, ((N + nt - 1) / nt + a - 1) / a * a), n0 = id * chunk;
    if (n0 < N)
      fn(0, T, n0, std::min(N, n0 + chunk), int64_t{-1});
    return;
  }
  const int64_t tile = gemv_tile_rows(T, tiles);
  // L2-sized blocks, but at least one per thread when N is small (short K makes blocks tall).
  const int64_t per_thread = ((N + nt - 1) / nt + a - 1) / a * a;
  const int64_t block =
      std::max<int64_t>(a, std::min(per_thread, ((int64_t{128} << 10) / (2 * std::max<int64_t>(K, 1))) / a * a));
  const int64_t nblocks = (N + block - 1) / block, b_end = nblocks * (id + 1) / nt;
  for (int64_t b = nblocks * id / nt; b < b_end; ++b) {
    const int64_t n0 = b * block, n1 = std::min(N, n0 + block);
    for (int64_t t0 = 0; t0 < T; t0 += tile) {
      const bool last = t0 + tile >= T;
      fn(t0, std::min(tile, T - t0), n0, n1, last && b + 1 < b_end ? n1 : int64_t{-1});
    }
  }
}

// gemv_tiles_share over the whole output, in parallel.
template <typename Fn>
void for_gemv_tiles(int64_t T, int64_t K, int64_t N, Fn&& fn) {
#pragma omp parallel if (N * K > (1 << 15))
  gemv_tiles_share(T, K, N, omp_get_thread_num(), omp_get_num_threads(), kGemvTiles, fn);
}

// bf16 weights through a GEMV kernel for every T (kDot: vdpbf16ps on x rounded to bf16; kFma:
// f32 FMAs on x rounded and split into even/odd halves): x prepared once, tile by tile (each of
// gemv_tiles_share's token tiles one contiguous block at t0 * Kp), then one thread team for every
// product of that x, each thread taking its share of each (q, k and v, or gate and up, pay one
// team start and join, not one per product: each costs microseconds against products of tens).
struct GemvProduct {
  const uint16_t* w;       // row-major [N, K]
  const uint16_t* panels;  // the dot kernel's panels of w (that kernel reads only these), else nullptr
  int64_t N;
  float* y;  // [T, N]
};

// The kernels as linear_bf16_gemv calls them: rows [n0, n1) of product p for the x tile at xb,
// into y (p.y's rows of that tile), the rows from `next` on fetched ahead where next >= 0 (the
// dot kernel fetches its own panels' stream ahead; linear_bf16 gives every product panels).
void dot_rows(const uint16_t* xb, int64_t tn, int64_t /*K*/, int64_t Kp, const GemvProduct& p, int64_t n0, int64_t n1,
              float* y, int64_t /*next*/) {
  gemv_panels_bf16dot(xb, tn, Kp, p.panels, n0, n1, y, p.N);
}

void fma_rows(const float* xs, int64_t tn, int64_t K, int64_t Kp, const GemvProduct& p, int64_t n0, int64_t n1,
              float* y, int64_t next) {
  gemv_rows_bf16fma(xs, tn, K, Kp, p.w, n0, n1, y, p.N, next < 0 ? nullptr : p.w + next * K);
}

void avx2_rows(const float* xs, int64_t tn, int64_t K, int64_t Kp, const GemvProduct& p, int64_t n0, int64_t n1,
               float* y, int64_t next) {
  gemv_rows_bf16fma_avx2(xs, tn, K, Kp, p.w, n0, n1, y, p.N, next < 0 ? nullptr : p.w + next * K);
}

// T <= tiles.whole: thread `id` of `nt`'s share of the products of one x (q, k and v; gate and
// up), fn(product, n0, n1) for each run of its weight rows. The products' rows, in units of
// `align`, form one list and each thread takes a contiguous run of it (a run may end in one
// product and go on in the next), so every thread gets the same number of units even where a
// product's rows do not split evenly: k and v of the built-in policy (224 rows, 7 panels of 32)
// gave one thread 8 panels of them and the other 6, and the whole team waited for the first.
template <typename Fn>
void shared_rows_share(const GemvProduct* products, size_t count, int64_t align, int64_t id, int64_t nt, Fn&& fn) {
  int64_t total = 0;
  for (size_t i = 0; i < count; ++i)
    total += (products[i].N + align - 1) / align;
  const int64_t u0 = total * id / nt, u1 = total * (id + 1) / nt;
  int64_t base = 0;  // units before product i
  for (size_t i = 0; i < count; ++i) {
    const int64_t units = (products[i].N + align - 1) / align;
    const int64_t lo = std::max(u0, base), hi = std::min(u1, base + units);
    if (lo < hi)
      fn(products[i], (lo - base) * align, std::min(products[i].N, (hi - base) * align));
    base += units;
  }
}

template <typename Prep, typename Kernel, typename Elem>
void linear_bf16_gemv(const float* xp, int64_t T, int64_t K, const GemvProduct* products, size_t count, Prep prep,
                      Kernel kernel, GemvTiles tiles, std::vector<Elem, AlignedAllocator<Elem>>& buf) {
  const int64_t Kp = (K + 31) / 32 * 32;
  // The caller's thread-local buffer, the workers see it through xb. Grown, never shrunk: a
  // resize down and back up (a decode step between two verifications) zeroes the regrown part.
  if (buf.size() < static_cast<size_t>(T * Kp))
    buf.resize(static_cast<size_t>(T * Kp));
  Elem* const xb = buf.data();
  const int64_t tile = gemv_tile_rows(T, tiles);
  // Tiles prepared in parallel once there are a few (each row's result is the same either way).
  UPD_TEAM_FOR(T > tile && T * K > (1 << 13), c, (T + tile - 1) / tile,
               prep(xp + c * tile * K, std::min(tile, T - c * tile), K, Kp, xb + c * tile * Kp));
  int64_t work = 0;
  for (size_t i = 0; i < count; ++i)
    work += products[i].N * K;
#pragma omp parallel if (work > (1 << 15))
  {
    const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
    if (T <= tiles.whole) {
      shared_rows_share(products, count, tiles.align, id, nt, [&](const GemvProduct& p, int64_t n0, int64_t n1) {
        kernel(xb, T, K, Kp, p, n0, n1, p.y, int64_t{-1});
      });
    } else {
      for (size_t i = 0; i < count; ++i) {
        const GemvProduct& p = products[i];
        gemv_tiles_share(T, K, p.N, id, nt, tiles, [&](int64_t t0, int64_t tn, int64_t n0, int64_t n1, int64_t next) {
          kernel(xb + t0 * Kp, tn, K, Kp, p, n0, n1, p.y + t0 * p.N, next);
        });
      }
    }
  }
}

// bf16 weights with K a multiple of 32 on a CPU with AMX-BF16: each thread packs x into tiles
// itself (reading the packed tiles another core just wrote cost more than packing them twice:
// their loads sit on every step's critical path), then streams its share of each product's
// 16-row weight blocks once for every token chunk, from the row-major weights or, when given,
// their panels (the same bits either way). Several products of one x share the thread team and
// the packing (a team's start and join cost a few microseconds: a twentieth of a decode step).
struct AmxProduct {
  const uint16_t* w;       // row-major [N, K], or nullptr with panels
  const uint16_t* panels;  // nullptr: read w
  int64_t N;
  float* y;  // [T, N]
};

void linear_amx(const float* xp, int64_t T, int64_t K, const AmxProduct* products, size_t count) {
  int64_t work = 0;
  for (size_t i = 0; i < count; ++i)
    work += products[i].N * K;
#pragma omp parallel if (work > (1 << 15))
  {
    const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
    thread_local std::vector<uint16_t> xb, xa;  // x as B tiles (row-major weights), as A tiles (panels)
    bool packed_b = false, packed_a = false;
    for (size_t i = 0; i < count; ++i) {
      const AmxProduct& p = products[i];
      const int64_t blocks = (p.N + 15) / 16, b0 = blocks * id / nt, b1 = blocks * (id + 1) / nt;
      if (b0 >= b1)
        continue;
      if (p.panels != nullptr) {
        if (!std::exchange(packed_a, true)) {
          xa.resize(static_cast<size_t>(amx_rows_a_elems(T, K)));
          pack_rows_amx_a(xp, T, K, xa.data());
        }
        gemv_panels_amx(xa.data(), T, K, p.panels, p.N, b0, b1, p.y, p.N);
      } else {
        if (!std::exchange(packed_b, true)) {
          xb.resize(static_cast<size_t>(amx_packed_elems(T, K)));
          pack_rows_amx(xp, T, K, xb.data());
        }
        gemv_rows_amx(xb.data(), T, K, p.w, b0 * 16, std::min(p.N, b1 * 16), p.y, p.N);
      }
    }
  }
}

}  // namespace

bool linear_bf16(const Tensor& x, const std::vector<Bf16Product>& products) {
  const int64_t T = x.size(0), K = x.size(1);
  const CpuBf16Kernel kernel = cpu_bf16_kernel();
  if (kernel == CpuBf16Kernel::kPortable)
    return false;
  for (const Bf16Product& p : products)
    if (p.w->dtype() != DType::BF16)
      return false;
  if (T == 0)
    return true;  // nothing to compute
  const float* xp = x.data<float>();
  if (kernel == CpuBf16Kernel::kAmx && K % 32 == 0) {
    std::vector<AmxProduct> amx;
    for (const Bf16Product& p : products)
      amx.push_back({p.w->data<uint16_t>(), nullptr, p.w->size(0), p.y->data<float>()});
    linear_amx(xp, T, K, amx.data(), amx.size());
  } else {
    std::vector<GemvProduct> gemv;
    std::vector<Tensor> packed;  // this call's panels of weights not prepared (the trainer's bf16 copies)
    for (const Bf16Product& p : products) {
      const uint16_t* panels = nullptr;
      if (kernel == CpuBf16Kernel::kDot) {
        // The dot kernel reads panels only (their bits): a weight without them is packed here,
        // one pass over it, which a training-sized T repays many times over.
        if (p.dot_panels == nullptr) {
          packed.push_back(Tensor::empty({dot_panel_elems(p.w->size(0), K)}, DType::BF16));
          pack_panels_bf16dot(p.w->data<uint16_t>(), p.w->size(0), K, packed.back().data<uint16_t>());
        }
        panels = p.dot_panels != nullptr ? p.dot_panels->data<uint16_t>() : packed.back().data<uint16_t>();
      }
      gemv.push_back({p.w->data<uint16_t>(), panels, p.w->size(0), p.y->data<float>()});
    }
    if (kernel == CpuBf16Kernel::kDot) {
      thread_local std::vector<uint16_t, AlignedAllocator<uint16_t>> buf;
      linear_bf16_gemv(xp, T, K, gemv.data(), gemv.size(), round_rows_bf16, dot_rows, kDotTiles, buf);
    } else if (kernel == CpuBf16Kernel::kAvx2) {
      thread_local std::vector<float, AlignedAllocator<float>> buf;
      linear_bf16_gemv(xp, T, K, gemv.data(), gemv.size(), split_rows_bf16fma, avx2_rows, kAvx2Tiles, buf);
    } else {  // kFma, or AMX where K is not a multiple of 32
      thread_local std::vector<float, AlignedAllocator<float>> buf;
      linear_bf16_gemv(xp, T, K, gemv.data(), gemv.size(), split_rows_bf16fma, fma_rows, kGemvTiles, buf);
    }
  }
  for (const Bf16Product& p : products)
    add_bias_rows(p.bias, T, p.w->size(0), p.y->data<float>());
  return true;
}

void linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) {
  const int64_t T = x.size(0), K = x.size(1), N = w.size(0);
  if (T == 0 || N == 0 || linear_bf16(x, {{&w, bias, &y}}))
    return;
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  // bf16 weights multiply bf16 activations, as on the GPU: x is rounded first on every path.
  std::vector<float> xr;
  if (w.dtype() == DType::BF16) {
    xr.assign(xp, xp + T * K);
    for (float& v : xr)
      v = bf16_to_f32(f32_to_bf16(v));
    xp = xr.data();
  }
  if (T <= kGemvMaxT || w.dtype() != DType::F32) {
    // 16-bit weights at any T, f32 weights for decode shapes: the GEMV kernel, widening 16-bit
    // weights tile by tile in registers, so every row is the same whatever T is.
    for_gemv_tiles(T, K, N, [&](int64_t t0, int64_t tn, int64_t n0, int64_t n1, int64_t /*next*/) {
      gemv_rows(xp + t0 * K, tn, K, w.raw(), w.dtype(), n0, n1, yp + t0 * N, N);
    });
  } else {
    sgemm(false, true, T, N, K, 1.f, xp, K, w.data<float>(), K, 0.f, yp, N);
  }
  add_bias_rows(bias, T, N, yp);
}

bool linear_panels(const Tensor& x, const std::vector<PanelProduct>& products) {
  const int64_t T = x.size(0), K = x.size(1);
  if (cpu_bf16_kernel() != CpuBf16Kernel::kAmx || K % 32 != 0)
    return false;
  if (T == 0)
    return true;  // nothing to compute
  std::vector<AmxProduct> amx;
  for (const PanelProduct& p : products)
    amx.push_back({nullptr, p.panels->data<uint16_t>(), p.N, p.y->data<float>()});
  linear_amx(x.data<float>(), T, K, amx.data(), amx.size());
  for (const PanelProduct& p : products)
    add_bias_rows(p.bias, T, p.N, p.y->data<float>());
  return true;
}

Tensor pack_linear_dot_panels(const Tensor& w) {
  const int64_t N = w.size(0), K = w.size(1);
  if (w.dtype() != DType::BF16 || !cpu_has_avx512_bf16())
    return {};
  Tensor panels = host_weight_empty({dot_panel_elems(N, K)}, DType::BF16);
  pack_panels_bf16dot(w.data<uint16_t>(), N, K, panels.data<uint16_t>());
  return panels;
}

Tensor pack_linear_panels(const Tensor& w) {
  const int64_t N = w.size(0), K = w.size(1);
  if (w.dtype() != DType::BF16 || K % 32 != 0 || !cpu_has_amx_bf16())
    return {};
  Tensor panels = host_weight_empty({amx_panel_elems(N, K)}, DType::BF16);
  pack_panels_amx(w.data<uint16_t>(), N, K, panels.data<uint16_t>());
  return panels;
}

}  // namespace updraft::ops::cpu
