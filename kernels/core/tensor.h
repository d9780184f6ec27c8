// Tensor: a typed, shaped, row-major contiguous view of memory on one device.
//
// Ownership: a Tensor holds a shared reference to its Storage, so copies of a Tensor are
// cheap handles onto the same bytes (like torch.Tensor). Storage owns its memory (RAII;
// freed with the last handle) unless it wraps external memory (Tensor::wrap), in which case a
// keep-alive object chosen by the caller (an mmap, a message buffer) holds it.
//
// Views: reshape() and rows() return views sharing storage; all tensors are contiguous, so a
// view is (storage, byte offset, shape). Copying data needs copy_from() or to().
//
// Thread safety: handles may be copied across threads; concurrent writes to the same bytes
// are the caller's to avoid.
//
// Dimension names used throughout updraft: B batch, T tokens, H hidden, V vocab, Vd draft
// vocab, NH / NKV query / key-value heads, HD head dim, L layers, S cached keys.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "kernels/core/device.h"
#include "kernels/core/dtype.h"
#include "kernels/core/error.h"

namespace updraft {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);
int64_t shape_numel(const Shape& s);

class Storage {
 public:
  Storage(Device device, size_t bytes);                                                // allocates
  Storage(Device device, void* data, size_t bytes, std::shared_ptr<void> keep_alive);  // wraps
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  Device device_;
  void* data_;
  size_t bytes_;
  bool owned_;
  std::shared_ptr<void> keep_alive_;
};

class Tensor {
 public:
  Tensor() = default;  // undefined tensor: defined() == false

  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::CPU);
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::CPU);
  // Wraps external host or device memory without copying; keep_alive is held by the tensor.
  static Tensor wrap(void* data, const Shape& shape, DType dtype, Device device, std::shared_ptr<void> keep_alive);
  // CPU f32 / i32 / i64 tensors from values (for tests and small constants).
  static Tensor from_f32(const std::vector<float>& v, const Shape& shape);
  static Tensor from_i32(const std::vector<int32_t>& v, const Shape& shape);
  static Tensor from_i64(const std::vector<int64_t>& v, const Shape& shape);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  bool is_cpu() const { return device_ == Device::CPU; }

  void* raw() const;
  template <typename T>
  T* data() const {
    return static_cast<T*>(raw());
  }

  // View with a new shape of the same numel; one dimension may be -1.
  Tensor reshape(const Shape& shape) const;
  // View of rows [begin, end) along dimension 0.
  Tensor rows(int64_t begin, int64_t end) const;
  Tensor row(int64_t i) const { return rows(i, i + 1); }

  // A new tensor with the same contents on `device` (returns *this if already there).
  Tensor to(Device device) const;
  // A new CPU tensor converted to dtype (float types among themselves, ints among themselves).
  Tensor to_dtype(DType dtype) const;
  // Copies src's bytes into this tensor (same dtype and numel; any devices).
  void copy_from(const Tensor& src);
  void zero_();

  // CPU f32 contents as a vector (converts bf16/f16; copies from device). For tests/tools.
  std::vector<float> to_f32_vector() const;
  std::vector<int32_t> to_i32_vector() const;

  std::string str() const;  // "f32[2,3]@cpu"

  // The index of the first NaN or infinity of a floating tensor (copied from a device), or -1
  // when every element is finite; for integer tensors -1.
  int64_t first_non_finite() const;

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;  // bytes
  Shape shape_;
  DType dtype_ = DType::F32;
  Device device_ = Device::CPU;
};

// Precondition helpers used by op contracts; they throw CheckFailure naming the op.
void check_shape(const char* op, const char* name, const Tensor& t, const Shape& want);
void check_dtype(const char* op, const char* name, const Tensor& t, std::initializer_list<DType> allowed);
void check_same_device(const char* op, std::initializer_list<const Tensor*> ts);

}  // namespace updraft
