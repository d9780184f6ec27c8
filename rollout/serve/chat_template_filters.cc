// Chat templates: the filters, tests and methods a template may use (chat_template.h).
#include <cmath>
#include <cstdlib>
#include <unordered_map>

#include "rollout/serve/chat_template_internal.h"

namespace updraft::chat::detail {

namespace {

Value str(std::string s) {
  return Value::own(Json(std::move(s)));
}

}  // namespace

const std::string& need_str(const Value* v, const std::string& what, int line) {
  if (v == nullptr)
    fail(line, what + ": missing argument");
  if (!v->is_json() || !v->j().is_string())
    fail(line, what + ": expected a string, not " + type_name(*v));
  return v->j().get_ref<const std::string&>();
}

int64_t int_arg(const Value* v, int64_t dflt, const std::string& what, int line) {
  if (v == nullptr || (v->is_json() && v->j().is_null()))
    return dflt;
  if (!v->is_json() || !is_intlike(v->j()))
    fail(line, what + ": expected an integer, not " + type_name(*v));
  return as_int(v->j());
}

namespace {

size_t py_len(const Value& v, int line) {
  if (!v.defined())
    return 0;
  if (v.kind == Value::Kind::kLoop)
    return v.loop->items->size();
  if (v.lazy())
    fail(line, "object of type '" + type_name(v) + "' has no len(); add '| list'");
  if (v.is_json() && v.j().is_string())
    return utf8_decode(v.j().get_ref<const std::string&>()).size();
  if (v.is_json() && (v.j().is_array() || v.j().is_object()))
    return v.j().size();
  fail(line, "object of type '" + type_name(v) + "' has no len()");
}

Json list_of(const std::vector<Value>& items, int line) {
  Json out = Json::array();
  for (const Value& v : items)
    out.push_back(to_json(v, line));
  return out;
}

// "a.b.0" as jinja2's attribute getters read it.
Value attr_path(const Value& item, const std::string& path, int line) {
  Value v = item;
  size_t start = 0;
  while (start <= path.size()) {
    size_t dot = path.find('.', start);
    dot = dot == std::string::npos ? path.size() : dot;
    const std::string part = path.substr(start, dot - start);
    const bool digits = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
    v = get_item(v, digits ? Value::own(Json(std::stoll(part))) : str(part), line);
    start = dot + 1;
  }
  return v;
}

Value f_default(const Value& v, const Args& a, int) {
  const Value* dflt = a.get(0, "default_value");
  const Value* boolean = a.get(1, "boolean");
  if (!v.defined() || (boolean != nullptr && truthy(*boolean) && !truthy(v)))
    return dflt != nullptr ? *dflt : str("");
  return v;
}

// Whether the elements of v are (key, value) tuples.
bool pairs_of(const Value& v) {
  return v.is_json() && v.j().is_array() && v.pairs;
}

Value f_first_last(const Value& v, bool last, int line) {
  if (last && v.lazy())
    fail(line, "last: a " + type_name(v) + " is not reversible; add '| list'");
  const std::vector<Value> items = iterate(v, line);
  if (items.empty())
    return Value::undefined(std::string("no ") + (last ? "last" : "first") + " item, sequence was empty");
  return last ? items.back() : items.front();
}

Value f_int(const Value& v, const Args& a, int line) {
  const Value* dflt = a.get(0, "default");
  const int64_t base = int_arg(a.get(1, "base"), 10, "int", line);
  if (!v.defined())
    fail(line, v.hint);
  const Json* j = v.is_json() ? &v.j() : nullptr;
  if (j != nullptr && is_intlike(*j))
    return Value::own(Json(as_int(*j)));
  double d = NAN;
  if (j != nullptr && j->is_number_float())
    d = j->get<double>();
  if (j != nullptr && j->is_string()) {
    const std::string t = py_strip(j->get<std::string>(), nullptr, true, true);
    char* end = nullptr;
    errno = 0;
    const long long n = t.empty() ? 0 : std::strtoll(t.c_str(), &end, static_cast<int>(base));
    if (!t.empty() && end == t.c_str() + t.size() && errno == 0)
      return Value::own(Json(static_cast<int64_t>(n)));
    d = t.empty() ? NAN : std::strtod(t.c_str(), &end);
    if (t.empty() || end != t.c_str() + t.size())
      d = NAN;
  }
  if (std::isfinite(d) && std::fabs(d) < 9.2e18)
    return Value::own(Json(static_cast<int64_t>(d)));
  return dflt != nullptr ? *dflt : Value::own(Json(0));
}

Value f_float(const Value& v, const Args& a, int line) {
  const Value* dflt = a.get(0, "default");
  if (!v.defined())
    fail(line, v.hint);
  if (v.is_json() && is_number(v.j()))
    return Value::own(Json(as_double(v.j())));
  if (v.is_json() && v.j().is_string()) {
    const std::string t = py_strip(v.j().get<std::string>(), nullptr, true, true);
    char* end = nullptr;
    const double d = std::strtod(t.c_str(), &end);
    if (!t.empty() && end == t.c_str() + t.size() && t.find_first_of("xX") == std::string::npos)
      return Value::own(Json(d));
  }
  return dflt != nullptr ? *dflt : Value::own(Json(0.0));
}

Value f_join(const Value& v, const Args& a, int line) {
  const Value* sep = a.get(0, "d");
  const Value* attr = a.get(1, "attribute");
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v, line)) {
    out += first ? "" : sep != nullptr ? py_str(*sep, line) : "";
    out += py_str(attr != nullptr ? attr_path(item, py_str(*attr), line) : item, line);
    first = false;
  }
  return str(std::move(out));
}

