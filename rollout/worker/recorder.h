// Turns a worker's finished serving completions into the drafter's training records and hands
// them to the record sender (messaging/record_sender.h), which never blocks generation (its
// bounded queue sheds and counts).
//
// Volume (design.md §13): `rate` is the share of serving completions recorded, spread evenly
// and deterministically (completion k is kept when floor((k + 1) r) > floor(k r)); the others
// are not even captured (take() decides before the request runs). `max_tokens` caps the positions
// per record: a longer completion is cut by split_sample (rollout/capture/capture.h) and its
// speculation rounds go into the first piece.
//
// Thread safety: none; the worker's engine thread owns it.
#pragma once

#include <cstdint>
#include <memory>

#include "messaging/record_sender.h"
#include <vector>

#include "rollout/capture/sample.h"
#include "rollout/engine/request.h"

namespace updraft {

struct RecordOptions {
  uint32_t worker = 0;
  double rate = 1.0;
  int64_t max_tokens = 0;  // 0: no cap; else >= 2
};

struct RecorderStats {
  int64_t queued = 0, unrecorded = 0, chunks = 0;
  double seconds = 0;  // converting and queueing
};

class Recorder {
 public:
  Recorder(const RecordOptions& options, std::shared_ptr<messaging::RecordSender> sender);
  bool enabled() const { return sender_ != nullptr; }
  // Whether the next serving completion is recorded (counts it either way).
  bool take();
  // The records of a captured completion (sample_of, rollout/capture/capture.h) with its
  // speculation rounds, generated with `drafter_version`; returns the records the sender queued.
  int64_t send(const TttSample& whole, const std::vector<SpecRound>& rounds, uint64_t drafter_version);
  const RecorderStats& stats() const { return stats_; }

 private:
  RecordOptions opt_;
  std::shared_ptr<messaging::RecordSender> sender_;
  uint64_t seen_ = 0;
  RecorderStats stats_;
};

}  // namespace updraft
