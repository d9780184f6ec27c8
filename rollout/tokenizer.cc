// Encoding (pre-tokenization, BPE merges, the word cache), the public methods of Tokenizer, and
// saving. The pieces live beside it: tokenizer_detail.h (what the files share, and
// Tokenizer::Impl), tokenizer_text.cc (UTF-8, SplitRegex, the byte-level table),
// tokenizer_added.cc (added tokens) and tokenizer_parse.cc (reading a tokenizer.json).
#include "rollout/tokenizer.h"

#include <climits>
#include <filesystem>
#include <mutex>
#include <queue>
#include <string>
#include <vector>

#include "kernels/core/error.h"
#include "kernels/io/atomic_file.h"
#include "rollout/tokenizer_detail.h"

namespace updraft {

using tokenizer_detail::AddedToken;
using tokenizer_detail::Json;
using tokenizer_detail::PreStep;

namespace {

// The word cache: words up to this many bytes, cleared when it holds this many words.
constexpr size_t kMaxCachedWord = 256;
constexpr size_t kCacheCapacity = 1 << 17;
// Words longer than this are merged with a heap instead of the quadratic linear scan.
constexpr size_t kHeapMergeThreshold = 96;

}  // namespace

// ---- encoding -----------------------------------------------------------------------------

void Tokenizer::Impl::run_pre(std::string_view piece, size_t step, std::vector<std::vector<std::string_view>>& bufs,
                              const std::function<void(std::string_view)>& fn) const {
  if (step == pre.size()) {
    fn(piece);
    return;
  }
  const PreStep& s = pre[step];
  std::string prefixed;
  if (s.add_prefix_space && piece.front() != ' ') {
    prefixed = " ";
    prefixed += piece;
    piece = prefixed;
  }
  if (!s.regex) {
    run_pre(piece, step + 1, bufs, fn);
    return;
  }
  std::vector<std::string_view>& out = bufs[step];
  out.clear();
  s.regex->split(piece, out);
  for (size_t i = 0; i < out.size(); ++i)  // out stays put: deeper steps use other buffers
    run_pre(out[i], step + 1, bufs, fn);
}

void Tokenizer::Impl::merge_linear(std::vector<int32_t>& syms) const {
  if (syms.size() < 2)
    return;
  std::vector<int32_t> rank(syms.size() - 1), merged(syms.size() - 1);
  const auto look = [&](size_t i) {
    if (!merge_table.get(syms[i], syms[i + 1], &rank[i], &merged[i]))
      rank[i] = INT32_MAX;
  };
  for (size_t i = 0; i + 1 < syms.size(); ++i)
    look(i);
  for (;;) {
    size_t best = rank.size();
    int32_t best_rank = INT32_MAX;
    for (size_t i = 0; i < rank.size(); ++i)
      if (rank[i] < best_rank) {
        best_rank = rank[i];
        best = i;
      }
    if (best == rank.size())
      return;
    syms[best] = merged[best];
    syms.erase(syms.begin() + static_cast<ptrdiff_t>(best) + 1);
    rank.erase(rank.begin() + static_cast<ptrdiff_t>(best));
    merged.erase(merged.begin() + static_cast<ptrdiff_t>(best));
    if (best > 0)
      look(best - 1);
    if (best < rank.size())
      look(best);
  }
}

void Tokenizer::Impl::merge_heap(std::vector<int32_t>& syms) const {
  // The lowest rank first, then the leftmost position: the order `tokenizers` merges in.
  struct Cand {
    int32_t rank, pos, merged;
    bool operator<(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  const auto n = static_cast<int32_t>(syms.size());
  std::vector<int32_t> prev(n), next(n);
  std::vector<bool> alive(n, true);
  std::priority_queue<Cand> heap;
  const auto push = [&](int32_t pos) {
    int32_t rank = 0, merged = 0;
    if (next[pos] < n && merge_table.get(syms[pos], syms[next[pos]], &rank, &merged))
      heap.push({rank, pos, merged});
  };
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1;
  }
  for (int32_t i = 0; i + 1 < n; ++i)
    push(i);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    const int32_t right = next[c.pos];
    int32_t rank = 0, merged = 0;
    if (!alive[c.pos] || right >= n || !merge_table.get(syms[c.pos], syms[right], &rank, &merged) || merged != c.merged)
      continue;  // stale: one of the two symbols has changed since
    syms[c.pos] = merged;
    alive[right] = false;
    next[c.pos] = next[right];
    if (next[right] < n)
      prev[next[right]] = c.pos;
    if (prev[c.pos] >= 0)
      push(prev[c.pos]);
    push(c.pos);
  }
  size_t w = 0;
  for (int32_t i = 0; i < n; i = next[i])
    syms[w++] = syms[i];
  syms.resize(w);
}

void Tokenizer::Impl::bpe(std::string_view word, std::vector<int32_t>& out) const {
  if (ignore_merges) {
    auto it = bytes_vocab.find(word);
    if (it != bytes_vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }
  std::vector<int32_t> syms;
  syms.reserve(word.size());
  bool last_unk = false;
  for (unsigned char c : word) {
    if (byte_id[c] >= 0) {
      syms.push_back(byte_id[c]);
      last_unk = false;
    } else if (unk_id >= 0 && !(fuse_unk && last_unk)) {  // without an unk token the byte is dropped
      syms.push_back(unk_id);
      last_unk = true;
    }
  }
  if (syms.size() > kHeapMergeThreshold)
    merge_heap(syms);
  else
    merge_linear(syms);
  out.insert(out.end(), syms.begin(), syms.end());
}

void Tokenizer::Impl::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  const bool cacheable = word.size() <= kMaxCachedWord;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu);
    auto it = cache.find(word);
    if (it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t before = out.size();
  bpe(word, out);
  if (cacheable) {
    std::vector<int32_t> ids(out.begin() + static_cast<ptrdiff_t>(before), out.end());
    std::lock_guard<std::mutex> lock(cache_mu);
    if (cache.size() >= kCacheCapacity)
      cache.clear();
    cache.emplace(std::string(word), std::move(ids));
  }
}

// ---- the public class ---------------------------------------------------------------------

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_json(std::string_view json_text, const std::string& where) {
  Json j;
  try {
    j = Json::parse(json_text);
  } catch (const Json::exception& e) {
    UPD_FAIL() << where << ": not valid JSON: " << e.what();
  }
  auto impl = std::make_unique<Impl>();
  impl->where = where;
  try {
    impl->parse(j);
  } catch (const Json::exception& e) {  // a value of an unexpected type deep inside
    UPD_FAIL() << where << ": malformed tokenizer: " << e.what();
  }
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::load(const std::string& path) {
  std::error_code ec;
  const std::string file = std::filesystem::is_directory(path, ec) ? path + "/tokenizer.json" : path;
  return from_json(read_file(file), file);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special) const {
  const Impl& m = *impl_;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special)
    out = m.prefix_ids;
  std::vector<std::vector<std::string_view>> bufs(m.pre.size());
  const std::function<void(std::string_view)> word_fn = [&](std::string_view w) { m.encode_word(w, out); };
  m.for_each_segment(text, [&](std::string_view piece, const AddedToken* t) {
    if (t != nullptr)
      out.push_back(t->id);
    else
      m.run_pre(piece, 0, bufs, word_fn);
  });
  if (add_special)
    out.insert(out.end(), m.suffix_ids.begin(), m.suffix_ids.end());
  return out;
}

std::string Tokenizer::decode_bytes(const std::vector<int32_t>& ids, bool skip_special) const {
  const Impl& m = *impl_;
  std::string bytes;
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= m.flags.size() || !(m.flags[id] & 1))
      continue;
    if (skip_special && (m.flags[id] & 2))
      continue;
    bytes += m.id_bytes[id];
  }
  return bytes;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  return utf8_lossy(decode_bytes(ids, skip_special));
}

