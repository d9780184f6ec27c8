// Element types and exact conversions between fp32 and the 16-bit float formats.
//
// bf16 and f16 are stored as raw uint16_t bit patterns. Conversions to 16 bits round to
// nearest, ties to even (the IEEE default and what PyTorch does); NaN stays NaN (quiet),
// overflow goes to +-inf, f16 handles subnormals. All functions are usable from CUDA device
// code as well (UPD_HD).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#if defined(__CUDACC__)
#define UPD_HD __host__ __device__ __forceinline__
#else
#define UPD_HD inline
#endif

namespace updraft {

enum class DType : uint8_t { F32, BF16, F16, I32, I64, Bool };

size_t dtype_size(DType t);
const char* dtype_name(DType t);                 // "f32", "bf16", ...
DType dtype_from_name(const std::string& name);  // accepts ours and safetensors' ("F32", "BF16", ...); throws Error

UPD_HD uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
UPD_HD float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

UPD_HD float bf16_to_f32(uint16_t h) {
  return bits_f32(static_cast<uint32_t>(h) << 16);
}

UPD_HD uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;  // round to nearest, ties to even; carries into the exponent (-> inf) as IEEE wants
  return static_cast<uint16_t>(u >> 16);
}

UPD_HD float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t out;
  if (exp == 0) {
    if (man == 0) {
      out = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        man <<= 1;
      } while ((man & 0x400u) == 0);
      man &= 0x3ffu;
      out = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | (man << 13);
    }
  } else if (exp == 0x1f) {
    out = sign | 0x7f800000u | (man << 13) | (man ? 0x400000u : 0u);
  } else {
    out = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  return bits_f32(out);
}

UPD_HD uint16_t f32_to_f16(float f) {
  uint32_t u = f32_bits(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t au = u & 0x7fffffffu;
  if (au > 0x7f800000u)
    return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (au >= 0x477ff000u)
    return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520 -> inf
  if (au < 0x38800000u) {                          // below the smallest normal f16 (2^-14): subnormal or zero
    if (au < 0x33000000u)
      return sign;  // < 2^-25 (half of the smallest subnormal) -> 0 (tie at 2^-25 -> even 0)
    uint32_t exp = au >> 23;
    uint32_t man = (au & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - exp;  // 14 + (126 - 112) ... so that result = man >> (shift)
    // value = man * 2^(exp-150); subnormal unit = 2^-24 -> count = man * 2^(exp-126)
    uint32_t q = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u)))
      ++q;
    return static_cast<uint16_t>(sign | q);
  }
  // normal: rebias and round the 13 dropped mantissa bits
  uint32_t r = au - ((127u - 15u) << 23);
  uint32_t lsb = (r >> 13) & 1u;
  r += 0xfffu + lsb;
  return static_cast<uint16_t>(sign | (r >> 13));
}

}  // namespace updraft
