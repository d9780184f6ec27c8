// Internal: the bandwidth-bound matrix-vector kernels behind linear() for decode shapes.
//
// gemv_rows computes y[t, n] = sum_k x[t, k] * w[n, k] for t < T (1 <= T <= kGemvMaxT) and
// rows n in [n_begin, n_end) of a row-major weight w [N, K] of dtype wt (f32/bf16/f16).
// x is f32 [T, K] (row stride K); y is f32 with row stride ldy. Single-threaded; callers
// split rows across threads.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/core/dtype.h"
#include "kernels/core/host_arena.h"
#include "kernels/core/tensor.h"

namespace updraft::ops::cpu {

constexpr int64_t kGemvMaxT = 8;

void gemv_rows(const float* x, int64_t T, int64_t K, const void* w, DType wt, int64_t n_begin, int64_t n_end, float* y,
               int64_t ldy);

// The portable version (any x86-64) and the AVX-512 one (only if the CPU has it).
void gemv_rows_generic(const float* x, int64_t T, int64_t K, const void* w, DType wt, int64_t n_begin, int64_t n_end,
                       float* y, int64_t ldy);
void gemv_rows_avx512(const float* x, int64_t T, int64_t K, const void* w, DType wt, int64_t n_begin, int64_t n_end,
                      float* y, int64_t ldy);
bool cpu_has_avx512();

// bf16 x bf16 products summed in f32 (vdpbf16ps), for bf16 weights, where cpu_has_avx512_bf16().
// xb: the activations rounded to bf16, [T, Kp] with Kp = K rounded up to 32 and zeros beyond K
// (round_rows_bf16 writes that from f32 [T, K]). The weights are read in panels of 32 rows, one
// sequential stream per thread: pack_panels_bf16dot writes w [N, K] as dot_panel_elems(N, K) values: for each
// block of 32 rows (the last zero-padded), for each pair of k (zeros beyond K), the 32 rows' two
// values. gemv_panels_bf16dot computes rows [n_begin, n_end) (n_begin a multiple of 32) of
// T <= kDotPanelsMaxT rows of x, each output one vdpbf16ps chain over the k-pairs in order
// (gemv_bf16dot_avx512.cc), so its bits do not depend on T or on the split of the rows; y has
// row stride ldy. linear() packs a weight that has no panels for the call, and cuts more than
// kDotPanelsMaxT rows into tiles of at most kDotPanelsTileT.
constexpr int64_t kDotPanelsMaxT = 16;
constexpr int64_t kDotPanelsTileT = 14;
constexpr int64_t kDotPanelRows = 32;
constexpr int64_t dot_panel_elems(int64_t N, int64_t K) {
  return (N + kDotPanelRows - 1) / kDotPanelRows * kDotPanelRows * ((K + 31) / 32 * 32);
}
void pack_panels_bf16dot(const uint16_t* w, int64_t N, int64_t K, uint16_t* out);
void round_rows_bf16(const float* x, int64_t T, int64_t K, int64_t Kp, uint16_t* xb);
bool cpu_has_avx512_bf16();
void gemv_panels_bf16dot(const uint16_t* xb, int64_t T, int64_t Kp, const uint16_t* panels, int64_t n_begin,
                         int64_t n_end, float* y, int64_t ldy);

// bf16 x bf16 products summed on the f32 FMA units. split_rows_bf16fma writes x [T, K] rounded
// to bf16, step-major: for each 32-k step, the T rows' 16 even then 16 odd elements (f32, zeros
// beyond K; T * Kp floats, 64-byte aligned; portable code). gemv_rows_bf16fma takes one such block
// of T rows; otherwise as the dot kernel with row-major weights. Any CPU with AVX-512.
void split_rows_bf16fma(const float* x, int64_t T, int64_t K, int64_t Kp, float* xs);
void gemv_rows_bf16fma(const float* xs, int64_t T, int64_t K, int64_t Kp, const uint16_t* w, int64_t n_begin,
                       int64_t n_end, float* y, int64_t ldy, const uint16_t* ahead = nullptr);
// The same products in 256-bit vectors (gemv_bf16fma_avx2.cc), from the same split activations,
// for CPUs with AVX2 and FMA (cpu_has_avx2_fma()), T up to kAvx2MaxT in one pass over the weights
// (up to 4 rows of x at a time against them, from L1); its own summation order (8 lanes, not 16),
// so its bits differ from gemv_rows_bf16fma's, and likewise do not depend on T or the row split.
// split_steps_bf16fma_avx2: split_rows_bf16fma's output for the steps below `end` (a multiple of
// 32, <= K), bit for bit, 8 floats at a time; split_rows_bf16fma calls it where cpu_has_avx2_fma().
bool cpu_has_avx2_fma();
constexpr int64_t kAvx2MaxT = 16;
void gemv_rows_bf16fma_avx2(const float* xs, int64_t T, int64_t K, int64_t Kp, const uint16_t* w, int64_t n_begin,
                            int64_t n_end, float* y, int64_t ldy, const uint16_t* ahead = nullptr);
void split_steps_bf16fma_avx2(const float* x, int64_t T, int64_t K, int64_t end, float* xs);

// AMX-BF16 tiles (TDPBF16PS), for bf16 weights with K a multiple of 32. x is packed once per
// call by pack_rows_amx into amx_packed_elems(T, K) bf16 values (token rows in chunks of 16,
// each chunk min(T, 16) columns wide, rounded to bf16 as round_rows_bf16 rounds them; the
// columns of a last chunk beyond T are left as they were: they only reach columns of y that are
// never written back); [t_begin, t_end) packs those rows of the T (t_end -1: to T), so that
// chunks can be packed in parallel. gemv_rows_amx writes
// y[t * ldy + n] for every t < T and n in [n_begin, n_end); n_begin is a multiple of 16 and
// n_end is too unless it is the matrix's last row (a short last block is read through a
// zero-padded copy, never past the weights). Each row of y is computed by the same instructions
// in the same order whatever T is. cpu_has_amx_bf16(): the CPU has AMX-BF16 and the kernel let
// this process use the tile state.
bool cpu_has_amx_bf16();
constexpr int64_t amx_packed_elems(int64_t T, int64_t K) {
  return (T + 15) / 16 * (K / 32) * 512;
}
void pack_rows_amx(const float* x, int64_t T, int64_t K, uint16_t* xp, int64_t t_begin = 0, int64_t t_end = -1);
void gemv_rows_amx(const uint16_t* xp, int64_t T, int64_t K, const uint16_t* w, int64_t n_begin, int64_t n_end,
                   float* y, int64_t ldy);
// The same products from the weights laid out in panels, with the operands the other way round
// (gemv_amx_panels.cc): the activations are the A tiles, x rounded to bf16 row-major by
// pack_rows_amx_a into amx_rows_a_elems(T, K) values (past 16 rows padded to a multiple of 16
// rows, here zeros; the kernel only reads them into C rows it never stores), and the weights the B tiles:
// pack_panels_amx writes w [N, K] (K a multiple of 32) as amx_panel_elems(N, K) values, blocks of 16 rows (the last
// zero-padded) grouped four to a panel, a panel's tiles step-major (step s of its blocks j = 0.. one after another,
// each tile 16 k-pairs x 16 weight rows, contiguous), so every thread streams one contiguous run. gemv_panels_amx
// computes blocks [b_begin, b_end) of y (rows 16b.., those below N) with the bits gemv_rows_amx gives: every element
// sums the same exact products in the same order.
constexpr int64_t amx_panel_elems(int64_t N, int64_t K) {
  return (N + 15) / 16 * 16 * K;
}
constexpr int64_t amx_rows_a_elems(int64_t T, int64_t K) {
  return (T <= 16 ? T : (T + 15) / 16 * 16) * K;
}
void pack_panels_amx(const uint16_t* w, int64_t N, int64_t K, uint16_t* out);
void pack_rows_amx_a(const float* x, int64_t T, int64_t K, uint16_t* xa);
void gemv_panels_amx(const uint16_t* xa, int64_t T, int64_t K, const uint16_t* panels, int64_t N, int64_t b_begin,
                     int64_t b_end, float* y, int64_t ldy);
// Load this thread's tile configuration, unless it is loaded already: amx_configure_tiles, the
// row-major kernel's (B and C tiles `cols` token columns wide, A tiles 16 x 64 bytes);
// amx_configure_rows, the panel kernels' (A and C tiles `rows` token rows high, all 64 bytes wide).
void amx_configure_tiles(int64_t cols);
void amx_configure_rows(int64_t rows);

// int8 weights (ops::prepare_linear_int8): each weight row n quantized symmetrically to
// q[n, k] = clamp(nearbyint(w[n, k] * (127 / m)), -127, 127) with m = max_k |w[n, k]| and
// scale[n] = m / 127;
// each activation row t the same way, on every call (quantize_row_int8); then
//   y[t, n] = (float(sum_k xq[t, k] * q[n, k]) * xscale[t]) * scale[n]
// with the sum exact in int32 (K * 127 * 127 < 2^31 for K < 133,000), so every kernel that
// computes it gives the same bits whatever T is and however the rows are split: the reference
// loop below and the AMX-INT8 tiles (TDPBSSD, panels of int8 weights in pack_panels_amx's
// layout, a 4-byte k-quad where a bf16 weight has a pair; K a multiple of 64). A row whose values are not all finite
// gets a non-finite scale and non-finite outputs; a row of zeros, or one so small that 127 / max overflows, quantizes
// to zeros with scale 0.
struct Int8Weight {
  int64_t N = 0, K = 0;
  std::vector<int8_t> q;       // [N, K]
  std::vector<float> scale;    // [N]
  std::vector<int32_t> row_sums;  // [N]: sum_k q[n, k] (the VNNI kernel's correction)
  // The copy the kernels stream, in huge pages (kernels/core/host_arena.h):
  StreamedWeights<int8_t> panels;       // empty, or q in AMX panels (cpu_has_amx_int8(), K % 64 == 0)
  StreamedWeights<int8_t> vnni_panels;  // empty, or q in pack_panels_vnni's layout (where `panels` is not built)
};
Int8Weight quantize_weight_int8(const Tensor& w);               // w: CPU [N, K] f32, bf16 or f16
float quantize_row_int8(const float* x, int64_t K, int8_t* q);  // returns the row's scale
bool cpu_has_amx_int8();
// y [T, N] (row stride ldy) for weight rows [n_begin, n_end): the reference loop.
void linear_int8_reference(const int8_t* xq, const float* xscale, int64_t T, const Int8Weight& w, int64_t n_begin,
                           int64_t n_end, float* y, int64_t ldy);
// AMX-INT8: gemv_panels_amx_i8 computes blocks [b_begin, b_end) of 16 weight rows from
// w.panels, as linear_int8_reference, with xq [T, K] as the A tiles: amx_rows_a_elems(T, K)
// bytes, past 16 rows padded to a multiple of 16 rows (any bytes: they reach only C rows that
// are never stored).
void gemv_panels_amx_i8(const int8_t* xq, int64_t T, const float* xscale, const Int8Weight& w, int64_t b_begin,
                        int64_t b_end, float* y, int64_t ldy);
// AVX512-VNNI (linear_int8_vnni_avx512.cc): linear_int8_vnni computes weight rows
// [n_begin, n_end) (any) of y as linear_int8_reference does, bit for bit, from xu [T, K], the int8
// rows offset by 128 into unsigned bytes (offset_rows_u8 writes `count` of them), and w's VNNI
// panels (an Error without them), for K <= 65,536 (so that the offset sums stay within int32).
// pack_panels_vnni writes q [N, K] as vnni_panel_elems(N, K) bytes: for each block of 4 rows (the
// last zero-padded), for each 64-byte step (zeros past K), the 4 rows' 64 bytes one after
// another. quantize_weight_int8 builds them where cpu_has_avx512_vnni(), K <= kVnniMaxK and no
// AMX panels are built. Only where cpu_has_avx512_vnni().
bool cpu_has_avx512_vnni();
constexpr int64_t kVnniMaxK = 65536;
constexpr int64_t vnni_panel_k(int64_t K) {
  return (K + 63) / 64 * 64;
}
constexpr int64_t vnni_panel_elems(int64_t N, int64_t K) {
  return (N + 3) / 4 * 4 * vnni_panel_k(K);
}
void pack_panels_vnni(const int8_t* q, int64_t N, int64_t K, int8_t* out);
void offset_rows_u8(const int8_t* xq, int64_t count, uint8_t* xu);
void linear_int8_vnni(const uint8_t* xu, const float* xscale, int64_t T, const Int8Weight& w, int64_t n_begin,
                      int64_t n_end, float* y, int64_t ldy);
// quantize_row_int8 for T rows of x (row stride K, K a multiple of 16) in AVX-512: the same
// bytes and scales (IEEE products, rounding to nearest even). Only where cpu_has_avx512().
void quantize_rows_int8_avx512(const float* x, int64_t T, int64_t K, int8_t* q, float* scale);

// Every y = x w^T (+ bias) of int8 weights sharing one input x (f32 [T, K], K each weight's),
// in one pass of the thread team: AMX-INT8 where every weight has panels, else the reference.
struct Int8Product {
  const Int8Weight* w;
  const Tensor* bias;  // nullptr: none
  Tensor* y;           // f32 [T, N]
};
void linear_int8(const Tensor& x, const std::vector<Int8Product>& products);
// y [T, N] += bias (f32, bf16 or f16 [N]) on every row; nothing where bias is nullptr.
void add_bias_rows(const Tensor* bias, int64_t T, int64_t N, float* y);

// Every y = x w^T (+ bias) of bf16 row-major weights w [N, K] sharing one input x (f32 [T, K]),
// through the process's bf16 kernel in one pass of the thread team (x rounded or packed once),
// each y bitwise what linear() gives it alone; false (nothing done) where the kernel is the
// portable one or a weight is not bf16. Shapes are the caller's to check.
struct Bf16Product {
  const Tensor* w;
  const Tensor* bias;  // nullptr: none
  Tensor* y;
  const Tensor* dot_panels = nullptr;  // w's pack_linear_dot_panels, read when the kernel is dot
};
bool linear_bf16(const Tensor& x, const std::vector<Bf16Product>& products);
// w's pack_panels_bf16dot as a bf16 tensor, or an undefined tensor where w is not bf16 or the CPU
// lacks AVX512-BF16.
Tensor pack_linear_dot_panels(const Tensor& w);

// ops::LinearWeight's CPU side. pack_linear_panels: w's panels (pack_panels_amx) as a bf16
// tensor, or an undefined tensor where w is not bf16, K is not a multiple of 32 or the CPU lacks
// AMX. linear_panels: every y = x w^T (+ bias) from the panels of a weight with N rows, in one
// pass of the thread team, when the process's kernel is AMX and K is a multiple of 32 (true),
// else nothing (false). Shapes are the caller's to check.
struct PanelProduct {
  const Tensor* panels;
  int64_t N;
  const Tensor* bias;  // nullptr: none
  Tensor* y;
};
Tensor pack_linear_panels(const Tensor& w);
bool linear_panels(const Tensor& x, const std::vector<PanelProduct>& products);

// Issue rates of the bf16 kernels' inner instructions on this core, per second (register-resident
// chains; a few hundred microseconds each): the benchmarks' compute bounds.
double probe_dpbf16_rate();
double probe_amx_rate();  // TDPBF16PS per second (16 x 16 x 32 products each); needs AMX

}  // namespace updraft::ops::cpu
