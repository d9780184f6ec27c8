#include "kernels/core/tensor.h"

#include <cstring>
#include <sstream>

namespace updraft {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32:
      return 4;
    case DType::BF16:
      return 2;
    case DType::F16:
      return 2;
    case DType::I32:
      return 4;
    case DType::I64:
      return 8;
    case DType::Bool:
      return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "f32";
    case DType::BF16:
      return "bf16";
    case DType::F16:
      return "f16";
    case DType::I32:
      return "i32";
    case DType::I64:
      return "i64";
    case DType::Bool:
      return "bool";
  }
  return "?";
}

DType dtype_from_name(const std::string& n) {
  if (n == "f32" || n == "F32" || n == "float32")
    return DType::F32;
  if (n == "bf16" || n == "BF16" || n == "bfloat16")
    return DType::BF16;
  if (n == "f16" || n == "F16" || n == "float16")
    return DType::F16;
  if (n == "i32" || n == "I32" || n == "int32")
    return DType::I32;
  if (n == "i64" || n == "I64" || n == "int64")
    return DType::I64;
  if (n == "bool" || n == "BOOL")
    return DType::Bool;
  UPD_FAIL() << "unknown dtype '" << n << "'";
  return DType::F32;
}

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i)
    os << (i ? "," : "") << s[i];
  os << "]";
  return os.str();
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s)
    n *= d;
  return n;
}

Storage::Storage(Device device, size_t bytes)
    : device_(device), data_(device_alloc(device, bytes)), bytes_(bytes), owned_(true) {}

Storage::Storage(Device device, void* data, size_t bytes, std::shared_ptr<void> keep_alive)
    : device_(device), data_(data), bytes_(bytes), owned_(false), keep_alive_(std::move(keep_alive)) {}

Storage::~Storage() {
  if (owned_)
    device_free(device_, data_, bytes_);
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t d : shape)
    UPD_CHECK(d >= 0) << "negative dimension in " << shape_str(shape);
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.device_ = device;
  t.storage_ = std::make_shared<Storage>(device, t.nbytes());
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.zero_();
  return t;
}

Tensor Tensor::wrap(void* data, const Shape& shape, DType dtype, Device device, std::shared_ptr<void> keep_alive) {
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.device_ = device;
  t.storage_ = std::make_shared<Storage>(device, data, t.nbytes(), std::move(keep_alive));
  return t;
}

Tensor Tensor::from_f32(const std::vector<float>& v, const Shape& shape) {
  UPD_CHECK(shape_numel(shape) == static_cast<int64_t>(v.size()))
      << "from_f32: " << v.size() << " values for " << shape_str(shape);
  Tensor t = empty(shape, DType::F32);
  std::memcpy(t.raw(), v.data(), v.size() * 4);
  return t;
}

Tensor Tensor::from_i32(const std::vector<int32_t>& v, const Shape& shape) {
  UPD_CHECK(shape_numel(shape) == static_cast<int64_t>(v.size()))
      << "from_i32: " << v.size() << " values for " << shape_str(shape);
  Tensor t = empty(shape, DType::I32);
  std::memcpy(t.raw(), v.data(), v.size() * 4);
  return t;
}

Tensor Tensor::from_i64(const std::vector<int64_t>& v, const Shape& shape) {
  UPD_CHECK(shape_numel(shape) == static_cast<int64_t>(v.size()))
      << "from_i64: " << v.size() << " values for " << shape_str(shape);
  Tensor t = empty(shape, DType::I64);
  std::memcpy(t.raw(), v.data(), v.size() * 8);
  return t;
}

int64_t Tensor::size(int64_t d) const {
  int64_t n = dim();
  if (d < 0)
    d += n;
  UPD_CHECK(d >= 0 && d < n) << "dimension " << d << " out of range for " << str();
  return shape_[static_cast<size_t>(d)];
}

void* Tensor::raw() const {
  UPD_CHECK(defined()) << "use of an undefined tensor";
  return static_cast<char*>(storage_->data()) + offset_;
}

Tensor Tensor::reshape(const Shape& shape) const {
  Shape s = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      UPD_CHECK(infer < 0) << "reshape: two -1 dimensions";
      infer = static_cast<int64_t>(i);
    } else {
      known *= s[i];
    }
  }
  if (infer >= 0) {
    UPD_CHECK(known > 0 && numel() % known == 0) << "reshape " << str() << " to " << shape_str(shape);
    s[static_cast<size_t>(infer)] = numel() / known;
  }
  UPD_CHECK(shape_numel(s) == numel()) << "reshape " << str() << " to " << shape_str(shape);
  Tensor t = *this;
  t.shape_ = s;
  return t;
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
  UPD_CHECK(dim() >= 1) << "rows() of a scalar";
  UPD_CHECK(0 <= begin && begin <= end && end <= shape_[0]) << "rows(" << begin << "," << end << ") of " << str();
  Tensor t = *this;
  int64_t row_elems = shape_[0] == 0 ? 0 : numel() / shape_[0];
  t.offset_ += static_cast<size_t>(begin * row_elems) * dtype_size(dtype_);
  t.shape_[0] = end - begin;
  return t;
}

Tensor Tensor::to(Device device) const {
  if (device == device_)
    return *this;
  Tensor t = empty(shape_, dtype_, device);
  device_copy(t.raw(), device, raw(), device_, nbytes());
  return t;
}

static bool is_float(DType t) {
  return t == DType::F32 || t == DType::BF16 || t == DType::F16;
}

