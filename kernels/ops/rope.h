// Rotary position embedding, NeoX "rotate-half" layout (Llama, Qwen, EAGLE-3 drafters).
//
// For each row t, head h and i < D/2 (D = rotary dim = HD):
//   a = pos[t] * inv_freq[i]   (f32, as Hugging Face computes it)
//   x'[i]       = x[i] * cos(a) - x[i + D/2] * sin(a)
//   x'[i + D/2] = x[i + D/2] * cos(a) + x[i] * sin(a)
//
// rope_inv_freq builds inv_freq[HD/2] on the host from the config: base theta, and the
// scaling rules "linear" (divide by factor) and "llama3" (Llama 3.1: low frequencies divided
// by factor, high kept, a smooth ramp in between; see rope.cc for the exact formula).
//
// rope: x [T, NH, HD] rotated in place; positions i32 [T]; inv_freq f32 [HD/2] on x's device.
// CPU: x f32.  CUDA: x f32 or bf16.
#pragma once

#include <string>

#include "kernels/core/tensor.h"

namespace updraft::ops {

struct RopeParams {
  double theta = 10000.0;
  std::string scaling = "none";          // "none", "linear", "llama3"
  double factor = 1.0;                   // linear, llama3
  double low_freq_factor = 1.0;          // llama3
  double high_freq_factor = 4.0;         // llama3
  int64_t original_max_position = 8192;  // llama3
};

Tensor rope_inv_freq(const RopeParams& p, int64_t head_dim, Device device = Device::CPU);

void rope(Tensor x, const Tensor& positions, const Tensor& inv_freq);

}  // namespace updraft::ops
