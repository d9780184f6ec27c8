// Streaming: the shared pieces (rollout/serve/stream.h) and RolloutService::stream_job, which
// runs a job as run_job does while the connection's thread sends events as tokens arrive.
#include "rollout/serve/stream.h"

#include <spdlog/spdlog.h>

#include <algorithm>
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
  if (tokens.size() > decoded_) {  // only the new tokens are decoded
    bytes_ += tok_->decode_bytes({tokens.begin() + static_cast<std::ptrdiff_t>(decoded_), tokens.end()}, skip_special_);
    decoded_ = tokens.size();
  }
  size_t end = bytes_.size();
  for (const std::string& s : stops_) {  // the final text ends before the first match
    const size_t at = bytes_.find(s, sent_bytes_ >= s.size() ? sent_bytes_ - s.size() + 1 : 0);
    end = std::min(end, at);
  }
  if (end == bytes_.size()) {  // an ending that is the start of a stop string may still become one
    size_t hold = 0;
    for (const std::string& s : stops_)
      for (size_t n = std::min(s.size() - 1, end); n > hold; --n)
        if (bytes_.compare(end - n, n, s, 0, n) == 0) {
          hold = n;
          break;
        }
    end -= hold;
  }
  // Only whole UTF-8 characters: a trailing sequence that is not complete yet waits.
  size_t start = end;
  while (start > 0 && (static_cast<unsigned char>(bytes_[start - 1]) & 0xC0) == 0x80 && end - start < 3)
    --start;
  if (start > 0) {
    const auto lead = static_cast<unsigned char>(bytes_[start - 1]);
    const size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    if (need > 1 && end - (start - 1) < need)
      end = start - 1;
  }
  if (end <= sent_bytes_)
    return "";
  std::string delta = utf8_lossy(std::string_view(bytes_).substr(sent_bytes_, end - sent_bytes_));
  sent_bytes_ = end;
  sent_ += delta;
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
  std::deque<size_t> changed;  // requests with tokens not sent yet, each once
  std::vector<bool> queued;    // in changed
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
  st->queued.resize(reqs.size(), false);
  for (size_t k = 0; k < reqs.size(); ++k)
    reqs[k].on_tokens = [st, k](uint64_t, const std::vector<int32_t>& toks, const std::vector<float>&) {
      std::lock_guard<std::mutex> lock(st->mu);
      st->tokens[k].insert(st->tokens[k].end(), toks.begin(), toks.end());
      if (!st->queued[k]) {  // one event carries whatever arrived since the last one
        st->queued[k] = true;
        st->changed.push_back(k);
      }
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
      st->queued[k] = false;
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
