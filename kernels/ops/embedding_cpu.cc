#include "kernels/ops/backend.h"

namespace updraft::ops::cpu {

void embedding(const Tensor& ids, const Tensor& table, Tensor& out) {
  const int64_t T = ids.size(0), V = table.size(0), H = table.size(1);
  const int32_t* id = ids.data<int32_t>();
  for (int64_t t = 0; t < T; ++t)
    UPD_REQUIRE(id[t] >= 0 && id[t] < V) << "embedding: token id " << id[t] << " at position " << t
                                         << " is outside the vocabulary [0, " << V << ")";
  float* o = out.data<float>();
  for (int64_t t = 0; t < T; ++t) {
    const int64_t row = id[t];
    float* orow = o + t * H;
    switch (table.dtype()) {
      case DType::F32: {
        const float* s = table.data<float>() + row * H;
        for (int64_t i = 0; i < H; ++i)
          orow[i] = s[i];
        break;
      }
      case DType::BF16: {
        const uint16_t* s = table.data<uint16_t>() + row * H;
        for (int64_t i = 0; i < H; ++i)
          orow[i] = bf16_to_f32(s[i]);
        break;
      }
      default: {
        const uint16_t* s = table.data<uint16_t>() + row * H;
        for (int64_t i = 0; i < H; ++i)
          orow[i] = f16_to_f32(s[i]);
        break;
      }
    }
  }
}

}  // namespace updraft::ops::cpu
