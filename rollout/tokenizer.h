// Byte-level BPE tokenizers in the Hugging Face `tokenizer.json` format (GPT-2, Llama 3,
// Qwen2/2.5/3 and updraft's own trained tokenizers), with the same ids as the `tokenizers`
// package. The supported schema is written down in docs/tokenizer.md:
//
//  * model.type "BPE": vocab, merges as "a b" strings or [a, b] pairs (rank = position; a
//    repeated pair takes its last rank, as in `tokenizers`), ignore_merges, unk_token/fuse_unk.
//    dropout, byte_fallback, continuing_subword_prefix and end_of_word_suffix are refused.
//  * pre_tokenizer: ByteLevel (add_prefix_space, use_regex) or a Sequence of Split (Regex or
//    String pattern, behavior "Isolated", invert false) ending in exactly one ByteLevel.
//    Patterns run on PCRE2 in UTF + UCP mode, so the GPT-2, Llama 3 and Qwen2 patterns split
//    as the Oniguruma engine of `tokenizers` does.
//  * normalizer: null, or "NFC", which is taken as the identity: the input is assumed to be in
//    NFC already (all ASCII text is); other input may split differently from `tokenizers`.
//  * decoder: ByteLevel. post_processor: null, ByteLevel, TemplateProcessing (its "single"
//    template), RobertaProcessing/BertProcessing (cls ... sep), or a Sequence of those.
//  * added_tokens: matched verbatim in the raw text before pre-tokenization (leftmost, then
//    longest), first those with normalized=false, then the others in what remains; single_word,
//    lstrip and rstrip are honoured. truncation and padding are kept on save but not applied.
//
// Anything else (bad JSON, another model type or pre-tokenizer, a merge naming a token that is
// not in the vocab) is an updraft::Error naming the file and the problem.
//
// Text is bytes: valid UTF-8 round-trips exactly (decode(encode(s)) == s); invalid UTF-8 is
// encoded byte by byte without error, and decode() replaces invalid sequences with U+FFFD the
// way Rust's String::from_utf8_lossy does (as `tokenizers` does).
//
// Thread safety: a const Tokenizer may be used from any number of threads at once (the word
// cache behind encode() is locked internally). Tokenizer is movable, not copyable.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace updraft {

// Split patterns of well-known byte-level tokenizers (use with the Split pre-tokenizer or
// BpeTrainOptions::split_pattern). kGpt2SplitPattern is the built-in regex of ByteLevel.
inline constexpr const char* kGpt2SplitPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
inline constexpr const char* kLlama3SplitPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr const char* kQwen2SplitPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// A compiled split regex (PCRE2, UTF + UCP, invalid UTF-8 in the subject tolerated: it is
// never matched and so lands in the gaps). Classes mean what they mean to the Oniguruma engine of
// `tokenizers` 0.21: \s and \S are the Unicode White_Space property (PCRE2's own \s also takes
// U+180E), and \p{L} / \p{N} include the letters and numbers of Unicode 15-16, which PCRE2 10.42
// does not know. Immutable and safe to share between threads.
class SplitRegex {
 public:
  // Error naming `pattern` and PCRE2's message when it does not compile.
  explicit SplitRegex(const std::string& pattern);
  ~SplitRegex();
  SplitRegex(SplitRegex&&) noexcept;
  SplitRegex& operator=(SplitRegex&&) noexcept;
  SplitRegex(const SplitRegex&) = delete;
  SplitRegex& operator=(const SplitRegex&) = delete;

  // The "Isolated" split of `tokenizers`: every match and every non-empty gap between matches,
  // in order (empty matches produce nothing). The pieces are views into `text`.
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;
  // True when the whole of `text` is one match.
  bool full_match(std::string_view text) const;
  const std::string& pattern() const { return pattern_; }

 private:
  struct Code;
  std::string pattern_;
  std::unique_ptr<Code> code_;
};

// The GPT-2 byte <-> printable character table used by byte-level tokenizers ("Ġ" is the space).
std::string byte_level_encode(std::string_view bytes);  // raw bytes -> token-string spelling
// Token-string spelling -> raw bytes; false if a character is not one of the 256.
bool byte_level_decode(std::string_view token, std::string& bytes);
// Bytes -> valid UTF-8, each maximal ill-formed sequence replaced by U+FFFD (Rust's
// String::from_utf8_lossy, as `tokenizers` decodes).
std::string utf8_lossy(std::string_view bytes);

class Tokenizer {
 public:
  // `path` is a tokenizer.json file or a directory holding one.
  static Tokenizer load(const std::string& path);
  // The contents of a tokenizer.json; `where` names it in errors.
  static Tokenizer from_json(std::string_view json_text, const std::string& where);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;
  ~Tokenizer();

  // Token ids of `text`; with add_special the post_processor's tokens are added (e.g. a BOS).
  std::vector<int32_t> encode(std::string_view text, bool add_special = false) const;
  // Text of `ids`. Ids that are not in the vocabulary are skipped (as in `tokenizers`); with
  // skip_special the special added tokens are skipped too.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;
  // The raw bytes decode() turns into text (invalid UTF-8 not yet replaced): the text of a
  // sequence is the lossy UTF-8 of its tokens' bytes concatenated.
  std::string decode_bytes(const std::vector<int32_t>& ids, bool skip_special = false) const;

  // The id of a token spelled as in the vocabulary ("Ġthe", "<|endoftext|>"), or -1.
  int32_t token_id(std::string_view token) const;
  // The vocabulary spelling of `id`, or "" when no token has that id.
  std::string token(int32_t id) const;
  bool is_special(int32_t id) const;  // a special added token
  // 1 + the largest id of the model vocabulary and the added tokens.
  int64_t vocab_size() const;

  // The words that encode() hands to BPE for `text`, as raw bytes: the text between added
  // tokens (which are left out) after pre-tokenization. `fn` sees views valid for the call.
  void pre_tokenize(std::string_view text, const std::function<void(std::string_view word)>& fn) const;
  std::vector<std::string> pre_tokenize(std::string_view text) const;

  // A tokenizer.json for this tokenizer (vocab ordered by id, merges in rank order, the other
  // sections as loaded). Deterministic: equal tokenizers give byte-identical text. It loads
  // back into an equal tokenizer here and in `tokenizers`.
  std::string to_json() const;
  // Writes to_json() to `path` atomically (old file or new file, never a torn one).
  void save(const std::string& path) const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace updraft
