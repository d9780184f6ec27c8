// Streaming: the shared pieces (rollout/serve/stream.h) and RolloutService::stream_job, which
// runs a job as run_job does while the connection's thread sends events as tokens arrive.
#include "rollout/serve/stream.h"

#include <spdlog/spdlog.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "rollout/serve/rollout_service.h"

namespace updraft {

using nlohmann::json;

std::string sse(const json& event) {
  return "data: " + event.dump() + "\n\n";
}

TextDelta::TextDelta(std::shared_ptr<const Tokenizer> tok, bool skip_special, std::vector<std::string> stops)
    : tok_(std::move(tok)), skip_special_(skip_special), stops_(std::move(stops)) {}

std::string TextDelta::next(const std::vector<int32_t>& tokens) {
  if (!tok_)
    return "";
  std::string bytes = tok_->decode_bytes(tokens, skip_special_);
  for (const std::string& s : stops_) {
    const size_t at = bytes.find(s);  // the final text ends before a match
    if (at != std::string::npos)
      bytes.resize(at);
    // An ending that is the start of a stop string may still become one: held back.
    for (size_t n = std::min(s.size() - 1, bytes.size()); n > 0; --n)
      if (bytes.compare(bytes.size() - n, n, s, 0, n) == 0) {
        bytes.resize(bytes.size() - n);
        break;
      }
  }
  // Only whole UTF-8 characters: drop a trailing sequence that is not complete yet.
  size_t start = bytes.size();
  while (start > 0 && (static_cast<unsigned char>(bytes[start - 1]) & 0xC0) == 0x80 && bytes.size() - start < 3)
    --start;
  if (start > 0) {
    const auto lead = static_cast<unsigned char>(bytes[start - 1]);
    const size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    if (need > 1 && bytes.size() - (start - 1) < need)
      bytes.resize(start - 1);
  }
  const std::string text = utf8_lossy(bytes);
  if (text.size() <= sent_.size() || text.compare(0, sent_.size(), sent_) != 0)
    return "";
  std::string delta = text.substr(sent_.size());
  sent_ = text;
  return delta;
}

std::string TextDelta::rest(const std::string& final_text) {
  if (final_text.size() < sent_.size() || final_text.compare(0, sent_.size(), sent_) != 0)
    return "";  // cannot happen: what was sent is a prefix of the final text by construction
  std::string delta = final_text.substr(sent_.size());
  sent_ = final_text;
  return delta;
}

namespace {

// What the engine thread hands to the connection's thread.
struct StreamState {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::vector<int32_t>> tokens;
  std::deque<size_t> changed;  // requests with tokens not sent yet
  bool done = false;
  std::vector<Completion> out;
  int status = 0;
  std::string why;
};

}  // namespace

http::Response RolloutService::stream_job(std::vector<GenRequest> reqs, std::vector<std::string> rids,
                                          std::string group, StreamEvents events) {
  if (group.empty())  // a name to abort the job by when the client goes away
    group = "stream-" + std::to_string(next_id_.fetch_add(1));
  auto st = std::make_shared<StreamState>();
  st->tokens.resize(reqs.size());
  for (size_t k = 0; k < reqs.size(); ++k)
    reqs[k].on_tokens = [st, k](uint64_t, const std::vector<int32_t>& toks, const std::vector<float>&) {
      std::lock_guard<std::mutex> lock(st->mu);
      st->tokens[k].insert(st->tokens[k].end(), toks.begin(), toks.end());
      st->changed.push_back(k);
      st->cv.notify_all();
    };
  http::Response r;
  r.content_type = "text/event-stream";
  r.stream = [this, st, reqs = std::move(reqs), rids = std::move(rids), group, events](
                 const http::ChunkWriter& write) mutable {
    std::thread job([&] {
      int status = 0;
      std::string why;
      std::vector<Completion> out = run_job(std::move(reqs), rids, group, &status, &why);
      std::lock_guard<std::mutex> lock(st->mu);
      st->out = std::move(out);
      st->status = status;
      st->why = why;
      st->done = true;
      st->cv.notify_all();
    });
    bool client = true;  // the client still reads
    for (;;) {
      std::unique_lock<std::mutex> lock(st->mu);
      st->cv.wait(lock, [&] { return st->done || !st->changed.empty(); });
      if (st->changed.empty())
        break;
      const size_t k = st->changed.front();
      st->changed.pop_front();
      const std::vector<int32_t> toks = st->tokens[k];
      lock.unlock();
      const std::string bytes = client ? events.update(k, toks) : "";
      if (!bytes.empty() && client && !write(bytes)) {
        client = false;  // gone: end its requests at the next engine step
        abort_request(json{{"rid", group}});
        spdlog::info("serve: stream client went away; job {} aborted", group);
      }
    }
    job.join();
    if (!client)
      return;
    if (st->status != 0)
      write(sse({{"error", {{"message", st->why}, {"type", http::error_type(st->status)}, {"code", st->status}}}}));
    else
      write(events.finish(st->out));
    write(kSseDone);
  };
  return r;
}

}  // namespace updraft
