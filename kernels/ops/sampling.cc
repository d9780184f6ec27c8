#include "kernels/ops/sampling.h"

#include "kernels/ops/backend.h"

namespace updraft::ops {

void sampling_probs(const Tensor& logits, const Tensor& temperature, const Tensor& top_k, const Tensor& top_p,
                    Tensor probs) {
  const char* op = "sampling_probs";
  check_same_device(op, {&logits, &temperature, &top_k, &top_p, &probs});
  UPD_CHECK(logits.dim() == 2) << op << ": logits must be [R, V], got " << logits.str();
  const int64_t R = logits.size(0);
  check_dtype(op, "logits", logits, {DType::F32});
  check_shape(op, "temperature", temperature, {R});
  check_dtype(op, "temperature", temperature, {DType::F32});
  check_shape(op, "top_k", top_k, {R});
  check_dtype(op, "top_k", top_k, {DType::I32});
  check_shape(op, "top_p", top_p, {R});
  check_dtype(op, "top_p", top_p, {DType::F32});
  check_shape(op, "probs", probs, logits.shape());
  check_dtype(op, "probs", probs, {DType::F32});
  UPD_DISPATCH(logits.device(), sampling_probs, logits, temperature, top_k, top_p, probs);
}

void sample_from_probs(const Tensor& probs, const Tensor& uniforms, Tensor out) {
  const char* op = "sample_from_probs";
  check_same_device(op, {&probs, &uniforms, &out});
  UPD_CHECK(probs.dim() == 2) << op << ": probs must be [R, V], got " << probs.str();
  check_dtype(op, "probs", probs, {DType::F32});
  check_shape(op, "uniforms", uniforms, {probs.size(0)});
  check_dtype(op, "uniforms", uniforms, {DType::F32});
  check_shape(op, "out", out, {probs.size(0)});
  check_dtype(op, "out", out, {DType::I32});
  UPD_DISPATCH(probs.device(), sample_from_probs, probs, uniforms, out);
}

}  // namespace updraft::ops
