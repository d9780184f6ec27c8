// Training a byte-level BPE tokenizer from text; the result is a Tokenizer that saves as a Hugging
// Face tokenizer.json which the `tokenizers` package loads and encodes with the same ids.
//
// Vocabulary layout (ids): the special tokens first, in the order given (0 .. S-1); then the 256
// byte tokens in byte order (id S + b for byte b, spelled with the GPT-2 byte table, "Ġ" for
// the space); then one token per merge, in the order the merges were learnt.
//
// Training: the texts are split like encode() splits them (special tokens found in the text are
// taken out, then split_pattern's pieces, the "words"), the distinct words are counted, and
// then, until the vocabulary holds vocab_size tokens, the most frequent adjacent pair of symbols
// inside words is merged. Ties are broken DETERMINISTICALLY: the highest count first, then the
// pair whose left token's bytes are lexicographically smallest (unsigned bytes), then the
// smallest right token. Training stops early when no pair occurs min_frequency times or more,
// so the vocabulary may come out smaller than asked. A merge whose string already is a token
// (reachable by two pairs) is recorded but adds no token; one whose spelling equals a special
// token is never made. Pair counts are updated incrementally (only the words that hold the
// merged pair are visited), so training is fast: see docs/tokenizer.md for measured speed.
//
// The same texts and options give a byte-identical to_json(), on every run and platform.
// Errors (updraft::Error): vocab_size < 256 + special_tokens.size(), an empty, duplicated or
// non-UTF-8 special token, one spelled like a byte token, a negative min_frequency, a
// split_pattern that does not compile.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "rollout/tokenizer.h"

namespace updraft {

struct BpeTrainProgress {
  enum class Stage { kCounting, kMerging, kDone };
  Stage stage = Stage::kCounting;
  int64_t texts = 0, bytes = 0;        // read so far
  int64_t words = 0;                   // distinct words (after counting)
  int64_t merges = 0, max_merges = 0;  // merges made, and the most that can be made
  int64_t vocab = 0;                   // tokens in the vocabulary so far
  double seconds = 0;                  // since training began
};

struct BpeTrainOptions {
  int64_t vocab_size = 0;  // total, special and byte tokens included
  std::vector<std::string> special_tokens;
  int64_t min_frequency = 2;  // a pair seen fewer times than this is never merged
  // The pre-tokenizer's split regex (PCRE2, see SplitRegex). The GPT-2 pattern is saved as a
  // ByteLevel pre-tokenizer with use_regex; any other as Sequence[Split, ByteLevel]; an empty
  // pattern does not split at all.
  std::string split_pattern = kGpt2SplitPattern;
  // Called now and then while counting and merging, and once at the end; may be empty.
  std::function<void(const BpeTrainProgress&)> progress;
};

Tokenizer train_bpe(const std::vector<std::string>& texts, const BpeTrainOptions& options);

// Streaming form: next_text fills its argument with the next text and returns true, or returns
// false when there are no more. Only the distinct words are kept in memory.
Tokenizer train_bpe(const std::function<bool(std::string& text)>& next_text, const BpeTrainOptions& options);

}  // namespace updraft
