// Reading a tokenizer.json into Tokenizer::Impl: the model, the pre-tokenizer, the
// post-processor, the normalizer / decoder checks and the added tokens, then the id tables
// (finish_tables). Everything unsupported is refused with an Error naming the file.
#include <algorithm>
#include <cctype>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/core/error.h"
#include "rollout/tokenizer.h"
#include "rollout/tokenizer_detail.h"

namespace updraft {

using tokenizer_detail::AddedToken;
using tokenizer_detail::byte_table;
using tokenizer_detail::ByteTable;
using tokenizer_detail::Json;
using tokenizer_detail::PreStep;

namespace {

// Ids above this are refused, so that a damaged file cannot make us allocate without bound.
constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;

const Json& field(const Json& j, const char* key) {
  static const Json null_json;
  return j.is_object() && j.contains(key) ? j[key] : null_json;
}

bool opt_bool(const Json& j, const char* key, bool dflt, const std::string& where) {
  const Json& v = field(j, key);
  if (v.is_null())
    return dflt;
  UPD_REQUIRE(v.is_boolean()) << where << ": \"" << key << "\" must be true or false, not " << v.dump();
  return v.get<bool>();
}

std::string type_of(const Json& j, const std::string& where, const char* what) {
  UPD_REQUIRE(j.is_object() && field(j, "type").is_string()) << where << ": " << what << " has no \"type\"";
  return j["type"].get<std::string>();
}

int32_t read_id(const Json& v, const std::string& where, const std::string& what) {
  UPD_REQUIRE(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= kMaxTokenId)
      << where << ": " << what << " has an id that is not an integer in [0, " << kMaxTokenId << "]: " << v.dump();
  return static_cast<int32_t>(v.get<int64_t>());
}

}  // namespace

void Tokenizer::Impl::parse_model(const Json& m) {
  UPD_REQUIRE(m.is_object()) << where << ": no \"model\" object";
  const Json& type = field(m, "type");
  UPD_REQUIRE(type.is_null() || (type.is_string() && type.get<std::string>() == "BPE"))
      << where << ": model type " << type.dump() << " is not supported (only \"BPE\")";
  const Json& dropout = field(m, "dropout");
  UPD_REQUIRE(dropout.is_null() || (dropout.is_number() && dropout.get<double>() == 0.0))
      << where << ": BPE dropout " << dropout.dump() << " is not supported";
  UPD_REQUIRE(!opt_bool(m, "byte_fallback", false, where)) << where << ": BPE byte_fallback is not supported";
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const Json& v = field(m, key);
    UPD_REQUIRE(v.is_null() || (v.is_string() && v.get<std::string>().empty()))
        << where << ": BPE " << key << " " << v.dump() << " is not supported";
  }
  fuse_unk = opt_bool(m, "fuse_unk", false, where);
  ignore_merges = opt_bool(m, "ignore_merges", false, where);

  const Json& v = field(m, "vocab");
  UPD_REQUIRE(v.is_object()) << where << ": model.vocab must be an object of token -> id";
  vocab.reserve(v.size());
  entries.reserve(v.size());
  for (const auto& [tok, id] : v.items()) {
    const int32_t i = read_id(id, where, "vocab token \"" + tok + "\"");
    vocab.emplace(tok, i);
    entries.emplace_back(tok, i);
  }
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second < b.second : a.first < b.first;
  });

  const Json& u = field(m, "unk_token");
  UPD_REQUIRE(u.is_null() || u.is_string()) << where << ": model.unk_token must be a string or null";
  if (u.is_string()) {
    unk_token = u.get<std::string>();
    auto it = vocab.find(unk_token);
    unk_id = it == vocab.end() ? -1 : it->second;
  }

  const Json& ms = field(m, "merges");
  UPD_REQUIRE(ms.is_array() || ms.is_null()) << where << ": model.merges must be a list";
  merges.reserve(ms.size());
  merge_table.reserve(ms.size());
  for (size_t r = 0; r < ms.size(); ++r) {
    const Json& e = ms[r];
    std::string a, b;
    if (e.is_string()) {
      const std::string s = e.get<std::string>();
      const size_t sp = s.find(' ');
      UPD_REQUIRE(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos)
          << where << ": merge #" << r << " " << e.dump() << " is not two tokens separated by one space";
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else {
      UPD_REQUIRE(e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string())
          << where << ": merge #" << r << " " << e.dump() << " is neither \"a b\" nor [\"a\", \"b\"]";
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    }
    const auto ia = vocab.find(a), ib = vocab.find(b), iab = vocab.find(a + b);
    for (const auto& [it, t] : {std::pair{ia, a}, std::pair{ib, b}, std::pair{iab, a + b}})
      UPD_REQUIRE(it != vocab.end()) << where << ": merge #" << r << " " << e.dump() << " names \"" << t
                                     << "\", which is not in the vocab";
    merge_table.put(ia->second, ib->second, static_cast<int32_t>(r), iab->second);
    merges.emplace_back(std::move(a), std::move(b));
  }
}

