#include "kernels/io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "kernels/io/atomic_file.h"

namespace updraft {
namespace {

constexpr uint64_t kMaxHeader = uint64_t{100} << 20;

const char* st_dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "F32";
    case DType::BF16:
      return "BF16";
    case DType::F16:
      return "F16";
    case DType::I32:
      return "I32";
    case DType::I64:
      return "I64";
    case DType::Bool:
      return "BOOL";
  }
  return "?";
}

DType parse_st_dtype(const std::string& s, const std::string& where) {
  try {
    return dtype_from_name(s);
  } catch (const Error&) {
    UPD_FAIL() << where << ": unsupported dtype \"" << s << "\" (supported: F32, BF16, F16, I32, I64, BOOL)";
  }
  return DType::F32;
}

struct Mapping {
  void* addr = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (addr != nullptr && addr != MAP_FAILED)
      munmap(addr, size);
  }
};

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  UPD_REQUIRE(fd >= 0) << path << ": cannot open: " << std::strerror(errno);
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    UPD_FAIL() << path << ": cannot stat: " << std::strerror(e);
  }
  const size_t size = static_cast<size_t>(st.st_size);
  auto map = std::make_shared<Mapping>();
  map->size = size;
  if (size > 0)
    map->addr = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  UPD_REQUIRE(map->addr != MAP_FAILED) << path << ": cannot map: " << std::strerror(errno);
  UPD_REQUIRE(size >= 8) << path << ": truncated: " << size << " bytes, shorter than the 8-byte header length";
  const auto* bytes = static_cast<const uint8_t*>(map->addr);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = (n << 8) | bytes[i];
  UPD_REQUIRE(n <= kMaxHeader) << path << ": header length " << n << " exceeds the 100 MiB limit";
  UPD_REQUIRE(n <= size - 8) << path << ": truncated: header length " << n << " but only " << size - 8
                             << " bytes follow";
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes + 8, bytes + 8 + n);
  } catch (const nlohmann::json::exception& e) {
    UPD_FAIL() << path << ": header is not valid JSON: " << e.what();
  }
  UPD_REQUIRE(header.is_object()) << path << ": header is not a JSON object";
  const size_t buffer = size - 8 - static_cast<size_t>(n);
  std::vector<std::pair<size_t, size_t>> spans;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string where = path + ": tensor '" + it.key() + "'";
    if (it.key() == "__metadata__") {
      UPD_REQUIRE(it->is_object()) << path << ": __metadata__ is not an object";
      for (auto m = it->begin(); m != it->end(); ++m) {
        UPD_REQUIRE(m->is_string()) << path << ": __metadata__." << m.key() << " is not a string";
        f.metadata_[m.key()] = m->get<std::string>();
      }
      continue;
    }
    const auto& e = *it;
    UPD_REQUIRE(e.is_object() && e.contains("dtype") && e.contains("shape") && e.contains("data_offsets"))
        << where << ": entry needs dtype, shape and data_offsets";
    UPD_REQUIRE(e["dtype"].is_string()) << where << ": dtype is not a string";
    TensorInfo info;
    info.dtype = parse_st_dtype(e["dtype"].get<std::string>(), where);
    UPD_REQUIRE(e["shape"].is_array()) << where << ": shape is not a list";
    uint64_t numel = 1;
    for (const auto& d : e["shape"]) {
      UPD_REQUIRE(d.is_number_unsigned()) << where << ": shape has a non-integer or negative dimension";
      const uint64_t v = d.get<uint64_t>();
      UPD_REQUIRE(v == 0 || numel <= (uint64_t{1} << 62) / v) << where << ": shape overflows";
      numel *= v;
      info.shape.push_back(static_cast<int64_t>(v));
    }
    const auto& off = e["data_offsets"];
    UPD_REQUIRE(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned())
        << where << ": data_offsets must be [begin, end]";
    info.begin = off[0].get<size_t>();
    info.end = off[1].get<size_t>();
    UPD_REQUIRE(info.begin <= info.end && info.end <= buffer)
        << where << ": data_offsets [" << info.begin << ", " << info.end << "] outside the " << buffer
        << "-byte data buffer (truncated file?)";
    UPD_REQUIRE(info.end - info.begin == numel * dtype_size(info.dtype))
        << where << ": " << info.end - info.begin << " bytes for shape " << shape_str(info.shape) << " of "
        << dtype_name(info.dtype) << " (expected " << numel * dtype_size(info.dtype) << ")";
    spans.emplace_back(info.begin, info.end);
    f.infos_[it.key()] = std::move(info);
  }
  std::sort(spans.begin(), spans.end());
  size_t cursor = 0;
  for (const auto& [b, e] : spans) {
    UPD_REQUIRE(b == cursor) << path << ": data buffer has " << (b < cursor ? "overlapping tensors" : "a hole")
                             << " at byte " << std::min(b, cursor);
    cursor = e;
  }
  UPD_REQUIRE(cursor == buffer) << path << ": " << buffer - cursor << " bytes after the last tensor";
  f.data_ = bytes + 8 + n;
  f.mapping_ = map;
  return f;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> v;
  for (const auto& kv : infos_)
    v.push_back(kv.first);
  return v;
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = infos_.find(name);
  UPD_REQUIRE(it != infos_.end()) << path_ << ": no tensor named '" << name << "'";
  return it->second;
}

Tensor SafetensorsFile::get(const std::string& name) const {
  const TensorInfo& i = info(name);
  const uint8_t* p = data_ + i.begin;
  if (reinterpret_cast<uintptr_t>(p) % dtype_size(i.dtype) != 0) {
    Tensor t = Tensor::empty(i.shape, i.dtype);
    std::memcpy(t.raw(), p, i.end - i.begin);
    return t;
  }
  return Tensor::wrap(const_cast<uint8_t*>(p), i.shape, i.dtype, Device::CPU, mapping_);
}

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty())
    header["__metadata__"] = metadata;
  size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    UPD_CHECK(name != "__metadata__" && !header.contains(name)) << "save_safetensors: bad or duplicate name " << name;
    header[name] = {
        {"dtype", st_dtype_name(t.dtype())}, {"shape", t.shape()}, {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  AtomicFile f(path);
  uint8_t len[8];
  const uint64_t n = h.size();
  for (int i = 0; i < 8; ++i)
    len[i] = static_cast<uint8_t>(n >> (8 * i));
  f.write(len, 8);
  f.write(h);
  for (const auto& [name, t] : tensors) {
    Tensor host = t.to(Device::CPU);
    f.write(host.raw(), host.nbytes());
  }
  f.commit();
}

}  // namespace updraft
