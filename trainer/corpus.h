// The built-in corpus: a deterministic, seeded generator of text in two domains, written for
// updraft (its source and licence are the repository's), with verifiable rewards. The built-in
// policy is pretrained on it and the demo's RL loop is rewarded on it. Format, templates, splits
// and reward rules are specified in docs/corpus.md.
//
//  * arith: arithmetic word problems. prompt "Question: ...?\nAnswer:", response a worked
//    solution " 12 - 5 = 7. 7 + 3 = 10. The answer is 10.\n", answer "10".
//  * code:  small Python functions. prompt "# Task: write max_of(xs) that returns ...\n",
//    response the function "def max_of(xs):\n    ...\n", answer the canonical function.
//
// Determinism: a sample is a pure function of (domain, seed, index) through a counter-based
// splitmix64 generator and integer arithmetic only, so the text is byte-identical on every
// platform and standard library. Every function here is thread-safe (no shared state).
// Errors: bad names throw updraft::Error; violated preconditions throw updraft::CheckFailure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace updraft::corpus {

enum class Domain : uint8_t { kArith = 0, kCode = 1 };
inline constexpr int kNumDomains = 2;

std::string_view domain_name(Domain d);          // "arith", "code"
Domain domain_from_name(std::string_view name);  // Error on an unknown name

// Template families of each domain ("story", "boxes", ... / "extreme", "sum_list", ...). The
// family of a sample is recorded so that tests and statistics can check coverage.
int family_count(Domain d);
std::string_view family_name(Domain d, int family);  // REQUIRES: 0 <= family < family_count(d)

struct Sample {
  Domain domain = Domain::kArith;
  int family = 0;
  std::string prompt;    // what the policy is given
  std::string response;  // the reference continuation (ends with '\n')
  std::string answer;    // arith: the final integer in decimal; code: the canonical function
};

// The index-th raw sample of a domain for a seed, whatever its split. Pure.
Sample make_sample(Domain d, uint64_t seed, uint64_t index);

// Splits partition the prompt space by a hash of (domain, prompt): train 90%, held-out 5%, RL
// prompts 5%. Equal prompts always fall in the same split, so no prompt of one split occurs in
// another, whatever the seeds and indices that produced them.
enum class Split : uint8_t { kTrain = 0, kHeldOut = 1, kRl = 2 };
std::string_view split_name(Split s);          // "train", "heldout", "rl"
Split split_from_name(std::string_view name);  // Error on an unknown name
Split split_of(const Sample& s);

// The index-th sample of a split: raw candidates derived from (seed, split, index, attempt)
// are drawn until one falls in the split (about 1.1 draws for train, 20 for the others). Pure.
Sample make_split_sample(Domain d, Split split, uint64_t seed, uint64_t index);

// Relative weights of the domains in a mixed stream (need not sum to 1; at least one > 0).
struct Mix {
  double arith = 1.0;
  double code = 1.0;
  static Mix only(Domain d);
};

// The domain of position `index` of a mixed stream: a seeded draw with P(arith) = arith / sum.
Domain mix_domain(const Mix& mix, uint64_t seed, uint64_t index);

// Positions [offset, offset + count) of the stream of a split: position p is
// make_split_sample(mix_domain(mix, seed, p), split, seed, p). So make_samples(.., n, .., o)
// is the slice [o, o + n) of any longer call with the same mix, split and seed.
std::vector<Sample> make_samples(const Mix& mix, Split split, size_t count, uint64_t seed, uint64_t offset = 0);
std::vector<Sample> make_samples(Domain d, Split split, size_t count, uint64_t seed, uint64_t offset = 0);

// A training document: prompt + response + end_of_text (the caller's marker, e.g. the
// tokenizer's "<|endoftext|>"; an empty marker joins documents directly).
std::string document(const Sample& s, std::string_view end_of_text);

// Credit for a response that is well formed but wrong (see reward()).
inline constexpr double kFormatCredit = 0.1;

// Verifiable reward in [0, 1] of a generated response to s.prompt (the end-of-text marker
// already removed). Never throws or crashes on any input; time is linear in its length.
//  * arith: the first "The answer is " in the response must be followed by an integer
//    (optional '-', 1..18 digits) and '.'. 1 if that integer's text equals s.answer, else
//    format_credit; 0 when there is no such well-formed line.
//  * code: the response and s.answer are tokenised as Python (comments, blank lines and
//    spacing dropped; indentation reduced to its block structure, so any consistent indent
//    width works) and local names are renamed in order of first use (the function name, its
//    parameters, keywords, builtins and attribute names are kept). 1 if the token streams are
//    equal; format_credit if the response is well formed and its def line equals the
//    canonical one; else 0. The whole response must be that one function.
double reward(const Sample& s, std::string_view generated_response, double format_credit = kFormatCredit);

// Size and composition of a set of documents.
struct CorpusStats {
  uint64_t documents = 0;
  uint64_t chars = 0;  // bytes (the corpus is ASCII)
  uint64_t domain_documents[kNumDomains] = {};
  uint64_t domain_chars[kNumDomains] = {};

  void add(const Sample& s, size_t document_chars);
  double document_fraction(Domain d) const;  // 0 when empty
  double char_fraction(Domain d) const;      // 0 when empty
};
CorpusStats corpus_stats(const std::vector<Sample>& samples, std::string_view end_of_text);

// What build_corpus/write_corpus produce: the documents of positions offset, offset + 1, ...
// of make_samples(mix, split, .., seed, ..), one after another, until max_documents
// documents or at least max_chars characters (0 = no limit; at least one limit is required).
struct CorpusSpec {
  Mix mix;
  Split split = Split::kTrain;
  uint64_t seed = 0;
  uint64_t offset = 0;
  uint64_t max_documents = 0;
  uint64_t max_chars = 0;
  std::string end_of_text;
};

std::string build_corpus(const CorpusSpec& spec, CorpusStats* stats = nullptr);

// Writes build_corpus(spec) to `path` atomically (write_file_atomic); Error on I/O failure.
CorpusStats write_corpus(const std::string& path, const CorpusSpec& spec);

}  // namespace updraft::corpus
