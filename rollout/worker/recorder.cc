#include "rollout/worker/recorder.h"

#include <chrono>
#include <cmath>

#include "kernels/core/error.h"
#include "rollout/capture/capture.h"
#include "rollout/capture/record_convert.h"

namespace updraft {

Recorder::Recorder(const RecordOptions& options, std::shared_ptr<messaging::RecordSender> sender)
    : opt_(options), sender_(std::move(sender)) {
  UPD_REQUIRE(opt_.rate >= 0 && opt_.rate <= 1 && (opt_.max_tokens == 0 || opt_.max_tokens >= 2))
      << "worker: record_rate must be in [0, 1] and record_max_tokens 0 or at least 2";
}

bool Recorder::take() {
  if (sender_ == nullptr)
    return false;
  const double r = opt_.rate;
  const bool keep = std::floor(static_cast<double>(seen_ + 1) * r) > std::floor(static_cast<double>(seen_) * r);
  ++seen_;
  stats_.unrecorded += keep ? 0 : 1;
  return keep;
}

int64_t Recorder::send(const TttSample& whole, const std::vector<SpecRound>& rounds, uint64_t drafter_version) {
  if (sender_ == nullptr || whole.response_length() <= 0)
    return 0;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<TttSample> pieces;
  if (opt_.max_tokens > 0)
    pieces = split_sample(whole, opt_.max_tokens);
  const size_t n = pieces.empty() ? 1 : pieces.size();
  stats_.chunks += static_cast<int64_t>(n) - 1;
  int64_t queued = 0;
  for (size_t k = 0; k < n; ++k) {
    messaging::RecordData r = to_record(pieces.empty() ? whole : pieces[k]);
    r.worker = opt_.worker;
    r.drafter_version = drafter_version;
    if (k == 0)  // a completion's rounds, once: in its first record
      r.rounds = round_stats(rounds);
    queued += sender_->submit(std::move(r)) ? 1 : 0;
  }
  stats_.queued += queued;
  stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return queued;
}

}  // namespace updraft
