#include "kernels/ops/rope.h"

#include <cmath>
#include <vector>

#include "kernels/ops/backend.h"

namespace updraft::ops {

Tensor rope_inv_freq(const RopeParams& p, int64_t head_dim, Device device) {
  UPD_CHECK(head_dim > 0 && head_dim % 2 == 0) << "rope: head_dim must be even, got " << head_dim;
  UPD_REQUIRE(p.theta > 0) << "rope: theta must be positive, got " << p.theta;
  const int64_t half = head_dim / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    // Hugging Face: 1 / base ** (arange(0, dim, 2, int64).float() / dim), in f32.
    float expo = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    inv[static_cast<size_t>(i)] = 1.0f / std::pow(static_cast<float>(p.theta), expo);
  }
  if (p.scaling == "linear") {
    UPD_REQUIRE(p.factor > 0) << "rope: linear scaling factor must be positive";
    for (float& f : inv)
      f = static_cast<float>(f / p.factor);
  } else if (p.scaling == "llama3") {
    // Llama 3.1: wavelengths longer than original_max/low_freq_factor are divided by factor,
    // shorter than original_max/high_freq_factor kept, and a linear blend in between:
    //   smooth = (original_max / wavelen - low) / (high - low)
    //   inv    = (1 - smooth) * inv / factor + smooth * inv
    UPD_REQUIRE(p.factor > 0 && p.high_freq_factor > p.low_freq_factor)
        << "rope: llama3 scaling needs factor > 0 and high_freq_factor > low_freq_factor";
    const double low_wavelen = p.original_max_position / p.low_freq_factor;
    const double high_wavelen = p.original_max_position / p.high_freq_factor;
    for (float& f : inv) {
      const double wavelen = 2.0 * M_PI / f;
      if (wavelen > low_wavelen) {
        f = static_cast<float>(f / p.factor);
      } else if (wavelen >= high_wavelen) {
        const double smooth =
            (p.original_max_position / wavelen - p.low_freq_factor) / (p.high_freq_factor - p.low_freq_factor);
        f = static_cast<float>((1.0 - smooth) * f / p.factor + smooth * f);
      }
    }
  } else {
    UPD_REQUIRE(p.scaling == "none" || p.scaling == "default")
        << "rope: unsupported scaling type '" << p.scaling << "' (supported: none, linear, llama3)";
  }
  Tensor t = Tensor::from_f32(inv, {half});
  return t.to(device);
}

void rope(Tensor x, const Tensor& positions, const Tensor& inv_freq) {
  check_same_device("rope", {&x, &positions, &inv_freq});
  UPD_CHECK(x.dim() == 3) << "rope: x must be [T, NH, HD], got " << x.str();
  UPD_CHECK(x.size(2) % 2 == 0) << "rope: head dim must be even";
  check_shape("rope", "positions", positions, {x.size(0)});
  check_dtype("rope", "positions", positions, {DType::I32});
  check_shape("rope", "inv_freq", inv_freq, {x.size(2) / 2});
  check_dtype("rope", "inv_freq", inv_freq, {DType::F32});
  if (x.is_cpu())
    check_dtype("rope", "x", x, {DType::F32});
  else
    check_dtype("rope", "x", x, {DType::F32, DType::BF16});
  UPD_DISPATCH(x.device(), rope, x, positions, inv_freq);
}

}  // namespace updraft::ops
