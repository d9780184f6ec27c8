// safetensors files: validated reading (memory-mapped, zero-copy where aligned) and atomic
// writing. Format: u64 little-endian header length N, N bytes of JSON header
// {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the data buffer; offsets are relative to the buffer's start.
//
// Validation on open (any failure throws updraft::Error naming the file, and the tensor when
// one is at fault; nothing is read past the file's end):
//   header length within the file and <= 100 MiB; the header is a JSON object; each entry has a
//   supported dtype (F32, BF16, F16, I32, I64, BOOL), a non-negative shape, and offsets with
//   begin <= end <= buffer size and end - begin == numel * dtype size; the entries tile the
//   buffer exactly (no holes, no overlaps), as the format requires.
// Tensors returned by get() are CPU views into the mapping (kept alive by the tensor); a
// tensor whose bytes are not aligned to its element size is copied into aligned memory.
//
// save_safetensors writes to "<path>.tmp.<pid>", fsyncs, renames over path and fsyncs the
// directory, so a reader never sees a half-written file. The header is padded with spaces to
// a multiple of 8 bytes so every tensor of ours is 8-byte aligned.
//
// Thread safety: a SafetensorsFile is immutable after open(); concurrent get() is safe.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/core/tensor.h"

namespace updraft {

struct TensorInfo {
  DType dtype;
  Shape shape;
  size_t begin = 0, end = 0;  // byte offsets into the data buffer
};

class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const { return path_; }
  std::vector<std::string> names() const;  // sorted
  bool has(const std::string& name) const { return infos_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;  // throws Error if absent
  Tensor get(const std::string& name) const;              // throws Error if absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::string path_;
  std::shared_ptr<void> mapping_;  // the whole file, read-only
  const uint8_t* data_ = nullptr;  // start of the data buffer inside the mapping
  std::map<std::string, TensorInfo> infos_;
  std::map<std::string, std::string> metadata_;
};

// Tensors are written in the given order (any device; copied to the host).
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace updraft