void Tokenizer::pre_tokenize(std::string_view text, const std::function<void(std::string_view)>& fn) const {
  const Impl& m = *impl_;
  std::vector<std::vector<std::string_view>> bufs(m.pre.size());
  m.for_each_segment(text, [&](std::string_view piece, const AddedToken* t) {
    if (t == nullptr)
      m.run_pre(piece, 0, bufs, fn);
  });
}

std::vector<std::string> Tokenizer::pre_tokenize(std::string_view text) const {
  std::vector<std::string> words;
  pre_tokenize(text, [&](std::string_view w) { words.emplace_back(w); });
  return words;
}

int32_t Tokenizer::token_id(std::string_view token) const {
  if (auto it = impl_->added_ids.find(token); it != impl_->added_ids.end())
    return it->second;
  auto it = impl_->vocab.find(token);
  return it == impl_->vocab.end() ? -1 : it->second;
}

std::string Tokenizer::token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->spelling.size())
    return std::string();
  return impl_->spelling[id];
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->flags.size() && (impl_->flags[id] & 2);
}

int64_t Tokenizer::vocab_size() const {
  return static_cast<int64_t>(impl_->spelling.size());
}

// ---- saving -------------------------------------------------------------------------------

std::string Tokenizer::to_json() const {
  const Impl& m = *impl_;
  const auto q = [](const std::string& s) { return Json(s).dump(); };
  std::string o = "{\n  \"version\": \"1.0\",\n";
  o += "  \"truncation\": " + m.truncation.dump() + ",\n";
  o += "  \"padding\": " + m.padding.dump() + ",\n";
  o += "  \"added_tokens\": [";
  for (size_t i = 0; i < m.added.size(); ++i) {
    const AddedToken& t = m.added[i];
    const auto b = [](bool v) { return v ? "true" : "false"; };
    o += i == 0 ? "\n" : ",\n";
    o += "    {\"id\": " + std::to_string(t.id) + ", \"content\": " + q(t.content) +
         ", \"single_word\": " + b(t.single_word) + ", \"lstrip\": " + b(t.lstrip) + ", \"rstrip\": " + b(t.rstrip) +
         ", \"normalized\": " + b(t.normalized) + ", \"special\": " + b(t.special) + "}";
  }
  o += m.added.empty() ? "],\n" : "\n  ],\n";
  o += "  \"normalizer\": " + m.normalizer.dump() + ",\n";
  o += "  \"pre_tokenizer\": " + m.pre_tokenizer.dump() + ",\n";
  o += "  \"post_processor\": " + m.post_processor.dump() + ",\n";
  o += "  \"decoder\": " + m.decoder.dump() + ",\n";
  o += "  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n";
  o += "    \"unk_token\": " + (m.unk_token.empty() ? std::string("null") : q(m.unk_token)) + ",\n";
  o += "    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": null,\n";
  o += std::string("    \"fuse_unk\": ") + (m.fuse_unk ? "true" : "false") + ",\n";
  o += "    \"byte_fallback\": false,\n";
  o += std::string("    \"ignore_merges\": ") + (m.ignore_merges ? "true" : "false") + ",\n";
  o += "    \"vocab\": {";
  for (size_t i = 0; i < m.entries.size(); ++i)
    o += (i == 0 ? "\n      " : ",\n      ") + q(m.entries[i].first) + ": " + std::to_string(m.entries[i].second);
  o += m.entries.empty() ? "},\n" : "\n    },\n";
  // "a b" strings read everywhere (also in `tokenizers` < 0.20); pairs only when a token has a space.
  bool pairs = false;
  for (const auto& [a, b] : m.merges)
    pairs = pairs || a.find(' ') != std::string::npos || b.find(' ') != std::string::npos;
  o += "    \"merges\": [";
  for (size_t i = 0; i < m.merges.size(); ++i) {
    const auto& [a, b] = m.merges[i];
    o += (i == 0 ? "\n      " : ",\n      ") + (pairs ? "[" + q(a) + ", " + q(b) + "]" : q(a + " " + b));
  }
  o += m.merges.empty() ? "]\n" : "\n    ]\n";
  o += "  }\n}\n";
  return o;
}

void Tokenizer::save(const std::string& path) const {
  write_file_atomic(path, to_json());
}

}  // namespace updraft