Value f_map(const Value& v, const Args& a, int line) {
  Json out = Json::array();
  if (const Value* attr = a.get(99, "attribute")) {
    const Value* dflt = a.get(99, "default");
    for (const Value& item : iterate(v, line)) {
      const Value x = attr_path(item, py_str(*attr), line);
      out.push_back(to_json(x.defined() || dflt == nullptr ? x : *dflt, line));
    }
    return Value::own(std::move(out)).shaped(Value::Shape::kGenerator, false);
  }
  const std::string& filter = need_str(a.get(0, "filter"), "map", line);
  if (!has_filter(filter))
    fail(line, "map: unknown filter '" + filter + "'");
  Args rest;
  rest.pos.assign(a.pos.begin() + 1, a.pos.end());
  rest.kw = a.kw;
  for (const Value& item : iterate(v, line))
    out.push_back(to_json(apply_filter(filter, item, rest, line), line));
  return Value::own(std::move(out)).shaped(Value::Shape::kGenerator, false);
}

// select / reject / selectattr / rejectattr.
Value f_select(const Value& v, const Args& a, int line, bool by_attr, bool keep) {
  const size_t off = by_attr ? 1 : 0;
  const std::string attr = by_attr ? need_str(a.get(0, "attribute"), "selectattr", line) : "";
  std::string test;
  Args rest;
  if (a.pos.size() > off) {
    test = need_str(&a.pos[off], "select", line);
    if (!has_test(test))
      fail(line, "select: unknown test '" + test + "'");
    rest.pos.assign(a.pos.begin() + static_cast<std::ptrdiff_t>(off + 1), a.pos.end());
  }
  Json out = Json::array();
  for (const Value& item : iterate(v, line)) {
    const Value x = by_attr ? attr_path(item, attr, line) : item;
    if ((test.empty() ? truthy(x) : apply_test(test, x, rest, line)) == keep)
      out.push_back(to_json(item, line));
  }
  return Value::own(std::move(out)).shaped(Value::Shape::kGenerator, pairs_of(v));
}

Value f_items(const Value& v, const Args&, int line) {
  Json out = Json::array();
  if (v.defined() && (!v.is_json() || !v.j().is_object()))
    fail(line, "items: can only get item pairs from a mapping, not " + type_name(v));
  if (v.defined())
    for (const auto& [k, x] : v.j().items())
      out.push_back(Json::array({k, x}));
  return Value::own(std::move(out)).shaped(Value::Shape::kGenerator, true);
}

Value f_reverse(const Value& v, const Args&, int line) {
  if (v.is_json() && v.j().is_string()) {
    std::u32string u = utf8_decode(v.j().get<std::string>());
    return str(utf8_encode(std::u32string(u.rbegin(), u.rend())));
  }
  // reversed(x) is an iterator; a generator is not reversible, so jinja2 makes a reversed list.
  std::vector<Value> items = iterate(v, line);
  return Value::own(list_of(std::vector<Value>(items.rbegin(), items.rend()), line))
      .shaped(v.lazy() ? Value::Shape::kList : Value::Shape::kIterator, pairs_of(v));
}