void Tokenizer::Impl::parse_pre_tokenizer(const Json& p) {
  const std::string type = type_of(p, where, "pre_tokenizer");
  if (type == "Sequence") {
    const Json& list = field(p, "pretokenizers");
    UPD_REQUIRE(list.is_array()) << where << ": Sequence pre_tokenizer without a \"pretokenizers\" list";
    for (const Json& e : list)
      parse_pre_tokenizer(e);
    return;
  }
  UPD_REQUIRE(pre.empty() || !pre.back().byte_level)
      << where << ": pre_tokenizer " << type << " after ByteLevel is not supported (ByteLevel must come last)";
  const auto compile = [&](const std::string& pattern) {
    try {
      return std::make_unique<SplitRegex>(pattern);
    } catch (const Error& e) {
      UPD_FAIL() << where << ": " << e.what();
    }
    return std::unique_ptr<SplitRegex>();
  };
  PreStep step;
  if (type == "ByteLevel") {
    step.byte_level = true;
    step.add_prefix_space = opt_bool(p, "add_prefix_space", true, where);
    if (opt_bool(p, "use_regex", true, where))
      step.regex = compile(kGpt2SplitPattern);
  } else if (type == "Split") {
    const Json& pat = field(p, "pattern");
    const Json& behavior = field(p, "behavior");
    UPD_REQUIRE(behavior.is_string() && behavior.get<std::string>() == "Isolated")
        << where << ": Split behavior " << behavior.dump() << " is not supported (only \"Isolated\")";
    UPD_REQUIRE(!opt_bool(p, "invert", false, where)) << where << ": Split with invert true is not supported";
    if (field(pat, "Regex").is_string()) {
      step.regex = compile(pat["Regex"].get<std::string>());
    } else if (field(pat, "String").is_string()) {
      std::string escaped;
      for (char c : pat["String"].get<std::string>()) {
        if (static_cast<unsigned char>(c) < 0x80 && !std::isalnum(static_cast<unsigned char>(c)))
          escaped += '\\';
        escaped += c;
      }
      step.regex = compile(escaped);
    } else {
      UPD_FAIL() << where << ": Split pattern " << pat.dump() << " is neither {\"Regex\": ...} nor {\"String\": ...}";
    }
  } else {
    UPD_FAIL() << where << ": pre_tokenizer type \"" << type << "\" is not supported";
  }
  pre.push_back(std::move(step));
}

void Tokenizer::Impl::parse_post_processor(const Json& p) {
  if (p.is_null())
    return;
  const std::string type = type_of(p, where, "post_processor");
  if (type == "ByteLevel")
    return;
  if (type == "Sequence") {
    const Json& list = field(p, "processors");
    UPD_REQUIRE(list.is_array()) << where << ": Sequence post_processor without a \"processors\" list";
    for (const Json& e : list)
      parse_post_processor(e);
    return;
  }
  std::vector<int32_t> pre_ids, post_ids;
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    for (const char* key : {"cls", "sep"}) {
      const Json& v = field(p, key);
      UPD_REQUIRE(v.is_array() && v.size() == 2) << where << ": " << type << " needs \"" << key << "\": [token, id]";
      (std::string(key) == "cls" ? pre_ids : post_ids).push_back(read_id(v[1], where, type + "." + key));
    }
  } else if (type == "TemplateProcessing") {
    const Json& single = field(p, "single");
    const Json& specials = field(p, "special_tokens");
    UPD_REQUIRE(single.is_array()) << where << ": TemplateProcessing without a \"single\" template";
    bool seen_a = false;
    for (const Json& item : single) {
      if (field(item, "Sequence").is_object()) {
        const Json& id = field(item["Sequence"], "id");
        UPD_REQUIRE(id == "A" && !seen_a)
            << where << ": TemplateProcessing single template " << single.dump() << " must hold the sequence A once";
        seen_a = true;
      } else {
        const Json& name = field(field(item, "SpecialToken"), "id");
        UPD_REQUIRE(name.is_string()) << where << ": bad TemplateProcessing item " << item.dump();
        const Json& ids = field(field(specials, name.get<std::string>().c_str()), "ids");
        UPD_REQUIRE(ids.is_array()) << where << ": TemplateProcessing special token " << name.dump()
                                    << " is not in \"special_tokens\"";
        for (const Json& id : ids)
          (seen_a ? post_ids : pre_ids).push_back(read_id(id, where, "special token " + name.dump()));
      }
    }
    UPD_REQUIRE(seen_a) << where << ": TemplateProcessing single template has no sequence A";
  } else {
    UPD_FAIL() << where << ": post_processor type \"" << type << "\" is not supported";
  }
  // A later processor wraps what the earlier ones produced.
  prefix_ids.insert(prefix_ids.begin(), pre_ids.begin(), pre_ids.end());
  suffix_ids.insert(suffix_ids.end(), post_ids.begin(), post_ids.end());
}

