// Chat templates: text and value helpers, and the filters, tests and methods (chat_template.h).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "kernels/core/error.h"
#include "rollout/serve/chat_template_internal.h"

namespace updraft::chat::detail {

void fail(int line, const std::string& what) {
  if (line <= 0)
    UPD_FAIL() << "chat template: " << what;
  UPD_FAIL() << "chat template line " << line << ": " << what;
  std::abort();  // not reached: UPD_FAIL throws
}

Value Value::undefined(std::string why) {
  Value v;
  v.hint = std::move(why);
  return v;
}

Value Value::own(Json j) {
  auto root = std::make_shared<const Json>(std::move(j));
  return borrow(root, *root);
}

Value Value::borrow(const std::shared_ptr<const Json>& root, const Json& at) {
  Value v;
  v.kind = Kind::kJson;
  v.root = root;
  v.at = &at;
  return v;
}

Value* Namespace::find(const std::string& name) {
  for (auto& [k, v] : attrs)
    if (k == name)
      return &v;
  return nullptr;
}

const Value* Args::get(size_t i, const char* name) const {
  if (i < pos.size())
    return &pos[i];
  for (const auto& [k, v] : kw)
    if (k == name)
      return &v;
  return nullptr;
}

// ---- UTF-8 and Python string behaviour ----

std::u32string utf8_decode(const std::string& s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const int n = b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
    char32_t c = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
    for (int k = 1; k < n && i + k < s.size(); ++k)
      c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(c);
    i += n;
  }
  return out;
}

std::string utf8_encode(const std::u32string& s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) {
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (c < 0x800) {
      out += static_cast<char>(0xC0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
      out += static_cast<char>(0xE0 | (c >> 12));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (c >> 18));
      out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    }
  }
  return out;
}

bool py_isspace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string py_strip(const std::string& s, const std::u32string* chars, bool left, bool right) {
  const std::u32string u = utf8_decode(s);
  auto drop = [&](char32_t c) { return chars != nullptr ? chars->find(c) != std::u32string::npos : py_isspace(c); };
  size_t b = 0, e = u.size();
  while (left && b < e && drop(u[b]))
    ++b;
  while (right && e > b && drop(u[e - 1]))
    --e;
  return utf8_encode(u.substr(b, e - b));
}

namespace {

// Python's str.isprintable() for the characters repr() escapes.
bool printable(char32_t c) {
  if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD || c == 0x1680 || (c >= 0x2000 && c <= 0x200F) ||
      (c >= 0x2028 && c <= 0x202F) || (c >= 0x205F && c <= 0x206F) || c == 0x3000 || c == 0xFEFF ||
      (c >= 0xE000 && c <= 0xF8FF) || (c >= 0xD800 && c <= 0xDFFF) || (c >= 0xFFF9 && c <= 0xFFFB))
    return false;
  return true;
}

std::string hex(uint32_t v, int digits) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%0*x", digits, v);
  return buf;
}

std::string repr_string(const std::string& s) {
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char32_t q = dq ? U'"' : U'\'';
  std::string out(1, static_cast<char>(q));
  for (char32_t c : utf8_decode(s)) {
    if (c == q || c == U'\\')
      out += '\\', out += static_cast<char>(c);
    else if (c == U'\n')
      out += "\\n";
    else if (c == U'\r')
      out += "\\r";
    else if (c == U'\t')
      out += "\\t";
    else if (printable(c))
      out += utf8_encode(std::u32string(1, c));
    else
      out += c < 0x100 ? "\\x" + hex(c, 2) : c < 0x10000 ? "\\u" + hex(c, 4) : "\\U" + hex(c, 8);
  }
  return out + static_cast<char>(q);
}

}  // namespace

std::string float_repr(double d) {
  if (std::isnan(d))
    return "nan";
  if (std::isinf(d))
    return d > 0 ? "inf" : "-inf";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string s(buf, res.ptr);
  std::string sign;
  if (s[0] == '-')
    sign = "-", s.erase(0, 1);
  const size_t e = s.find('e');
  const int exp = std::stoi(s.substr(e + 1));
  std::string digits = s.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  if (exp >= 16 || exp < -4) {
    std::string m = digits.substr(0, 1) + (digits.size() > 1 ? "." + digits.substr(1) : "");
    const std::string ev = std::to_string(std::abs(exp));
    return sign + m + "e" + (exp < 0 ? "-" : "+") + (ev.size() < 2 ? "0" : "") + ev;
  }
  if (exp < 0)
    return sign + "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
  if (digits.size() <= static_cast<size_t>(exp) + 1)
    return sign + digits + std::string(static_cast<size_t>(exp) + 1 - digits.size(), '0') + ".0";
  return sign + digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
}

std::string py_repr(const Json& j) {
  switch (j.type()) {
    case Json::value_t::string:
      return repr_string(j.get_ref<const std::string&>());
    case Json::value_t::array: {
      std::string out = "[";
      for (size_t i = 0; i < j.size(); ++i)
        out += (i ? ", " : "") + py_repr(j[i]);
      return out + "]";
    }
    case Json::value_t::object: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : j.items())
        out += (first ? "" : ", ") + repr_string(k) + ": " + py_repr(v), first = false;
      return out + "}";
    }
    case Json::value_t::boolean:
      return j.get<bool>() ? "True" : "False";
    case Json::value_t::number_float:
      return float_repr(j.get<double>());
    case Json::value_t::null:
      return "None";
    default:
      return j.dump();
  }
}

std::string py_str(const Value& v, int line) {
  if (v.is_json() && v.j().is_string())
    return v.j().get<std::string>();
  return v.defined() ? repr_value(v, line) : "";
}

