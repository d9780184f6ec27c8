// Chat templates: the methods of strings, dicts, lists and loop, the global functions and
// printf-style formatting (chat_template.h).
#include <cmath>
#include <cstdio>
#include <ctime>

#include "kernels/core/error.h"
#include "rollout/serve/chat_template_internal.h"

namespace updraft::chat::detail {

namespace {

char32_t to_upper(char32_t c) {
  if ((c >= 'a' && c <= 'z') || (c >= 0xE0 && c <= 0xFE && c != 0xF7) || (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) ||
      (c >= 0x430 && c <= 0x44F))
    return c - 32;
  if (c >= 0x450 && c <= 0x45F)
    return c - 80;
  return c == 0xFF ? 0x178 : c == 0x3C2 ? 0x3A3 : c == 0xB5 ? 0x39C : c;
}

char32_t to_lower(char32_t c) {
  if ((c >= 'A' && c <= 'Z') || (c >= 0xC0 && c <= 0xDE && c != 0xD7) || (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) ||
      (c >= 0x410 && c <= 0x42F))
    return c + 32;
  if (c >= 0x400 && c <= 0x40F)
    return c + 80;
  return c == 0x178 ? 0xFF : c;
}

bool is_cased(char32_t c) {
  return to_upper(c) != c || to_lower(c) != c || c == 0xDF;
}

}  // namespace

std::string case_map(const std::string& s, char mode) {
  const std::u32string u = utf8_decode(s);
  std::u32string out;
  bool prev_cased = false;
  for (size_t i = 0; i < u.size(); ++i) {
    const char32_t c = u[i];
    bool up = mode == 'u';
    if (mode == 't')
      up = !prev_cased;
    else if (mode == 'c')
      up = i == 0;
    else if (mode == 'j')
      up = i == 0 || py_isspace(u[i - 1]) || std::u32string(U"-({[<").find(u[i - 1]) != std::u32string::npos;
    if (up && c == 0xDF)
      out += U"SS";
    else
      out += up ? to_upper(c) : to_lower(c);
    prev_cased = is_cased(c);
  }
  return utf8_encode(out);
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& rep, int64_t count) {
  std::string out;
  if (old.empty()) {
    const std::u32string u = utf8_decode(s);
    if (count != 0)
      out += rep, --count;
    for (char32_t c : u) {
      out += utf8_encode(std::u32string(1, c));
      if (count != 0)
        out += rep, --count;
    }
    return out;
  }
  size_t start = 0;
  for (size_t p; count != 0 && (p = s.find(old, start)) != std::string::npos; --count) {
    out.append(s, start, p - start);
    out += rep;
    start = p + old.size();
  }
  return out + s.substr(start);
}

namespace {

// One conversion of printf-style formatting: flags, width and precision as written in spec.
std::string format_one(const std::string& spec, char conv, const Value& v, int line) {
  if (conv == 's' || conv == 'r') {
    std::u32string text = utf8_decode(conv == 's' ? py_str(v, line) : repr_value(v, line));
    const size_t dot = spec.find('.');
    if (dot != std::string::npos)
      text = text.substr(0, static_cast<size_t>(std::atoi(spec.c_str() + dot + 1)));
    const size_t digits = spec.find_first_of("123456789");
    const size_t width =
        digits != std::string::npos && digits < dot ? static_cast<size_t>(std::atoi(spec.c_str() + digits)) : 0;
    const std::u32string pad(width > text.size() ? width - text.size() : 0, U' ');
    return utf8_encode(spec.find('-') != std::string::npos ? text + pad : pad + text);
  }
  if (!v.defined())
    fail(line, v.hint);
  if (!v.is_json() || !is_number(v.j()))
    fail(line, std::string("%") + conv + " format: a number is required, not " + type_name(v));
  char buf[512];
  if (conv == 'f' || conv == 'F' || conv == 'e' || conv == 'E' || conv == 'g' || conv == 'G')
    std::snprintf(buf, sizeof buf, (spec + conv).c_str(), as_double(v.j()));
  else if (conv == 'c')
    return utf8_encode(std::u32string(1, static_cast<char32_t>(as_double(v.j()))));
  else
    std::snprintf(buf, sizeof buf, (spec + "ll" + (conv == 'i' ? 'd' : conv)).c_str(),
                  static_cast<long long>(is_intlike(v.j()) ? as_int(v.j()) : std::trunc(as_double(v.j()))));
  return buf;
}

}  // namespace

std::string py_format(const std::string& fmt, const std::vector<Value>& args, int line) {
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    std::string spec = "%";
    for (++i; i < fmt.size() && std::string_view("-+ #0").find(fmt[i]) != std::string_view::npos; ++i)
      spec += fmt[i];
    for (; i < fmt.size() && ((fmt[i] >= '0' && fmt[i] <= '9') || fmt[i] == '.'); ++i)
      spec += fmt[i];
    if (i >= fmt.size())
      fail(line, "incomplete format");
    if (fmt[i] == '%' && spec == "%") {
      out += '%';
      continue;
    }
    if (std::string_view("srdifFeEgGxXoc").find(fmt[i]) == std::string_view::npos)
      fail(line, std::string("unsupported format character '") + fmt[i] + "'");
    if (next >= args.size())
      fail(line, "not enough arguments for format string");
    out += format_one(spec, fmt[i], args[next++], line);
  }
  const bool mapping = args.size() == 1 && args[0].is_json() && args[0].j().is_object();  // Python lets it be
  if (next < args.size() && !mapping)
    fail(line, "not all arguments converted during string formatting");
  return out;
}

