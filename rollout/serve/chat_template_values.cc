// Chat templates: Python semantics of values: equality, order, membership, lookup, arithmetic
// (chat_template.h).
#include <algorithm>
#include <cmath>

#include "rollout/serve/chat_template_internal.h"

namespace updraft::chat::detail {

namespace {

Value boolean(bool b) {
  return Value::own(Json(b));
}

bool json_equal(const Json& a, const Json& b) {
  if (is_number(a) || is_number(b)) {
    if (!is_number(a) || !is_number(b))
      return false;
    if (is_intlike(a) && is_intlike(b))
      return as_int(a) == as_int(b);
    return as_double(a) == as_double(b);
  }
  if (a.type() != b.type())
    return false;
  if (a.is_array()) {
    if (a.size() != b.size())
      return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (!json_equal(a[i], b[i]))
        return false;
    return true;
  }
  if (a.is_object()) {
    if (a.size() != b.size())
      return false;
    for (const auto& [k, v] : a.items()) {
      const auto it = b.find(k);
      if (it == b.end() || !json_equal(v, *it))
        return false;
    }
    return true;
  }
  return a == b;
}

// -1, 0 or 1 as Python orders a and b; Error for types Python does not order.
int order(const Json& a, const Json& b, const std::string& op, int line) {
  if (is_number(a) && is_number(b)) {
    if (is_intlike(a) && is_intlike(b))
      return as_int(a) < as_int(b) ? -1 : as_int(a) > as_int(b) ? 1 : 0;
    return as_double(a) < as_double(b) ? -1 : as_double(a) > as_double(b) ? 1 : 0;
  }
  if (a.is_string() && b.is_string())
    return a.get_ref<const std::string&>().compare(b.get_ref<const std::string&>()) < 0   ? -1
           : a.get_ref<const std::string&>().compare(b.get_ref<const std::string&>()) > 0 ? 1
                                                                                          : 0;
  if (a.is_array() && b.is_array()) {
    for (size_t i = 0; i < a.size() && i < b.size(); ++i)
      if (!json_equal(a[i], b[i]))
        return order(a[i], b[i], op, line);
    return a.size() < b.size() ? -1 : a.size() > b.size() ? 1 : 0;
  }
  fail(line, "'" + op + "' not supported between instances of '" + type_name(Value::own(a)) + "' and '" +
                 type_name(Value::own(b)) + "'");
}

Value loop_attr(const Value& obj, const std::string& name) {
  const LoopInfo& l = *obj.loop;
  const size_t i = l.index0, n = l.items->size();
  if (name == "index" || name == "index0" || name == "revindex" || name == "revindex0" || name == "length")
    return Value::own(Json(name == "index"       ? i + 1
                           : name == "index0"    ? i
                           : name == "revindex"  ? n - i
                           : name == "revindex0" ? n - i - 1
                                                 : n));
  if (name == "first" || name == "last")
    return boolean(name == "first" ? i == 0 : i + 1 == n);
  if (name == "previtem")
    return i > 0 ? (*l.items)[i - 1] : Value::undefined("there is no previous item");
  if (name == "nextitem")
    return i + 1 < n ? (*l.items)[i + 1] : Value::undefined("there is no next item");
  if (name == "depth" || name == "depth0")
    return Value::own(Json(name == "depth" ? 1 : 0));
  return Value::undefined("'LoopContext object' has no attribute '" + name + "'");
}

}  // namespace

std::string type_name(const Value& v) {
  if (v.kind == Value::Kind::kUndefined)
    return "Undefined";
  if (v.kind == Value::Kind::kNamespace)
    return "Namespace";
  if (v.kind == Value::Kind::kLoop)
    return "LoopContext";
  if (v.kind == Value::Kind::kFunction)
    return "function";
  switch (v.j().type()) {
    case Json::value_t::string:
      return "str";
    case Json::value_t::array: {
      static const char* const kNames[] = {"list",       "tuple",     "generator",  "list_reverseiterator",
                                           "dict_items", "dict_keys", "dict_values"};
      return kNames[static_cast<int>(v.shape)];
    }
    case Json::value_t::object:
      return "dict";
    case Json::value_t::boolean:
      return "bool";
    case Json::value_t::number_float:
      return "float";
    case Json::value_t::null:
      return "NoneType";
    default:
      return "int";
  }
}

bool truthy(const Value& v) {
  if (v.kind != Value::Kind::kJson || v.lazy())
    return v.defined();  // a generator is true even when it yields nothing
  const Json& j = v.j();
  switch (j.type()) {
    case Json::value_t::null:
      return false;
    case Json::value_t::boolean:
      return j.get<bool>();
    case Json::value_t::number_float:
      return j.get<double>() != 0.0;
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return j.get<int64_t>() != 0;
    case Json::value_t::string:
      return !j.get_ref<const std::string&>().empty();
    default:
      return !j.empty();
  }
}

bool py_equal(const Value& a, const Value& b) {
  if (a.is_json() && b.is_json()) {
    if (a.j().is_array() && b.j().is_array() &&
        (a.lazy() || b.lazy() || a.shape != b.shape || (a.pairs != b.pairs && !a.j().empty() && !b.j().empty())))
      return false;  // a tuple is never equal to a list, nor a generator to anything
    return json_equal(a.j(), b.j());
  }
  if (a.kind != b.kind)
    return false;
  return a.kind == Value::Kind::kUndefined || a.ns == b.ns || a.loop == b.loop;
}

bool py_contains(const Value& container, const Value& item, int line) {
  if (!container.defined())
    return false;
  const Json* c = container.is_json() ? &container.j() : nullptr;
  if (c != nullptr && c->is_string()) {
    if (!item.is_json() || !item.j().is_string())
      fail(line, "'in <string>' requires string as left operand, not " + type_name(item));
    return c->get_ref<const std::string&>().find(item.j().get_ref<const std::string&>()) != std::string::npos;
  }
  if (c != nullptr && c->is_array()) {
    for (const Json& e : *c)
      if (item.is_json() && json_equal(item.j(), e))
        return true;
    return false;
  }
  if (c != nullptr && c->is_object()) {
    if (item.is_json() && item.j().is_structured())
      fail(line, "unhashable type: '" + type_name(item) + "'");
    return item.is_json() && item.j().is_string() && c->contains(item.j().get<std::string>());
  }
  fail(line, "argument of type '" + type_name(container) + "' is not iterable");
}

bool py_compare(const Value& a, const std::string& op, const Value& b, int line) {
  if (op == "==" || op == "!=")
    return py_equal(a, b) == (op == "==");
  if (op == "in" || op == "notin")
    return py_contains(b, a, line) == (op == "in");
  for (const Value* v : {&a, &b}) {
    if (!v->defined())
      fail(line, v->hint);
    if (!v->is_json() || v->lazy() || v->view())
      fail(line, "'" + op + "' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
  }
  if (a.j().is_array() && b.j().is_array() && a.shape != b.shape)
    fail(line, "'" + op + "' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
  const int c = order(a.j(), b.j(), op, line);
  return op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0;
}

Json to_json(const Value& v, int line) {
  if (v.lazy() || v.view())
    fail(line, "a " + type_name(v) + " cannot be stored in a list or dict here; add '| list'");
  if (!v.is_json())
    fail(line, v.defined() ? "a " + type_name(v) + " object cannot be stored in a list or dict"
                           : "an undefined value cannot be stored in a list or dict (" + v.hint + ")");
  return v.j();
}

std::vector<Value> iterate(const Value& v, int line) {
  std::vector<Value> out;
  if (!v.defined())
    return out;
  const Json* j = v.is_json() ? &v.j() : nullptr;
  if (j != nullptr && j->is_array()) {
    out.reserve(j->size());
    for (const Json& e : *j)
      out.push_back(v.element(e));
  } else if (j != nullptr && j->is_object()) {
    for (const auto& [k, e] : j->items())
      out.push_back(Value::own(Json(k)));
  } else if (j != nullptr && j->is_string()) {
    for (char32_t c : utf8_decode(j->get_ref<const std::string&>()))
      out.push_back(Value::own(Json(utf8_encode(std::u32string(1, c)))));
  } else {
    fail(line, "'" + type_name(v) + "' object is not iterable");
  }
  return out;
}

Value get_attr(const Value& obj, const std::string& name, int line) {
  if (!obj.defined())
    fail(line, obj.hint);
  if (obj.kind == Value::Kind::kNamespace) {
    if (const Value* v = obj.ns->find(name))
      return *v;
  } else if (obj.kind == Value::Kind::kLoop) {
    return loop_attr(obj, name);
  } else if (obj.j().is_object()) {
    const auto it = obj.j().find(name);
    if (it != obj.j().end())
      return obj.child(*it);
  }
  return Value::undefined("'" + type_name(obj) + " object' has no attribute '" + name + "'");
}

Value get_item(const Value& obj, const Value& key, int line) {
  if (!obj.defined())
    fail(line, obj.hint);
  const bool str_key = key.is_json() && key.j().is_string();
  if (!obj.is_json())
    return str_key ? get_attr(obj, key.j().get<std::string>(), line) : Value::undefined("no such item");
  const Json& j = obj.j();
  if (obj.lazy() || obj.view())
    return Value::undefined("'" + type_name(obj) + "' object is not subscriptable");
  if (key.is_json() && is_intlike(key.j()) && (j.is_array() || j.is_string())) {
    int64_t i = as_int(key.j());
    if (j.is_array()) {
      const auto n = static_cast<int64_t>(j.size());
      i = i < 0 ? i + n : i;
      if (i >= 0 && i < n)
        return obj.element(j[static_cast<size_t>(i)]);
    } else {
      const std::u32string u = utf8_decode(j.get_ref<const std::string&>());
      const auto n = static_cast<int64_t>(u.size());
      i = i < 0 ? i + n : i;
      if (i >= 0 && i < n)
        return Value::own(Json(utf8_encode(u.substr(static_cast<size_t>(i), 1))));
    }
    return Value::undefined(type_name(obj) + " index " + std::to_string(as_int(key.j())) + " out of range");
  }
  if (str_key)
    return get_attr(obj, key.j().get<std::string>(), line);
  return Value::undefined("'" + type_name(obj) + " object' has no item " + py_str(key));
}

namespace {

// Python's int arithmetic on 64-bit integers (Error on overflow) and float arithmetic.
Value number_op(const std::string& op, const Json& x, const Json& y, int line) {
  if (op == "/") {
    if (as_double(y) == 0)
      fail(line, "division by zero");
    return Value::own(Json(as_double(x) / as_double(y)));
  }
  if ((op == "//" || op == "%") && as_double(y) == 0)
    fail(line, "integer division or modulo by zero");
  if (op == "**" && as_double(x) == 0 && as_double(y) < 0)
    fail(line, "0.0 cannot be raised to a negative power");
  if (is_intlike(x) && is_intlike(y) && !(op == "**" && as_int(y) < 0)) {
    const int64_t p = as_int(x), q = as_int(y);
    int64_t r = 0;
    bool overflow = false;
    if (op == "+") {
      overflow = __builtin_add_overflow(p, q, &r);
    } else if (op == "-") {
      overflow = __builtin_sub_overflow(p, q, &r);
    } else if (op == "*") {
      overflow = __builtin_mul_overflow(p, q, &r);
    } else if (op == "//" || op == "%") {
      overflow = p == INT64_MIN && q == -1;
      const int64_t rem = overflow ? 0 : p % q;
      const bool adjust = rem != 0 && ((rem < 0) != (q < 0));
      r = op == "%" ? (adjust ? rem + q : rem) : (overflow ? 0 : p / q - (adjust ? 1 : 0));
    } else {  // **, by squaring
      r = 1;
      for (int64_t base = p, e = q; e > 0 && !overflow; e >>= 1) {
        if (e & 1)
          overflow = __builtin_mul_overflow(r, base, &r);
        if (e > 1 && !overflow)
          overflow = __builtin_mul_overflow(base, base, &base);
      }
    }
    if (overflow)
      fail(line, "integer overflow in '" + op + "' (chat template integers are 64-bit)");
    return Value::own(Json(r));
  }
  const double p = as_double(x), q = as_double(y);
  double r = op == "+" ? p + q : op == "-" ? p - q : op == "*" ? p * q : op == "**" ? std::pow(p, q) : 0;
  if (op == "//" || op == "%") {
    double m = std::fmod(p, q);
    if (m != 0 && ((m < 0) != (q < 0)))
      m += q;
    else if (m == 0)
      m = std::copysign(0.0, q);  // Python: the sign of the divisor
    r = op == "%" ? m : std::round((p - m) / q);
  }
  return Value::own(Json(r));
}

Value repeat(const Json& seq, int64_t n, int line) {
  n = std::max<int64_t>(n, 0);
  const size_t unit = seq.is_string() ? seq.get_ref<const std::string&>().size() : seq.size();
  if (unit > 0 && static_cast<uint64_t>(n) > (size_t{1} << 26) / unit)
    fail(line, "sequence repetition result too large");
  Json out = seq.is_string() ? Json("") : Json::array();
  for (int64_t i = 0; i < n; ++i) {
    if (seq.is_string())
      out.get_ref<std::string&>() += seq.get_ref<const std::string&>();
    else
      for (const Json& e : seq)
        out.push_back(e);
  }
  return Value::own(std::move(out));
}

}  // namespace

Value arith(const std::string& op, const Value& a, const Value& b, int line) {
  if (op == "~")
    return Value::own(Json(py_str(a, line) + py_str(b, line)));
  for (const Value* v : {&a, &b})
    if (!v->defined())
      fail(line, v->hint);
  const bool seqs_ok = a.is_json() && b.is_json() && !a.lazy() && !b.lazy() && !a.view() && !b.view() &&
                       (!a.j().is_array() || !b.j().is_array() || a.shape == b.shape);
  if (seqs_ok) {
    const Json &x = a.j(), &y = b.j();
    if (is_number(x) && is_number(y))
      return number_op(op, x, y, line);
    if (op == "+" && x.is_string() && y.is_string())
      return Value::own(Json(x.get<std::string>() + y.get<std::string>()));
    if (op == "+" && x.is_array() && y.is_array()) {
      Json r = x;
      r.insert(r.end(), y.begin(), y.end());
      return Value::own(std::move(r)).shaped(a.shape, (a.pairs || x.empty()) && (b.pairs || y.empty()));
    }
    if (op == "*" && is_intlike(y) && (x.is_string() || x.is_array()))
      return repeat(x, as_int(y), line).shaped(a.shape, a.pairs);
    if (op == "*" && is_intlike(x) && (y.is_string() || y.is_array()))
      return repeat(y, as_int(x), line).shaped(b.shape, b.pairs);
    if (op == "%" && x.is_string()) {
      if (y.is_array() || (y.is_object() && x.get_ref<const std::string&>().find("%(") != std::string::npos))
        fail(line, "string formatting with '%' and a tuple, list or mapping is not supported");
      return Value::own(Json(py_format(x.get<std::string>(), {b}, line)));
    }
  }
  fail(line, "unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
}

std::vector<size_t> slice_indices(int64_t n, const std::optional<int64_t> bounds[3], int line) {
  const int64_t step = bounds[2].value_or(1);
  if (step == 0)
    fail(line, "slice step cannot be zero");
  auto adjust = [&](const std::optional<int64_t>& b, int64_t dflt) {
    if (!b)
      return dflt;
    int64_t v = *b < 0 ? *b + n : *b;
    if (v < 0)
      return step < 0 ? int64_t{-1} : int64_t{0};
    return v >= n ? (step < 0 ? n - 1 : n) : v;
  };
  const int64_t start = adjust(bounds[0], step < 0 ? n - 1 : 0), stop = adjust(bounds[1], step < 0 ? -1 : n);
  std::vector<size_t> out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
    out.push_back(static_cast<size_t>(i));
  return out;
}

}  // namespace updraft::chat::detail
