// Streaming responses of the rollout service (server-sent events, each API in its own format):
// the pieces the routes share.
//
//  * StreamEvents: what a route sends while its requests run: update(k, tokens) after request k
//    emitted tokens (all of its tokens so far), finish(completions) once every request is done;
//    each returns the SSE bytes to send ("" for nothing). They run on the connection's thread.
//  * TextDelta: the text of a growing output sent in pieces that never need taking back: only
//    what decodes to whole UTF-8 characters, nothing from the first occurrence of a stop string
//    on (the final text is cut there), and not an ending that could still grow into one.
//  * sse(): one event, "data: <json>\n\n"; kDone is the terminal event both APIs send.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "rollout/tokenizer.h"
#include "rollout/worker/worker.h"

namespace updraft {

struct StreamEvents {
  std::function<std::string(size_t k, const std::vector<int32_t>& tokens)> update;
  std::function<std::string(const std::vector<Completion>& out)> finish;
};

inline constexpr const char* kSseDone = "data: [DONE]\n\n";
std::string sse(const nlohmann::json& event);

class TextDelta {
 public:
  TextDelta(std::shared_ptr<const Tokenizer> tok, bool skip_special, std::vector<std::string> stops = {});
  // The text of `tokens` (the output so far: each call extends the last one's) not sent yet
  // that is safe to send now (possibly "").
  std::string next(const std::vector<int32_t>& tokens);
  // What remains of the completion's final text after what was sent.
  std::string rest(const std::string& final_text);

 private:
  std::shared_ptr<const Tokenizer> tok_;
  bool skip_special_;
  std::vector<std::string> stops_;
  std::string bytes_;      // the output's bytes so far (tokens decoded incrementally)
  size_t decoded_ = 0;     // tokens in bytes_
  size_t sent_bytes_ = 0;  // bytes_ sent (a character boundary)
  std::string sent_;       // the text sent
};

}  // namespace updraft