namespace {

Value str(std::string s) {
  return Value::own(Json(std::move(s)));
}

Json py_split(const std::string& s, const Value* sep, int64_t maxsplit, int line) {
  Json out = Json::array();
  if (sep != nullptr && !(sep->is_json() && sep->j().is_null())) {
    const std::string& d = need_str(sep, "split", line);
    if (d.empty())
      fail(line, "split: empty separator");
    size_t start = 0;
    for (size_t p; maxsplit != 0 && (p = s.find(d, start)) != std::string::npos; maxsplit -= maxsplit > 0) {
      out.push_back(s.substr(start, p - start));
      start = p + d.size();
    }
    out.push_back(s.substr(start));
    return out;
  }
  const std::u32string u = utf8_decode(s);
  for (size_t i = 0; i < u.size();) {
    while (i < u.size() && py_isspace(u[i]))
      ++i;
    if (i == u.size())
      break;
    size_t j = i;
    while (maxsplit != 0 && j < u.size() && !py_isspace(u[j]))
      ++j;
    out.push_back(utf8_encode(u.substr(i, maxsplit != 0 ? j - i : std::u32string::npos)));
    i = maxsplit != 0 ? j : u.size();
    maxsplit -= maxsplit > 0;
  }
  return out;
}

Value string_method(const std::string& s, const std::string& name, const Args& a, int line) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const Value* chars = a.get(0, "chars");
    if (chars == nullptr || (chars->is_json() && chars->j().is_null()))
      return str(py_strip(s, nullptr, name != "rstrip", name != "lstrip"));
    const std::u32string set = utf8_decode(need_str(chars, name, line));
    return str(py_strip(s, &set, name != "rstrip", name != "lstrip"));
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize")
    return str(case_map(s, name == "upper" ? 'u' : name == "lower" ? 'l' : name == "title" ? 't' : 'c'));
  if (name == "startswith" || name == "endswith") {
    const Value* x = a.get(0, name == "startswith" ? "prefix" : "suffix");
    std::vector<Value> options =
        x != nullptr && x->is_json() && x->j().is_array() ? iterate(*x, line) : std::vector<Value>{x ? *x : Value()};
    for (const Value& o : options) {
      const std::string& p = need_str(&o, name, line);
      if (p.size() <= s.size() && s.compare(name == "startswith" ? 0 : s.size() - p.size(), p.size(), p) == 0)
        return Value::own(Json(true));
    }
    return Value::own(Json(false));
  }
  if (name == "split")
    return Value::own(py_split(s, a.get(0, "sep"), int_arg(a.get(1, "maxsplit"), -1, "split", line), line));
  if (name == "replace")
    return str(py_replace(s, need_str(a.get(0, "old"), name, line), need_str(a.get(1, "new"), name, line),
                          int_arg(a.get(2, "count"), -1, "replace", line)));
  if (name == "find" || name == "count") {
    const std::string& sub = need_str(a.get(0, "sub"), name, line);
    if (name == "find") {
      const size_t p = s.find(sub);
      return Value::own(
          Json(p == std::string::npos ? int64_t{-1} : static_cast<int64_t>(utf8_decode(s.substr(0, p)).size())));
    }
    if (sub.empty())
      return Value::own(Json(utf8_decode(s).size() + 1));
    int64_t n = 0;
    for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size()))
      ++n;
    return Value::own(Json(n));
  }
  if (name == "join") {
    const Value* items = a.get(0, "iterable");
    if (items == nullptr)
      fail(line, "join: missing argument");
    std::string out;
    bool first = true;
    for (const Value& item : iterate(*items, line)) {
      out += first ? "" : s;
      out += need_str(&item, "join", line);
      first = false;
    }
    return str(std::move(out));
  }
  fail(line, "'str' object has no method '" + name + "'");
}