static float load_float(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::F32:
      return static_cast<const float*>(p)[i];
    case DType::BF16:
      return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::F16:
      return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    default:
      break;
  }
  return 0.f;
}

static void store_float(void* p, DType t, int64_t i, float v) {
  switch (t) {
    case DType::F32:
      static_cast<float*>(p)[i] = v;
      break;
    case DType::BF16:
      static_cast<uint16_t*>(p)[i] = f32_to_bf16(v);
      break;
    case DType::F16:
      static_cast<uint16_t*>(p)[i] = f32_to_f16(v);
      break;
    default:
      break;
  }
}

static int64_t load_int(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::I32:
      return static_cast<const int32_t*>(p)[i];
    case DType::I64:
      return static_cast<const int64_t*>(p)[i];
    case DType::Bool:
      return static_cast<const uint8_t*>(p)[i] != 0;
    default:
      break;
  }
  return 0;
}

static void store_int(void* p, DType t, int64_t i, int64_t v) {
  switch (t) {
    case DType::I32:
      static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
      break;
    case DType::I64:
      static_cast<int64_t*>(p)[i] = v;
      break;
    case DType::Bool:
      static_cast<uint8_t*>(p)[i] = v != 0;
      break;
    default:
      break;
  }
}

Tensor Tensor::to_dtype(DType dtype) const {
  UPD_CHECK(is_cpu()) << "to_dtype runs on CPU tensors; got " << str();
  if (dtype == dtype_)
    return *this;
  UPD_CHECK(is_float(dtype) == is_float(dtype_))
      << "to_dtype between float and integer types: " << str() << " -> " << dtype_name(dtype);
  Tensor t = empty(shape_, dtype, Device::CPU);
  const int64_t n = numel();
  const void* src = raw();
  void* dst = t.raw();
  if (is_float(dtype)) {
    for (int64_t i = 0; i < n; ++i)
      store_float(dst, dtype, i, load_float(src, dtype_, i));
  } else {
    for (int64_t i = 0; i < n; ++i)
      store_int(dst, dtype, i, load_int(src, dtype_, i));
  }
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  UPD_CHECK(src.dtype() == dtype_ && src.numel() == numel()) << "copy_from " << src.str() << " into " << str();
  device_copy(raw(), device_, src.raw(), src.device(), nbytes());
}

void Tensor::zero_() {
  device_zero(raw(), device_, nbytes());
}

std::vector<float> Tensor::to_f32_vector() const {
  Tensor c = to(Device::CPU);
  UPD_CHECK(is_float(dtype_)) << "to_f32_vector of " << str();
  std::vector<float> v(static_cast<size_t>(numel()));
  for (int64_t i = 0; i < numel(); ++i)
    v[static_cast<size_t>(i)] = load_float(c.raw(), dtype_, i);
  return v;
}

int64_t Tensor::first_non_finite() const {
  if (!is_float(dtype_))
    return -1;
  const Tensor c = to(Device::CPU);
  const int64_t n = numel();
  // Non-finite exactly when the exponent bits are all ones, in each of the three formats.
  if (dtype_ == DType::F32) {
    const uint32_t* p = static_cast<const uint32_t*>(c.raw());
    for (int64_t i = 0; i < n; ++i)
      if ((p[i] & 0x7f800000u) == 0x7f800000u)
        return i;
    return -1;
  }
  const uint16_t mask = dtype_ == DType::BF16 ? 0x7f80u : 0x7c00u;
  const uint16_t* p = static_cast<const uint16_t*>(c.raw());
  for (int64_t i = 0; i < n; ++i)
    if ((p[i] & mask) == mask)
      return i;
  return -1;
}

std::vector<int32_t> Tensor::to_i32_vector() const {
  Tensor c = to(Device::CPU);
  UPD_CHECK(!is_float(dtype_)) << "to_i32_vector of " << str();
  std::vector<int32_t> v(static_cast<size_t>(numel()));
  for (int64_t i = 0; i < numel(); ++i)
    v[static_cast<size_t>(i)] = static_cast<int32_t>(load_int(c.raw(), dtype_, i));
  return v;
}

std::string Tensor::str() const {
  if (!defined())
    return "undefined";
  return std::string(dtype_name(dtype_)) + shape_str(shape_) + "@" + device_name(device_);
}

void check_shape(const char* op, const char* name, const Tensor& t, const Shape& want) {
  UPD_CHECK(t.defined()) << op << ": " << name << " is undefined";
  UPD_CHECK(t.shape() == want) << op << ": " << name << " has shape " << shape_str(t.shape()) << ", expected "
                               << shape_str(want);
}

void check_dtype(const char* op, const char* name, const Tensor& t, std::initializer_list<DType> allowed) {
  UPD_CHECK(t.defined()) << op << ": " << name << " is undefined";
  for (DType d : allowed)
    if (t.dtype() == d)
      return;
  std::string list;
  for (DType d : allowed)
    list += std::string(list.empty() ? "" : "/") + dtype_name(d);
  UPD_CHECK(false) << op << ": " << name << " has dtype " << dtype_name(t.dtype()) << ", expected " << list;
}

void check_same_device(const char* op, std::initializer_list<const Tensor*> ts) {
  const Tensor* first = nullptr;
  for (const Tensor* t : ts) {
    if (t == nullptr || !t->defined())
      continue;
    if (first == nullptr)
      first = t;
    UPD_CHECK(t->device() == first->device())
        << op << ": tensors on different devices (" << first->str() << ", " << t->str() << ")";
  }
}

}  // namespace updraft
