#include "rollout/serve/stop_strings.h"

#include <algorithm>

#include "kernels/core/error.h"

namespace updraft {

StopMatcher::StopMatcher(std::shared_ptr<const Tokenizer> tok, std::vector<std::string> stops, bool skip_special,
                         int64_t min_new_tokens)
    : tok_(std::move(tok)), stops_(std::move(stops)), skip_special_(skip_special), min_new_(min_new_tokens) {
  UPD_REQUIRE(tok_ != nullptr) << "stop strings need the model's tokenizer.json";
  for (const std::string& s : stops_)
    UPD_REQUIRE(!s.empty()) << "a stop string must not be empty";
}

int32_t StopMatcher::operator()(const std::vector<int32_t>& output) {
  for (; seen_ < output.size(); ++seen_) {
    const size_t before = bytes_.size();
    bytes_ += tok_->decode_bytes({output[seen_]}, skip_special_);
    if (static_cast<int64_t>(seen_) + 1 <= min_new_ || bytes_.size() == before || matched_ >= 0)
      continue;
    size_t best_end = std::string::npos;
    for (size_t i = 0; i < stops_.size(); ++i) {
      const std::string& s = stops_[i];
      // An occurrence ending in the new bytes starts at or after before + 1 - |s|.
      const size_t from = before + 1 >= s.size() ? before + 1 - s.size() : 0;
      const size_t at = bytes_.find(s, from);
      if (at != std::string::npos && (best_end == std::string::npos || at + s.size() < best_end)) {
        matched_ = static_cast<int32_t>(i);
        match_start_ = at;
        best_end = at + s.size();
      }
    }
  }
  return matched_;
}

std::string StopMatcher::text(bool no_stop_trim) const {
  return utf8_lossy(matched_ < 0 || no_stop_trim ? std::string_view(bytes_)
                                                   : std::string_view(bytes_).substr(0, match_start_));
}

StopCheck stop_check_of(const std::shared_ptr<StopMatcher>& m) {
  return [m](const std::vector<int32_t>& output) { return (*m)(output); };
}

}  // namespace updraft
