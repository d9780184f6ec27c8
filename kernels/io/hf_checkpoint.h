// A Hugging Face model directory's weights: `model.safetensors`, or the shards listed by
// `model.safetensors.index.json` ({"metadata": {...}, "weight_map": {tensor: shard file}}).
//
// Validation on open (updraft::Error naming the directory, file and tensor at fault):
//   the index is a JSON object with an object "weight_map" of string -> string; shard names are
//   plain file names inside the directory; every shard opens and passes SafetensorsFile's checks;
//   every tensor named in the map is in the shard it names; no shard holds a tensor the map does
//   not list or lists under another shard; no tensor appears twice.
// Tensors are CPU views into the memory-mapped shards (see safetensors.h).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/io/safetensors.h"

namespace updraft {

class CheckpointDir {
 public:
  static CheckpointDir open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  std::vector<std::string> names() const;  // sorted
  bool has(const std::string& name) const { return where_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;  // throws Error if absent
  Tensor get(const std::string& name) const;              // throws Error if absent
  std::string file_of(const std::string& name) const;     // the shard's path

 private:
  std::string dir_;
  std::vector<std::shared_ptr<SafetensorsFile>> shards_;
  std::map<std::string, size_t> where_;  // tensor -> shard index
};

}  // namespace updraft
