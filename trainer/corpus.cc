// Sample streams, splits, mixing, documents, statistics and corpus files. The per-domain
// builders are in corpus_arith.cc and corpus_code.cc, the rewards in corpus_reward.cc.
#include "trainer/corpus.h"

#include <limits>

#include "kernels/core/error.h"
#include "kernels/io/atomic_file.h"
#include "trainer/corpus_detail.h"

namespace updraft::corpus {
namespace {

// Streams of draw_key(): one per use, so that draws of one use never repeat another's.
constexpr uint64_t kStreamSample = 1;      // + domain
constexpr uint64_t kStreamSplitDraw = 16;  // + 4 * split + domain
constexpr uint64_t kStreamMix = 64;

// Buckets of split_of(), out of 100.
constexpr uint64_t kHeldOutPercent = 5;
constexpr uint64_t kRlPercent = 5;

}  // namespace

std::string_view domain_name(Domain d) {
  return d == Domain::kArith ? "arith" : "code";
}

Domain domain_from_name(std::string_view name) {
  if (name == "arith")
    return Domain::kArith;
  if (name == "code")
    return Domain::kCode;
  UPD_FAIL() << "unknown corpus domain '" << name << "' (expected arith or code)";
  return Domain::kArith;  // not reached
}

int family_count(Domain d) {
  return d == Domain::kArith ? detail::arith_family_count() : detail::code_family_count();
}

std::string_view family_name(Domain d, int family) {
  return d == Domain::kArith ? detail::arith_family_name(family) : detail::code_family_name(family);
}

Sample make_sample(Domain d, uint64_t seed, uint64_t index) {
  detail::Rng rng(detail::draw_key(seed, kStreamSample + static_cast<uint64_t>(d), index));
  return d == Domain::kArith ? detail::make_arith(rng) : detail::make_code(rng);
}

std::string_view split_name(Split s) {
  switch (s) {
    case Split::kTrain:
      return "train";
    case Split::kHeldOut:
      return "heldout";
    case Split::kRl:
      return "rl";
  }
  return "?";
}

Split split_from_name(std::string_view name) {
  for (Split s : {Split::kTrain, Split::kHeldOut, Split::kRl})
    if (split_name(s) == name)
      return s;
  UPD_FAIL() << "unknown corpus split '" << name << "' (expected train, heldout or rl)";
  return Split::kTrain;  // not reached
}

Split split_of(const Sample& s) {
  const char tag = static_cast<char>('0' + static_cast<int>(s.domain));
  const uint64_t bucket = detail::hash_text(s.prompt, detail::hash_text(std::string_view(&tag, 1))) % 100;
  if (bucket < kHeldOutPercent)
    return Split::kHeldOut;
  if (bucket < kHeldOutPercent + kRlPercent)
    return Split::kRl;
  return Split::kTrain;
}

Sample make_split_sample(Domain d, Split split, uint64_t seed, uint64_t index) {
  // The attempt-th candidate of a position is the raw sample mix64(base + attempt): distinct
  // draws for one position, and separate streams for each (split, domain).
  const uint64_t stream = kStreamSplitDraw + 4 * static_cast<uint64_t>(split) + static_cast<uint64_t>(d);
  const uint64_t base = detail::draw_key(seed, stream, index);
  for (uint64_t attempt = 0;; ++attempt) {
    Sample s = make_sample(d, seed, detail::mix64(base + attempt));
    if (split_of(s) == split)
      return s;
    // A split holds 5% of the prompts of every template family, so 10^4 misses in a row has
    // probability below 10^-200; reaching it means the prompt hash or a builder is broken.
    UPD_CHECK(attempt < 10000) << "no " << split_name(split) << " sample found for index " << index;
  }
}

Mix Mix::only(Domain d) {
  Mix m;
  m.arith = d == Domain::kArith ? 1.0 : 0.0;
  m.code = d == Domain::kCode ? 1.0 : 0.0;
  return m;
}

Domain mix_domain(const Mix& mix, uint64_t seed, uint64_t index) {
  UPD_CHECK(mix.arith >= 0 && mix.code >= 0 && mix.arith + mix.code > 0)
      << "corpus mix weights arith=" << mix.arith << " code=" << mix.code;
  if (mix.code == 0)
    return Domain::kArith;
  if (mix.arith == 0)
    return Domain::kCode;
  // u in [0, 1) from the top 53 bits: exact in a double, so the draw is the same everywhere.
  const double u = static_cast<double>(detail::draw_key(seed, kStreamMix, index) >> 11) * 0x1.0p-53;
  return u * (mix.arith + mix.code) < mix.arith ? Domain::kArith : Domain::kCode;
}

std::vector<Sample> make_samples(const Mix& mix, Split split, size_t count, uint64_t seed, uint64_t offset) {
  std::vector<Sample> out;
  out.reserve(count);
  for (uint64_t p = offset; p < offset + count; ++p)
    out.push_back(make_split_sample(mix_domain(mix, seed, p), split, seed, p));
  return out;
}

std::vector<Sample> make_samples(Domain d, Split split, size_t count, uint64_t seed, uint64_t offset) {
  return make_samples(Mix::only(d), split, count, seed, offset);
}

std::string document(const Sample& s, std::string_view end_of_text) {
  std::string doc;
  doc.reserve(s.prompt.size() + s.response.size() + end_of_text.size());
  doc += s.prompt;
  doc += s.response;
  doc += end_of_text;
  return doc;
}

void CorpusStats::add(const Sample& s, size_t document_chars) {
  const int d = static_cast<int>(s.domain);
  ++documents;
  chars += document_chars;
  ++domain_documents[d];
  domain_chars[d] += document_chars;
}

double CorpusStats::document_fraction(Domain d) const {
  return documents == 0 ? 0.0 : static_cast<double>(domain_documents[static_cast<int>(d)]) / documents;
}

double CorpusStats::char_fraction(Domain d) const {
  return chars == 0 ? 0.0 : static_cast<double>(domain_chars[static_cast<int>(d)]) / chars;
}

CorpusStats corpus_stats(const std::vector<Sample>& samples, std::string_view end_of_text) {
  CorpusStats st;
  for (const Sample& s : samples)
    st.add(s, s.prompt.size() + s.response.size() + end_of_text.size());
  return st;
}

std::string build_corpus(const CorpusSpec& spec, CorpusStats* stats) {
  UPD_CHECK(spec.max_documents > 0 || spec.max_chars > 0) << "corpus spec sets no size limit";
  const uint64_t max_docs = spec.max_documents > 0 ? spec.max_documents : std::numeric_limits<uint64_t>::max();
  const uint64_t max_chars = spec.max_chars > 0 ? spec.max_chars : std::numeric_limits<uint64_t>::max();
  std::string text;
  if (spec.max_chars > 0)
    text.reserve(spec.max_chars + 4096);
  CorpusStats st;
  for (uint64_t p = spec.offset; st.documents < max_docs && st.chars < max_chars; ++p) {
    const Sample s = make_split_sample(mix_domain(spec.mix, spec.seed, p), spec.split, spec.seed, p);
    const size_t before = text.size();
    text += s.prompt;
    text += s.response;
    text += spec.end_of_text;
    st.add(s, text.size() - before);
  }
  if (stats != nullptr)
    *stats = st;
  return text;
}

CorpusStats write_corpus(const std::string& path, const CorpusSpec& spec) {
  CorpusStats st;
  const std::string text = build_corpus(spec, &st);
  write_file_atomic(path, text);
  return st;
}

}  // namespace updraft::corpus
