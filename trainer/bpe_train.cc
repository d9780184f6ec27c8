#include "trainer/bpe_train.h"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "kernels/core/error.h"

namespace updraft {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int64_t kReportBytes = 8 << 20;  // progress while counting: every 8 MB

struct StrHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

uint64_t pair_key(int32_t a, int32_t b) {
  return (uint64_t{static_cast<uint32_t>(a)} << 32) | static_cast<uint32_t>(b);
}

struct PairHash {
  size_t operator()(uint64_t k) const { return static_cast<size_t>((k ^ (k >> 29)) * 0x9E3779B97F4A7C15ull >> 7); }
};

// A pair's count over all words (weighted by word frequency) and the words that may hold it
// (a superset: entries go stale as words change, and are checked when used).
struct PairInfo {
  int64_t count = 0;
  std::vector<int32_t> where;
};

struct Word {
  std::vector<int32_t> syms;
  int64_t count = 0;
};

// The tokenizer.json of a byte-level BPE with only the special and byte tokens.
Json skeleton(const BpeTrainOptions& opt) {
  Json added = Json::array(), vocab = Json::object();
  const int64_t n_special = static_cast<int64_t>(opt.special_tokens.size());
  for (int64_t i = 0; i < n_special; ++i) {
    const std::string& s = opt.special_tokens[i];
    UPD_REQUIRE(!s.empty()) << "train_bpe: special token #" << i << " is empty";
    try {
      (void)Json(s).dump();
    } catch (const Json::exception&) {
      UPD_FAIL() << "train_bpe: special token #" << i << " is not valid UTF-8";
    }
    UPD_REQUIRE(!vocab.contains(s)) << "train_bpe: special token \"" << s << "\" is given twice";
    vocab[s] = i;
    added.push_back({{"id", i},
                     {"content", s},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  for (int b = 0; b < 256; ++b) {
    const std::string spelling = byte_level_encode(std::string(1, static_cast<char>(b)));
    UPD_REQUIRE(!vocab.contains(spelling))
        << "train_bpe: special token \"" << spelling << "\" is spelled like the token of byte " << b;
    vocab[spelling] = n_special + b;
  }
  const Json byte_level_pre = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}};
  Json pre = byte_level_pre;
  if (opt.split_pattern == kGpt2SplitPattern) {
    pre["use_regex"] = true;
  } else if (!opt.split_pattern.empty()) {
    const Json split = {
        {"type", "Split"}, {"pattern", {{"Regex", opt.split_pattern}}}, {"behavior", "Isolated"}, {"invert", false}};
    pre = {{"type", "Sequence"}, {"pretokenizers", Json::array({split, byte_level_pre})}};
  }
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", added},
          {"normalizer", nullptr},
          {"pre_tokenizer", pre},
          {"post_processor",
           {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}}},
          {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"ignore_merges", false},
            {"vocab", vocab},
            {"merges", Json::array()}}}};
}

class Trainer {
 public:
  Trainer(const BpeTrainOptions& opt, const Tokenizer& splitter)
      : opt_(opt),
        splitter_(splitter),
        start_(Clock::now()),
        n_special_(static_cast<int32_t>(opt.special_tokens.size())) {}

  void count(const std::function<bool(std::string&)>& next_text) {
    std::string text;
    int64_t reported = 0;
    while (next_text(text)) {
      splitter_.pre_tokenize(text, [&](std::string_view w) {
        auto it = counts_.find(w);
        if (it == counts_.end())
          counts_.emplace(std::string(w), 1);
        else
          ++it->second;
      });
      ++progress_.texts;
      progress_.bytes += static_cast<int64_t>(text.size());
      if (progress_.bytes - reported >= kReportBytes) {
        reported = progress_.bytes;
        progress_.words = static_cast<int64_t>(counts_.size());
        report(BpeTrainProgress::Stage::kCounting);
      }
    }
    progress_.words = static_cast<int64_t>(counts_.size());
    report(BpeTrainProgress::Stage::kCounting);
  }

  // Returns the merges as (left spelling, right spelling) in rank order, and the new tokens.
  void merge(std::vector<std::pair<std::string, std::string>>& merges, std::vector<std::string>& new_tokens);