Value dict_method(const Value& obj, const std::string& name, const Args& a, int line) {
  const Json& j = obj.j();
  if (name == "items" || name == "keys" || name == "values") {
    Json out = Json::array();
    for (const auto& [k, v] : j.items())
      out.push_back(name == "items" ? Json::array({k, v}) : name == "keys" ? Json(k) : v);
    return Value::own(std::move(out))
        .shaped(name == "items"  ? Value::Shape::kItemsView
                : name == "keys" ? Value::Shape::kKeysView
                                 : Value::Shape::kValuesView,
                name == "items");
  }
  if (name == "get") {
    const Value* key = a.get(0, "key");
    const Value* dflt = a.get(1, "default");
    if (key == nullptr)
      fail(line, "get: missing the key");
    if (key->is_json() && key->j().is_string()) {
      const auto it = j.find(key->j().get<std::string>());
      if (it != j.end())
        return obj.child(*it);
    }
    return dflt != nullptr ? *dflt : Value::own(Json());
  }
  if (name == "update" || name == "pop" || name == "popitem" || name == "setdefault" || name == "clear")
    fail(line, "dicts are immutable in chat templates (jinja2's ImmutableSandboxedEnvironment): '" + name + "'");
  fail(line, "'dict' object has no method '" + name + "'");
}

}  // namespace