Value f_abs(const Value& v, const Args&, int line) {
  if (!v.defined())
    fail(line, v.hint);
  if (!v.is_json() || !is_number(v.j()))
    fail(line, "bad operand type for abs(): '" + type_name(v) + "'");
  if (!is_intlike(v.j()))
    return Value::own(Json(std::fabs(v.j().get<double>())));
  if (as_int(v.j()) == INT64_MIN)
    fail(line, "integer overflow in abs()");
  return Value::own(Json(std::llabs(as_int(v.j()))));
}

Value f_replace(const Value& v, const Args& a, int line) {
  const Value* old = a.get(0, "old");
  const Value* rep = a.get(1, "new");
  if (old == nullptr || rep == nullptr)
    fail(line, "replace: needs the old and the new string");
  return str(py_replace(py_str(v, line), py_str(*old, line), py_str(*rep, line),
                        int_arg(a.get(2, "count"), -1, "replace", line)));
}

Value f_trim(const Value& v, const Args& a, int line) {
  const Value* chars = a.get(0, "chars");
  if (chars == nullptr || (chars->is_json() && chars->j().is_null()))
    return str(py_strip(py_str(v, line), nullptr, true, true));
  const std::u32string set = utf8_decode(need_str(chars, "trim", line));
  return str(py_strip(py_str(v, line), &set, true, true));
}

using FilterFn = Value (*)(const Value&, const Args&, int);

const std::unordered_map<std::string, FilterFn>& filters() {
  static const std::unordered_map<std::string, FilterFn> m = {
      {"abs", f_abs},
      {"capitalize", [](const Value& v, const Args&, int l) { return str(case_map(py_str(v, l), 'c')); }},
      {"count", [](const Value& v, const Args&, int l) { return Value::own(Json(py_len(v, l))); }},
      {"d", f_default},
      {"default", f_default},
      {"first", [](const Value& v, const Args&, int l) { return f_first_last(v, false, l); }},
      {"float", f_float},
      {"format",
       [](const Value& v, const Args& a, int l) {
         if (!a.kw.empty())
           fail(l, "format: keyword arguments are not supported");
         return str(py_format(py_str(v, l), a.pos, l));
       }},
      {"int", f_int},
      {"items", f_items},
      {"join", f_join},
      {"last", [](const Value& v, const Args&, int l) { return f_first_last(v, true, l); }},
      {"length", [](const Value& v, const Args&, int l) { return Value::own(Json(py_len(v, l))); }},
      {"list", [](const Value& v, const Args&,
                  int l) { return Value::own(list_of(iterate(v, l), l)).shaped(Value::Shape::kList, pairs_of(v)); }},
      {"lower", [](const Value& v, const Args&, int l) { return str(case_map(py_str(v, l), 'l')); }},
      {"map", f_map},
      {"reject", [](const Value& v, const Args& a, int l) { return f_select(v, a, l, false, false); }},
      {"rejectattr", [](const Value& v, const Args& a, int l) { return f_select(v, a, l, true, false); }},
      {"replace", f_replace},
      {"reverse", f_reverse},
      {"safe", [](const Value& v, const Args&, int l) { return str(py_str(v, l)); }},  // Markup(v): a string
      {"select", [](const Value& v, const Args& a, int l) { return f_select(v, a, l, false, true); }},
      {"selectattr", [](const Value& v, const Args& a, int l) { return f_select(v, a, l, true, true); }},
      {"string", [](const Value& v, const Args&, int l) { return str(py_str(v, l)); }},
      {"title", [](const Value& v, const Args&, int l) { return str(case_map(py_str(v, l), 'j')); }},
      {"tojson", [](const Value& v, const Args& a, int l) { return str(to_json_text(v, a, l)); }},
      {"trim", f_trim},
      {"upper", [](const Value& v, const Args&, int l) { return str(case_map(py_str(v, l), 'u')); }},
  };
  return m;
}

// ---- Tests ----

bool number_mod(const Value& v, const Value& n, int64_t want, int line) {
  return py_equal(arith("%", v, n, line), Value::own(Json(want)));
}

struct TestDef {
  bool (*fn)(const Value& v, const Value* arg, int line);
  bool takes_arg;
};

bool json_is(const Value& v, bool (Json::*pred)() const noexcept) {
  return v.is_json() && (v.j().*pred)();
}