 private:
  void report(BpeTrainProgress::Stage stage) {
    if (!opt_.progress)
      return;
    progress_.stage = stage;
    progress_.seconds = std::chrono::duration<double>(Clock::now() - start_).count();
    opt_.progress(progress_);
  }
  // Heap order: the larger count, then the smaller (left bytes, right bytes).
  bool lower(const std::pair<int64_t, uint64_t>& x, const std::pair<int64_t, uint64_t>& y) const {
    if (x.first != y.first)
      return x.first < y.first;
    const int c = tok_[x.second >> 32].compare(tok_[y.second >> 32]);
    if (c != 0)
      return c > 0;
    return tok_[x.second & 0xFFFFFFFFu].compare(tok_[y.second & 0xFFFFFFFFu]) > 0;
  }
  void push(int64_t count, uint64_t key) {
    heap_.emplace_back(count, key);
    std::push_heap(heap_.begin(), heap_.end(), [this](const auto& x, const auto& y) { return lower(x, y); });
  }
  void change(uint64_t key, int64_t delta, int32_t word) {
    if (!banned_.empty() && banned_.count(key) != 0)
      return;
    PairInfo& p = pairs_[key];
    p.count += delta;
    if (delta > 0) {
      if (p.where.empty() || p.where.back() != word)
        p.where.push_back(word);
      touched_.push_back(key);
    }
  }
  void apply(int32_t w, int32_t a, int32_t b, int32_t merged, uint64_t merged_key);

  const BpeTrainOptions& opt_;
  const Tokenizer& splitter_;
  Clock::time_point start_;
  int32_t n_special_;
  BpeTrainProgress progress_;
  std::unordered_map<std::string, int64_t, StrHash, std::equal_to<>> counts_;
  std::vector<Word> words_;
  std::vector<std::string> tok_;  // id -> raw bytes ("" for the special tokens, never compared)
  std::unordered_map<uint64_t, PairInfo, PairHash> pairs_;
  std::vector<std::pair<int64_t, uint64_t>> heap_;
  std::vector<uint64_t> touched_;
  std::unordered_set<uint64_t> banned_;  // pairs never to merge (their count is no longer kept)
};

// Merges (a, b) -> merged in word w, left to right, and updates the counts of the pairs around
// each merge against the word's current state (so that runs such as "a a a" come out right).
void Trainer::apply(int32_t w, int32_t a, int32_t b, int32_t merged, uint64_t merged_key) {
  std::vector<int32_t>& s = words_[w].syms;
  const int64_t c = words_[w].count;
  const auto edit = [&](int32_t x, int32_t y, int64_t delta) {
    const uint64_t k = pair_key(x, y);
    if (k != merged_key)  // the merged pair itself is gone everywhere once this pass is over
      change(k, delta, w);
  };
  size_t wr = 0;
  for (size_t r = 0; r < s.size();) {
    if (r + 1 < s.size() && s[r] == a && s[r + 1] == b) {
      if (wr > 0) {
        edit(s[wr - 1], a, -c);
        edit(s[wr - 1], merged, c);
      }
      if (r + 2 < s.size()) {
        edit(b, s[r + 2], -c);
        edit(merged, s[r + 2], c);
      }
      s[wr++] = merged;
      r += 2;
    } else {
      s[wr++] = s[r++];
    }
  }
  s.resize(wr);
}