void Tokenizer::Impl::parse(const Json& j) {
  UPD_REQUIRE(j.is_object()) << where << ": not a JSON object";
  parse_model(field(j, "model"));

  normalizer = field(j, "normalizer");
  if (!normalizer.is_null()) {
    const std::string type = type_of(normalizer, where, "normalizer");
    bool ok = type == "NFC";
    if (type == "Sequence" && field(normalizer, "normalizers").is_array()) {
      ok = true;
      for (const Json& n : normalizer["normalizers"])
        ok = ok && field(n, "type") == "NFC";
    }
    UPD_REQUIRE(ok) << where << ": normalizer " << normalizer.dump() << " is not supported (only null or NFC)";
  }

  pre_tokenizer = field(j, "pre_tokenizer");
  UPD_REQUIRE(!pre_tokenizer.is_null()) << where << ": no pre_tokenizer (byte-level BPE needs ByteLevel)";
  parse_pre_tokenizer(pre_tokenizer);
  UPD_REQUIRE(!pre.empty() && pre.back().byte_level)
      << where << ": pre_tokenizer " << pre_tokenizer.dump() << " does not end in ByteLevel";

  decoder = field(j, "decoder");
  UPD_REQUIRE(decoder.is_object() && field(decoder, "type") == "ByteLevel")
      << where << ": decoder " << decoder.dump() << " is not supported (only ByteLevel)";

  post_processor = field(j, "post_processor");
  parse_post_processor(post_processor);
  truncation = field(j, "truncation");
  padding = field(j, "padding");

  const Json& at = field(j, "added_tokens");
  UPD_REQUIRE(at.is_null() || at.is_array()) << where << ": added_tokens must be a list";
  added.reserve(at.size());
  for (const Json& e : at) {
    UPD_REQUIRE(e.is_object() && field(e, "content").is_string() && !e["content"].get<std::string>().empty())
        << where << ": added token " << e.dump() << " has no content";
    AddedToken t;
    t.content = e["content"].get<std::string>();
    t.id = read_id(field(e, "id"), where, "added token \"" + t.content + "\"");
    t.special = opt_bool(e, "special", false, where);
    t.single_word = opt_bool(e, "single_word", false, where);
    t.lstrip = opt_bool(e, "lstrip", false, where);
    t.rstrip = opt_bool(e, "rstrip", false, where);
    t.normalized = opt_bool(e, "normalized", !t.special, where);
    added.push_back(std::move(t));
  }
  finish_tables();
}

void Tokenizer::Impl::finish_tables() {
  for (const AddedToken& t : added) {
    added_ids[t.content] = t.id;
    (t.normalized ? normalized_matcher : raw_matcher).add(&t);
  }
  int64_t size = 0;
  for (const auto& [tok, id] : entries)
    size = std::max<int64_t>(size, id + 1);
  for (const AddedToken& t : added)
    size = std::max<int64_t>(size, t.id + 1);
  spelling.assign(size, std::string());
  flags.assign(size, 0);
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {  // the first token of an id wins
    spelling[it->second] = it->first;
    flags[it->second] = 1;
  }
  for (const AddedToken& t : added) {
    spelling[t.id] = t.content;
    flags[t.id] = static_cast<uint8_t>(1 | (t.special ? 2 : 0));
  }
  id_bytes.assign(size, std::string());
  for (int64_t i = 0; i < size; ++i)
    if (flags[i] && !byte_level_decode(spelling[i], id_bytes[i]))
      id_bytes[i] = spelling[i];  // not byte-level spelled: the ByteLevel decoder keeps it as is

  const ByteTable& bt = byte_table();
  for (int b = 0; b < 256; ++b) {
    auto it = vocab.find(bt.spelling[b]);
    byte_id[b] = it == vocab.end() ? -1 : it->second;
  }
  if (ignore_merges) {
    std::string bytes;
    for (const auto& [tok, id] : entries)
      if (byte_level_decode(tok, bytes))
        bytes_vocab.emplace(bytes, id);
  }
  for (int32_t id : prefix_ids)
    UPD_REQUIRE(id < size && flags[id]) << where << ": post_processor adds id " << id << ", which has no token";
  for (int32_t id : suffix_ids)
    UPD_REQUIRE(id < size && flags[id]) << where << ": post_processor adds id " << id << ", which has no token";
}

}  // namespace updraft