const std::unordered_map<std::string, TestDef>& tests() {
  using V = const Value&;
  using A = const Value*;
  static const std::unordered_map<std::string, TestDef> m = {
      {"defined", {[](V v, A, int) { return v.defined(); }, false}},
      {"undefined", {[](V v, A, int) { return !v.defined(); }, false}},
      {"none", {[](V v, A, int) { return json_is(v, &Json::is_null); }, false}},
      {"boolean", {[](V v, A, int) { return json_is(v, &Json::is_boolean); }, false}},
      {"true", {[](V v, A, int) { return v.is_json() && v.j().is_boolean() && v.j().get<bool>(); }, false}},
      {"false", {[](V v, A, int) { return v.is_json() && v.j().is_boolean() && !v.j().get<bool>(); }, false}},
      {"integer", {[](V v, A, int) { return json_is(v, &Json::is_number_integer); }, false}},
      {"float", {[](V v, A, int) { return json_is(v, &Json::is_number_float); }, false}},
      {"number", {[](V v, A, int) { return v.is_json() && is_number(v.j()); }, false}},
      {"string", {[](V v, A, int) { return json_is(v, &Json::is_string); }, false}},
      {"mapping", {[](V v, A, int) { return json_is(v, &Json::is_object); }, false}},
      {"iterable",
       {[](V v, A, int) {
          return !v.defined() || v.kind == Value::Kind::kLoop || json_is(v, &Json::is_structured) ||
                 json_is(v, &Json::is_string);
        },
        false}},
      {"sequence",
       {[](V v, A, int) {
          return !v.defined() || json_is(v, &Json::is_object) || json_is(v, &Json::is_string) ||
                 (json_is(v, &Json::is_array) && !v.lazy() && !v.view());
        },
        false}},
      {"odd", {[](V v, A, int l) { return number_mod(v, Value::own(Json(2)), 1, l); }, false}},
      {"even", {[](V v, A, int l) { return number_mod(v, Value::own(Json(2)), 0, l); }, false}},
      {"divisibleby", {[](V v, A n, int l) { return number_mod(v, *n, 0, l); }, true}},
      {"in", {[](V v, A c, int l) { return py_contains(*c, v, l); }, true}},
      {"sameas",
       {[](V v, A o, int) {
          return v.kind == o->kind && (v.is_json() ? (v.j().is_null() || v.j().is_boolean()) && v.j() == o->j()
                                                   : v.ns == o->ns && v.loop == o->loop && v.hint == o->hint);
        },
        true}},
      {"lower",
       {[](V v, A, int) { return case_map(py_str(v), 'l') == py_str(v) && case_map(py_str(v), 'u') != py_str(v); },
        false}},
      {"upper",
       {[](V v, A, int) { return case_map(py_str(v), 'u') == py_str(v) && case_map(py_str(v), 'l') != py_str(v); },
        false}},
  };
  return m;
}

const char* comparison(const std::string& name) {
  static const std::unordered_map<std::string, const char*> m = {
      {"eq", "=="}, {"equalto", "=="},    {"==", "=="}, {"ne", "!="}, {"!=", "!="},
      {"lt", "<"},  {"lessthan", "<"},    {"<", "<"},   {"le", "<="}, {"<=", "<="},
      {"gt", ">"},  {"greaterthan", ">"}, {">", ">"},   {"ge", ">="}, {">=", ">="}};
  const auto it = m.find(name);
  return it == m.end() ? nullptr : it->second;
}

}  // namespace

bool has_filter(const std::string& name) {
  return filters().count(name) > 0;
}

bool has_test(const std::string& name) {
  return tests().count(name) > 0 || comparison(name) != nullptr;
}

Value apply_filter(const std::string& name, const Value& v, const Args& args, int line) {
  const auto it = filters().find(name);
  if (it == filters().end())
    fail(line, "unknown filter '" + name + "'");
  return it->second(v, args, line);
}

bool apply_test(const std::string& name, const Value& v, const Args& args, int line) {
  const size_t given = args.pos.size() + args.kw.size();
  const Value* arg = given > 0 ? (args.pos.empty() ? &args.kw[0].second : &args.pos[0]) : nullptr;
  const char* op = comparison(name);
  const auto it = tests().find(name);
  if (op == nullptr && it == tests().end())
    fail(line, "unknown test '" + name + "'");
  const bool takes_arg = op != nullptr || it->second.takes_arg;
  if (given != (takes_arg ? 1u : 0u))
    fail(line, "test '" + name + "' takes " + (takes_arg ? "one argument" : "no arguments"));
  return op != nullptr ? py_compare(v, op, *arg, line) : it->second.fn(v, arg, line);
}

}  // namespace updraft::chat::detail