void Trainer::merge(std::vector<std::pair<std::string, std::string>>& merges, std::vector<std::string>& new_tokens) {
  // Tokens: the special ones (never inside words), then the bytes.
  tok_.assign(n_special_, std::string());
  std::unordered_map<std::string, int32_t, StrHash, std::equal_to<>> id_of;
  for (int b = 0; b < 256; ++b) {
    tok_.emplace_back(1, static_cast<char>(b));
    id_of.emplace(tok_.back(), n_special_ + b);
  }
  std::unordered_set<std::string> special_spellings(opt_.special_tokens.begin(), opt_.special_tokens.end());

  words_.reserve(counts_.size());
  for (auto& [text, n] : counts_) {
    Word w;
    w.count = n;
    for (unsigned char ch : text)
      w.syms.push_back(n_special_ + ch);
    words_.push_back(std::move(w));
  }
  counts_.clear();
  for (int32_t w = 0; w < static_cast<int32_t>(words_.size()); ++w)
    for (size_t i = 0; i + 1 < words_[w].syms.size(); ++i)
      change(pair_key(words_[w].syms[i], words_[w].syms[i + 1]), words_[w].count, w);
  touched_.clear();
  heap_.reserve(pairs_.size());
  for (const auto& [key, p] : pairs_)
    heap_.emplace_back(p.count, key);
  std::make_heap(heap_.begin(), heap_.end(), [this](const auto& x, const auto& y) { return lower(x, y); });

  const int64_t min_count = std::max<int64_t>(opt_.min_frequency, 1);
  int64_t vocab = n_special_ + 256;
  progress_.max_merges = opt_.vocab_size - vocab;
  progress_.vocab = vocab;
  report(BpeTrainProgress::Stage::kMerging);
  const int64_t report_every = std::max<int64_t>(progress_.max_merges / 100, 1);
  std::unordered_set<uint64_t> merged_pairs;
  while (vocab < opt_.vocab_size && !heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), [this](const auto& x, const auto& y) { return lower(x, y); });
    const auto [count, key] = heap_.back();
    heap_.pop_back();
    auto it = pairs_.find(key);
    const int64_t now = it == pairs_.end() ? 0 : it->second.count;
    if (now != count) {  // stale entry: requeue with the current count
      if (now > 0)
        push(now, key);
      continue;
    }
    if (count < min_count)
      break;
    const auto a = static_cast<int32_t>(key >> 32), b = static_cast<int32_t>(key & 0xFFFFFFFFu);
    std::string joined = tok_[a] + tok_[b];
    std::vector<int32_t> where = std::move(it->second.where);
    pairs_.erase(it);
    if (special_spellings.count(byte_level_encode(joined)) != 0) {
      banned_.insert(key);  // would be spelled like a special token: never merged
      continue;
    }
    int32_t merged;
    if (auto found = id_of.find(joined); found != id_of.end()) {
      merged = found->second;
    } else {
      merged = static_cast<int32_t>(tok_.size());
      id_of.emplace(joined, merged);
      new_tokens.push_back(byte_level_encode(joined));
      tok_.push_back(std::move(joined));
      ++vocab;
    }
    if (merged_pairs.insert(key).second)
      merges.emplace_back(byte_level_encode(tok_[a]), byte_level_encode(tok_[b]));

    std::sort(where.begin(), where.end());
    where.erase(std::unique(where.begin(), where.end()), where.end());
    for (int32_t w : where)
      apply(w, a, b, merged, key);
    std::sort(touched_.begin(), touched_.end());
    touched_.erase(std::unique(touched_.begin(), touched_.end()), touched_.end());
    for (uint64_t k : touched_) {
      const int64_t c = pairs_[k].count;
      if (c > 0)
        push(c, k);
    }
    touched_.clear();

    progress_.merges = static_cast<int64_t>(merges.size());
    progress_.vocab = vocab;
    if (progress_.merges % report_every == 0)
      report(BpeTrainProgress::Stage::kMerging);
  }
  progress_.merges = static_cast<int64_t>(merges.size());
  progress_.vocab = vocab;
  report(BpeTrainProgress::Stage::kDone);
}

}  // namespace

Tokenizer train_bpe(const std::function<bool(std::string& text)>& next_text, const BpeTrainOptions& options) {
  const int64_t n_special = static_cast<int64_t>(options.special_tokens.size());
  UPD_REQUIRE(options.vocab_size >= 256 + n_special)
      << "train_bpe: vocab_size " << options.vocab_size << " is smaller than the 256 byte tokens + " << n_special
      << " special tokens";
  UPD_REQUIRE(options.vocab_size <= (int64_t{1} << 24))
      << "train_bpe: vocab_size " << options.vocab_size << " is too large";
  UPD_REQUIRE(options.min_frequency >= 0) << "train_bpe: min_frequency " << options.min_frequency << " is negative";

  Json j = skeleton(options);
  const Tokenizer splitter = Tokenizer::from_json(j.dump(), "train_bpe skeleton");
  Trainer trainer(options, splitter);
  trainer.count(next_text);
  std::vector<std::pair<std::string, std::string>> merges;
  std::vector<std::string> new_tokens;
  trainer.merge(merges, new_tokens);

  Json& vocab = j["model"]["vocab"];
  int64_t id = 256 + n_special;
  for (const std::string& t : new_tokens)
    vocab[t] = id++;
  Json& jm = j["model"]["merges"];
  for (const auto& [a, b] : merges)
    jm.push_back(Json::array({a, b}));
  return Tokenizer::from_json(j.dump(), "train_bpe result");
}

Tokenizer train_bpe(const std::vector<std::string>& texts, const BpeTrainOptions& options) {
  size_t i = 0;
  return train_bpe(
      [&](std::string& text) {
        if (i == texts.size())
          return false;
        text = texts[i++];
        return true;
      },
      options);
}

}  // namespace updraft
