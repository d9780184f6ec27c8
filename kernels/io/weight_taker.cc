#include "kernels/io/weight_taker.h"

namespace updraft {

WeightTaker::WeightTaker(const std::vector<std::string>& names, Getter get, Device device, std::string where)
    : names_(names.begin(), names.end()), get_(std::move(get)), device_(device), where_(std::move(where)) {}

Tensor WeightTaker::take_raw(const std::string& name) {
  UPD_REQUIRE(names_.count(name)) << where_ << ": missing tensor " << name;
  Tensor t = get_(name);
  UPD_REQUIRE(t.defined()) << where_ << ": missing tensor " << name;
  taken_.insert(name);
  return t;
}

Tensor WeightTaker::take(const std::string& name, const Shape& shape) {
  Tensor t = take_raw(name);
  UPD_REQUIRE(t.dtype() == DType::F32 || t.dtype() == DType::BF16 || t.dtype() == DType::F16)
      << where_ << ": tensor " << name << " has dtype " << dtype_name(t.dtype()) << " (expected F32, BF16 or F16)";
  UPD_REQUIRE(t.shape() == shape) << where_ << ": tensor " << name << " has shape " << shape_str(t.shape())
                                  << ", the config implies " << shape_str(shape);
  const int64_t bad = t.first_non_finite();
  UPD_REQUIRE(bad < 0) << where_ << ": tensor " << name << " holds a non-finite value (element " << bad << " is "
                       << t.to_f32_vector()[static_cast<size_t>(bad)] << ")";
  if (device_ == Device::CPU)
    return t;
  return (t.dtype() == DType::BF16 ? t : t.to_dtype(DType::BF16)).to(device_);
}

void WeightTaker::check_all_taken() const {
  for (const auto& n : names_) {
    const bool rotary_buffer = n.size() > 20 && n.compare(n.size() - 20, 20, "rotary_emb.inv_freq") == 0;
    UPD_REQUIRE(taken_.count(n) || rotary_buffer)
        << where_ << ": unexpected tensor " << n << " (not part of this architecture)";
  }
}

}  // namespace updraft
