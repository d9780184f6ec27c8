// The policy's sampling distribution and sampling from it.
//
// sampling_probs: probs[r, :] = the distribution a token is drawn from for row r:
//   temperature[r] == 0      -> one-hot at argmax(logits[r]) (greedy),
//   otherwise                -> softmax(logits[r] / temperature[r]), then
//   top_k[r] > 0             -> keep the top_k[r] largest (ties: lower index first),
//   top_p[r] < 1             -> keep the smallest prefix of tokens sorted by probability
//                               (descending, ties lower index first) whose mass reaches
//                               top_p[r] (the token that crosses top_p is kept),
//   renormalised to sum 1. This is the distribution logprobs refer to (the RL convention:
//   the temperature-scaled, filtered policy), identical for plain and speculative decoding.
//   logits [R, V] f32; temperature f32 [R]; top_k i32 [R]; top_p f32 [R]; probs f32 [R, V].
//
// sample_from_probs: out[r] = smallest i with cumsum(probs[r])[i] > u[r] * sum(probs[r]),
//   skipping zero-probability entries. uniforms f32 [R] in [0,1); out i32 [R].
//
// Errors: the CPU backend throws Error for temperature < 0, top_p outside (0, 1], top_k < 0
// and a row with no mass; kernels cannot throw, so on CUDA the request path validates sampling
// params on the host before they reach the op.
//
// uniform01(seed, counter): a counter-based random number in [0, 1) with 24 bits, the same
//   on host and device, so that a seeded request draws the same numbers on every backend.
#pragma once

#include <cstdint>

#include "kernels/core/dtype.h"
#include "kernels/core/tensor.h"

namespace updraft::ops {

UPD_HD uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

UPD_HD float uniform01(uint64_t seed, uint64_t counter) {
  uint64_t z = mix64(seed ^ mix64(counter));
  return static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
}

void sampling_probs(const Tensor& logits, const Tensor& temperature, const Tensor& top_k, const Tensor& top_p,
                    Tensor probs);

void sample_from_probs(const Tensor& probs, const Tensor& uniforms, Tensor out);

}  // namespace updraft::ops
