// Stop strings (SGLang's sampling_params.stop, OpenAI's stop): a completion ends when its text
// contains one of them, matched on the text as it grows, across token boundaries.
//
// The text of an output is the UTF-8 of its tokens' bytes concatenated (Tokenizer::
// decode_bytes; special tokens left out when skip_special, as the returned text does). After
// each token the matcher looks for a stop string that ends inside the bytes that token added,
// so the earliest completed occurrence wins (the lowest index among strings completed by the
// same token). Occurrences completed within the first min_new_tokens tokens do not stop it
// (as min_new_tokens holds back the stop tokens).
//
// The returned text (text()): the output's text cut before the matched string, or the whole of
// it with no_stop_trim (as a matched stop token is kept); the token ids always hold every token,
// the one that completed the match included.
//
// Thread safety: a StopMatcher belongs to one request; the engine calls it on its thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rollout/engine/request.h"
#include "rollout/tokenizer.h"

namespace updraft {

class StopMatcher {
 public:
  // Error when a stop string is empty.
  StopMatcher(std::shared_ptr<const Tokenizer> tok, std::vector<std::string> stops, bool skip_special,
              int64_t min_new_tokens);
  // The output so far, the new token last: the index of the stop string it completes, or -1.
  int32_t operator()(const std::vector<int32_t>& output);
  int32_t matched() const { return matched_; }  // -1: none
  const std::vector<std::string>& stops() const { return stops_; }
  // The completion's text once it finished (its output given to operator() up to the end).
  std::string text(bool no_stop_trim) const;

 private:
  std::shared_ptr<const Tokenizer> tok_;
  std::vector<std::string> stops_;
  bool skip_special_;
  int64_t min_new_;
  std::string bytes_;  // the output's bytes so far
  size_t seen_ = 0;    // tokens of the output already appended
  int32_t matched_ = -1;
  size_t match_start_ = 0;  // byte offset of the matched string
};

// The StopCheck of a request that calls `m`.
StopCheck stop_check_of(const std::shared_ptr<StopMatcher>& m);

}  // namespace updraft
