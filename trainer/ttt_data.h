// What the EAGLE-3 drafter trains on (TttSample, rollout/capture/sample.h, where the teacher is
// explained) and the interface every source of it implements: the rollouts collected in process
// by `updraft train --once` and the RocksDB buffer the workers stream records into.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/core/tensor.h"
#include "rollout/capture/sample.h"

namespace updraft::train {

using updraft::TttSample;

// A finite, random-access view of training samples (a snapshot of a buffer window, or the
// rollouts of one offline run). get() may be called from one thread at a time.
class TttDataset {
 public:
  virtual ~TttDataset() = default;
  virtual size_t size() const = 0;
  virtual TttSample get(size_t i) const = 0;
};

class InMemoryDataset final : public TttDataset {
 public:
  explicit InMemoryDataset(std::vector<TttSample> samples) : samples_(std::move(samples)) {}
  size_t size() const override { return samples_.size(); }
  TttSample get(size_t i) const override { return samples_.at(i); }
  void add(TttSample s) { samples_.push_back(std::move(s)); }
  const std::vector<TttSample>& samples() const { return samples_; }

 private:
  std::vector<TttSample> samples_;
};

}  // namespace updraft::train