std::string repr_value(const Value& v, int line) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kFunction:
      return "<function " + v.hint + ">";
    case Value::Kind::kLoop:
      return "<LoopContext " + std::to_string(v.loop->index0 + 1) + "/" + std::to_string(v.loop->items->size()) + ">";
    case Value::Kind::kNamespace: {
      std::string out = "<Namespace {";
      for (size_t i = 0; i < v.ns->attrs.size(); ++i)
        out += (i ? ", " : "") + repr_string(v.ns->attrs[i].first) + ": " + repr_value(v.ns->attrs[i].second, line);
      return out + "}>";
    }
    case Value::Kind::kJson:
      break;
  }
  const Json& j = v.j();
  if (!j.is_array() || (v.shape == Value::Shape::kList && !v.pairs))
    return py_repr(j);
  if (v.lazy())
    fail(line, "cannot print a " + type_name(v) + " (jinja2 prints its address); add '| list'");
  std::string items;
  for (size_t i = 0; i < j.size(); ++i)
    items += (i ? ", " : "") + (v.pairs ? repr_value(v.element(j[i]), line) : py_repr(j[i]));
  switch (v.shape) {
    case Value::Shape::kTuple:
      return "(" + items + (j.size() == 1 ? ",)" : ")");
    case Value::Shape::kItemsView:
      return "dict_items([" + items + "])";
    case Value::Shape::kKeysView:
      return "dict_keys([" + items + "])";
    case Value::Shape::kValuesView:
      return "dict_values([" + items + "])";
    default:
      return "[" + items + "]";
  }
}

// ---- tojson: transformers' json.dumps(x, ensure_ascii, indent, separators, sort_keys) ----

namespace {

struct JsonStyle {
  bool ensure_ascii = false;
  bool pretty = false;
  std::string indent;
  std::string item_sep = ", ", key_sep = ": ";
  bool sort_keys = false;
};

std::string json_quote(const std::string& s, bool ascii) {
  std::string out = "\"";
  for (char32_t c : utf8_decode(s)) {
    switch (c) {
      case U'"':
        out += "\\\"";
        continue;
      case U'\\':
        out += "\\\\";
        continue;
      case U'\n':
        out += "\\n";
        continue;
      case U'\r':
        out += "\\r";
        continue;
      case U'\t':
        out += "\\t";
        continue;
      case U'\b':
        out += "\\b";
        continue;
      case U'\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (c < 0x20 || (ascii && c >= 0x7F && c < 0x10000)) {
      out += "\\u" + hex(c, 4);
    } else if (ascii && c >= 0x10000) {
      const uint32_t v = c - 0x10000;
      out += "\\u" + hex(0xD800 + (v >> 10), 4) + "\\u" + hex(0xDC00 + (v & 0x3FF), 4);
    } else {
      out += utf8_encode(std::u32string(1, c));
    }
  }
  return out + "\"";
}

void dump(const Json& j, const JsonStyle& st, int level, std::string& out) {
  if (!j.is_array() && !j.is_object()) {
    if (j.is_string())
      out += json_quote(j.get_ref<const std::string&>(), st.ensure_ascii);
    else if (j.is_number_float())
      out += std::isnan(j.get<double>())   ? "NaN"
             : std::isinf(j.get<double>()) ? (j.get<double>() > 0 ? "Infinity" : "-Infinity")
                                           : float_repr(j.get<double>());
    else
      out += j.dump();
    return;
  }
  if (j.empty()) {
    out += j.is_array() ? "[]" : "{}";
    return;
  }
  std::string nl, nl_in;
  if (st.pretty) {
    nl = "\n";
    for (int i = 0; i < level; ++i)
      nl += st.indent;
    nl_in = nl + st.indent;
  }
  out += j.is_array() ? "[" : "{";
  if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) {
      out += (i ? st.item_sep : "") + nl_in;
      dump(j[i], st, level + 1, out);
    }
  } else {
    std::vector<std::pair<std::string, const Json*>> items;
    for (const auto& [k, v] : j.items())
      items.emplace_back(k, &v);
    if (st.sort_keys)
      std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (size_t i = 0; i < items.size(); ++i) {
      out += (i ? st.item_sep : "") + nl_in + json_quote(items[i].first, st.ensure_ascii) + st.key_sep;
      dump(*items[i].second, st, level + 1, out);
    }
  }
  out += nl + (j.is_array() ? "]" : "}");
}

}  // namespace

std::string to_json_text(const Value& v, const Args& a, int line) {
  if (!v.is_json() || v.lazy() || v.view())
    fail(line, "tojson: Object of type " + type_name(v) + " is not JSON serializable");
  JsonStyle st;
  if (const Value* x = a.get(0, "ensure_ascii"))
    st.ensure_ascii = truthy(*x);
  if (const Value* x = a.get(1, "indent"); x != nullptr && x->is_json() && !x->j().is_null()) {
    st.pretty = true;
    if (x->j().is_string())
      st.indent = x->j().get<std::string>();
    else if (x->j().is_number_integer())
      st.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, x->j().get<int64_t>())), ' ');
    else
      fail(line, "tojson: indent must be an int or a string");
    st.item_sep = ",";
  }
  if (const Value* x = a.get(2, "separators"); x != nullptr && x->is_json() && !x->j().is_null()) {
    const Json& s = x->j();
    if (!s.is_array() || s.size() != 2 || !s[0].is_string() || !s[1].is_string())
      fail(line, "tojson: separators must be a pair of strings");
    st.item_sep = s[0].get<std::string>();
    st.key_sep = s[1].get<std::string>();
  }
  if (const Value* x = a.get(3, "sort_keys"))
    st.sort_keys = truthy(*x);
  std::string out;
  dump(v.j(), st, 0, out);
  return out;
}

}  // namespace updraft::chat::detail