Value call_method(const Value& obj, const std::string& name, const Args& a, int line) {
  if (!obj.defined())
    fail(line, obj.hint);
  if (obj.kind == Value::Kind::kLoop && name == "cycle") {
    if (a.pos.empty())
      fail(line, "loop.cycle: no items for cycling given");
    return a.pos[obj.loop->index0 % a.pos.size()];
  }
  if (obj.is_json() && obj.j().is_string())
    return string_method(obj.j().get<std::string>(), name, a, line);
  if (obj.is_json() && obj.j().is_object())
    return dict_method(obj, name, a, line);
  const bool seq =
      obj.is_json() && obj.j().is_array() && (obj.shape == Value::Shape::kList || obj.shape == Value::Shape::kTuple);
  if (seq && (name == "count" || name == "index")) {
    const Value* x = a.get(0, "value");
    if (x == nullptr)
      fail(line, name + ": missing argument");
    int64_t n = 0, i = 0;
    for (const Json& e : obj.j()) {
      if (py_equal(*x, obj.element(e))) {
        if (name == "index")
          return Value::own(Json(i));
        ++n;
      }
      ++i;
    }
    if (name == "index")
      fail(line, "list.index(x): x not in list");
    return Value::own(Json(n));
  }
  static const char* const kMutators[] = {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse"};
  if (seq)
    for (const char* m : kMutators)
      if (name == m)
        fail(line, "lists are immutable in chat templates (jinja2's ImmutableSandboxedEnvironment): '" + name + "'");
  fail(line, "'" + type_name(obj) + "' object has no method '" + name + "'");
}

namespace {

Value make_range(const Args& a, int line) {
  int64_t v[3] = {0, 0, 1};
  if (a.pos.empty() || a.pos.size() > 3 || !a.kw.empty())
    fail(line, "range() takes 1 to 3 positional arguments");
  for (size_t i = 0; i < a.pos.size(); ++i) {
    if (!a.pos[i].is_json() || !is_intlike(a.pos[i].j()))
      fail(line, "range() arguments must be integers, not " + type_name(a.pos[i]));
    v[a.pos.size() == 1 ? 1 : i] = as_int(a.pos[i].j());
  }
  if (v[2] == 0)
    fail(line, "range() arg 3 must not be zero");
  const double count = std::ceil((static_cast<double>(v[1]) - static_cast<double>(v[0])) / static_cast<double>(v[2]));
  if (count > 100000)
    fail(line, "range() is limited to 100000 items (as jinja2's sandbox)");
  Json out = Json::array();
  for (int64_t x = v[0]; v[2] > 0 ? x < v[1] : x > v[1]; x += v[2])
    out.push_back(x);
  return Value::own(std::move(out));
}

Value make_namespace(const Args& a, int line) {
  auto ns = std::make_shared<Namespace>();
  auto set = [&](const std::string& k, const Value& v) {
    if (Value* slot = ns->find(k))
      *slot = v;
    else
      ns->attrs.emplace_back(k, v);
  };
  if (a.pos.size() > 1 || (a.pos.size() == 1 && !(a.pos[0].is_json() && a.pos[0].j().is_object())))
    fail(line, "namespace() takes keyword arguments and at most one dict");
  if (!a.pos.empty())
    for (const auto& [k, v] : a.pos[0].j().items())
      set(k, a.pos[0].child(v));
  for (const auto& [k, v] : a.kw)
    set(k, v);
  Value out;
  out.kind = Value::Kind::kNamespace;
  out.ns = std::move(ns);
  return out;
}

Value strftime_now(const Args& a, int line) {
  if (a.pos.size() != 1 || !a.pos[0].is_json() || !a.pos[0].j().is_string())
    fail(line, "strftime_now() takes one format string");
  const std::string fmt = a.pos[0].j().get<std::string>();
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  for (size_t cap = 256; cap <= (1u << 16); cap *= 4) {
    std::string buf(cap, '\0');
    const size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
    if (n > 0 || fmt.empty())
      return Value::own(Json(buf.substr(0, n)));
  }
  return Value::own(Json(""));
}

}  // namespace

bool is_global(const std::string& name) {
  return name == "raise_exception" || name == "range" || name == "namespace" || name == "strftime_now" ||
         name == "dict" || name == "lipsum" || name == "cycler" || name == "joiner";
}

Value call_global(const std::string& name, const Args& a, int line) {
  if (name == "raise_exception") {
    const Value* msg = a.get(0, "message");
    UPD_FAIL() << (msg != nullptr ? py_str(*msg, line) : std::string("raise_exception() called"));
  }
  if (name == "range")
    return make_range(a, line);
  if (name == "namespace")
    return make_namespace(a, line);
  if (name == "strftime_now")
    return strftime_now(a, line);
  if (name == "dict") {
    Json out = Json::object();
    if (a.pos.size() > 1 || (a.pos.size() == 1 && !(a.pos[0].is_json() && a.pos[0].j().is_object())))
      fail(line, "dict() takes keyword arguments and at most one dict");
    if (!a.pos.empty())
      out = a.pos[0].j();
    for (const auto& [k, v] : a.kw)
      out[k] = to_json(v, line);
    return Value::own(std::move(out));
  }
  if (name == "lipsum" || name == "cycler" || name == "joiner")
    fail(line, "'" + name + "()' is not supported in chat templates");
  fail(line, "'" + name + "' is undefined");
}

}  // namespace updraft::chat::detail
