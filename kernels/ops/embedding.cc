#include "kernels/ops/embedding.h"

#include "kernels/ops/backend.h"

namespace updraft::ops {

void embedding(const Tensor& ids, const Tensor& table, Tensor out) {
  check_same_device("embedding", {&ids, &table, &out});
  UPD_CHECK(ids.dim() == 1 && table.dim() == 2)
      << "embedding: ids [T], table [V, H]; got " << ids.str() << ", " << table.str();
  check_dtype("embedding", "ids", ids, {DType::I32});
  check_dtype("embedding", "table", table, {DType::F32, DType::BF16, DType::F16});
  check_shape("embedding", "out", out, {ids.size(0), table.size(1)});
  if (out.is_cpu())
    check_dtype("embedding", "out", out, {DType::F32});
  else
    check_dtype("embedding", "out", out, {DType::F32, DType::BF16});
  UPD_DISPATCH(ids.device(), embedding, ids, table, out);
}

}  // namespace updraft::ops
