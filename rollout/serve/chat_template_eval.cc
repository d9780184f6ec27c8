// Chat templates: rendering a parsed template (chat_template.h).
#include <unordered_map>

#include "kernels/core/error.h"
#include "rollout/serve/chat_template_internal.h"

namespace updraft::chat::detail {

namespace {

Value boolean(bool b) {
  return Value::own(Json(b));
}

class Renderer {
 public:
  explicit Renderer(const nlohmann::json& vars);
  std::string render(const std::vector<Node>& body);

 private:
  enum class Flow : uint8_t { kNormal, kBreak, kContinue };
  Flow run(const std::vector<Node>& body, std::string& out);
  Flow run_scoped(const std::vector<Node>& body, std::string& out);  // in a scope of its own
  Flow run_for(const Node& n, std::string& out);
  void run_set(const Node& n);
  void bind(const std::vector<std::string>& targets, const Value& item, int line);
  Value lookup(const std::string& name) const;
  Value eval(const Expr& e);
  Value eval_more(const Expr& e);
  Value eval_call(const Expr& e);
  Value eval_slice(const Expr& e);
  Value eval_unary(const Expr& e);
  Args eval_args(const Expr& e);

  std::shared_ptr<const Json> vars_;
  std::vector<std::unordered_map<std::string, Value>> scopes_;
};

Renderer::Renderer(const nlohmann::json& vars)
    : vars_(std::make_shared<const Json>(vars.is_null() ? Json::object() : Json(vars))) {
  if (!vars_->is_object())
    UPD_FAIL() << "chat template: render variables must be a JSON object, not " << vars.type_name();
  scopes_.emplace_back();
  for (const auto& [k, v] : vars_->items())
    scopes_[0][k] = Value::borrow(vars_, v);
}

std::string Renderer::render(const std::vector<Node>& body) {
  std::string out;
  run(body, out);
  return out;
}

Renderer::Flow Renderer::run(const std::vector<Node>& body, std::string& out) {
  for (const Node& n : body) {
    switch (n.kind) {
      case Node::Kind::kText:
        out += n.text;
        break;
      case Node::Kind::kOutput:
        out += py_str(eval(*n.exprs[0]), n.line);
        break;
      case Node::Kind::kIf: {
        size_t i = 0;
        while (i < n.exprs.size() && !truthy(eval(*n.exprs[i])))
          ++i;
        if (i < n.bodies.size())
          if (const Flow f = run(n.bodies[i], out); f != Flow::kNormal)
            return f;
        break;
      }
      case Node::Kind::kFor:  // a break or continue in a for's else body belongs to the enclosing loop
        if (const Flow f = run_for(n, out); f != Flow::kNormal)
          return f;
        break;
      case Node::Kind::kSet:
        run_set(n);
        break;
      case Node::Kind::kSetBlock: {
        std::string text;
        if (const Flow f = run_scoped(n.bodies[0], text); f != Flow::kNormal)
          return f;
        scopes_.back()[n.text] = Value::own(Json(std::move(text)));
        break;
      }
      case Node::Kind::kGeneration:
        run_scoped(n.bodies[0], out);
        break;
      case Node::Kind::kUndefine:
        for (const std::string& name : n.targets)
          scopes_.back()[name] = Value::undefined("'" + name + "' is undefined");
        break;
      case Node::Kind::kBreak:
        return Flow::kBreak;
      case Node::Kind::kContinue:
        return Flow::kContinue;
    }
  }
  return Flow::kNormal;
}

Renderer::Flow Renderer::run_scoped(const std::vector<Node>& body, std::string& out) {
  scopes_.emplace_back();
  const Flow f = run(body, out);
  scopes_.pop_back();
  return f;
}

void Renderer::bind(const std::vector<std::string>& targets, const Value& item, int line) {
  auto& scope = scopes_.back();
  if (targets.size() == 1) {
    scope[targets[0]] = item;
    return;
  }
  if (!item.is_json() || !item.j().is_array())
    fail(line, "cannot unpack a " + type_name(item) + " into " + std::to_string(targets.size()) + " loop variables");
  if (item.j().size() != targets.size())
    fail(line, (item.j().size() > targets.size() ? "too many" : "not enough") +
                   std::string(" values to unpack (expected ") + std::to_string(targets.size()) + ", got " +
                   std::to_string(item.j().size()) + ")");
  for (size_t i = 0; i < targets.size(); ++i)
    scope[targets[i]] = item.child(item.j()[i]);
}

Renderer::Flow Renderer::run_for(const Node& n, std::string& out) {
  std::vector<Value> all = iterate(eval(*n.exprs[0]), n.line);
  if (n.exprs[1] != nullptr) {  // {% for x in xs if cond %}: loop.* counts the kept items only
    std::vector<Value> kept;
    for (Value& v : all) {
      scopes_.emplace_back();
      bind(n.targets, v, n.line);
      const bool keep = truthy(eval(*n.exprs[1]));
      scopes_.pop_back();
      if (keep)
        kept.push_back(std::move(v));
    }
    all = std::move(kept);
  }
  const auto items = std::make_shared<const std::vector<Value>>(std::move(all));
  bool completed = false;  // jinja2 runs the else body unless some iteration reached the end of the body
  for (size_t i = 0; i < items->size(); ++i) {
    scopes_.emplace_back();  // a set inside the body lives for this iteration only, as in jinja2
    bind(n.targets, (*items)[i], n.line);
    Value loop;
    loop.kind = Value::Kind::kLoop;
    loop.loop = std::make_shared<const LoopInfo>(LoopInfo{i, items});
    scopes_.back()["loop"] = std::move(loop);
    const Flow f = run(n.bodies[0], out);
    scopes_.pop_back();
    completed = completed || f == Flow::kNormal;
    if (f == Flow::kBreak)
      break;
  }
  return completed ? Flow::kNormal : run_scoped(n.bodies[1], out);
}

void Renderer::run_set(const Node& n) {
  Value v = eval(*n.exprs[0]);
  if (n.attr.empty()) {
    scopes_.back()[n.text] = std::move(v);
    return;
  }
  const Value target = lookup(n.text);
  if (target.kind != Value::Kind::kNamespace)
    fail(n.line, "cannot assign attribute '" + n.attr + "' on '" + n.text + "', a " + type_name(target) +
                     " (only namespace() objects take attribute assignment)");
  if (Value* slot = target.ns->find(n.attr))
    *slot = std::move(v);
  else
    target.ns->attrs.emplace_back(n.attr, std::move(v));
}

Value Renderer::lookup(const std::string& name) const {
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
    const auto found = it->find(name);
    if (found != it->end())
      return found->second;
  }
  if (is_global(name)) {
    Value f;
    f.kind = Value::Kind::kFunction;
    f.hint = name;
    return f;
  }
  return Value::undefined("'" + name + "' is undefined");
}

Value Renderer::eval(const Expr& e) {
  const auto& a = e.args;
  switch (e.kind) {
    case Expr::Kind::kLiteral:
      return Value::borrow(e.literal, *e.literal);
    case Expr::Kind::kName:
      return lookup(e.name);
    case Expr::Kind::kAttr:
      return get_attr(eval(*a[0]), e.name, e.line);
    case Expr::Kind::kItem:
      return get_item(eval(*a[0]), eval(*a[1]), e.line);
    case Expr::Kind::kFilter: {
      const Value v = eval(*a[0]);
      return apply_filter(e.name, v, eval_args(e), e.line);
    }
    case Expr::Kind::kTest: {
      const Value v = eval(*a[0]);
      return boolean(apply_test(e.name, v, eval_args(e), e.line) != e.negated);
    }
    case Expr::Kind::kNot:
      return boolean(!truthy(eval(*a[0])));
    case Expr::Kind::kAnd: {
      Value l = eval(*a[0]);
      return truthy(l) ? eval(*a[1]) : l;
    }
    case Expr::Kind::kOr: {
      Value l = eval(*a[0]);
      return truthy(l) ? l : eval(*a[1]);
    }
    case Expr::Kind::kBinary: {
      const Value l = eval(*a[0]);
      return arith(e.name, l, eval(*a[1]), e.line);
    }
    case Expr::Kind::kCond:
      if (truthy(eval(*a[1])))
        return eval(*a[0]);
      return a[2] != nullptr ? eval(*a[2])
                             : Value::undefined("the inline if-expression evaluated to false and has no else");
    default:
      return eval_more(e);
  }
}

Value Renderer::eval_more(const Expr& e) {
  const auto& a = e.args;
  switch (e.kind) {
    case Expr::Kind::kList:
    case Expr::Kind::kTuple: {
      Json out = Json::array();
      for (const ExprPtr& x : a)
        out.push_back(to_json(eval(*x), e.line));
      return Value::own(std::move(out))
          .shaped(e.kind == Expr::Kind::kTuple ? Value::Shape::kTuple : Value::Shape::kList, false);
    }
    case Expr::Kind::kDict: {
      Json out = Json::object();
      for (size_t i = 0; i + 1 < a.size(); i += 2) {
        const Value k = eval(*a[i]);
        if (!k.is_json() || !k.j().is_string())
          fail(e.line, "dict keys must be strings, not " + type_name(k));
        out[k.j().get<std::string>()] = to_json(eval(*a[i + 1]), e.line);
      }
      return Value::own(std::move(out));
    }
    case Expr::Kind::kCompare: {
      Value l = eval(*a[0]);
      for (size_t i = 0; i < e.ops.size(); ++i) {
        Value r = eval(*a[i + 1]);
        if (!py_compare(l, e.ops[i], r, e.line))
          return boolean(false);
        l = std::move(r);
      }
      return boolean(true);
    }
    case Expr::Kind::kCall:
      return eval_call(e);
    case Expr::Kind::kSlice:
      return eval_slice(e);
    case Expr::Kind::kUnary:
      return eval_unary(e);
    default:
      fail(e.line, "internal error: unexpected expression");
  }
}

Value Renderer::eval_unary(const Expr& e) {
  const Value v = eval(*e.args[0]);
  if (!v.defined())
    fail(e.line, v.hint);
  if (!v.is_json() || !is_number(v.j()))
    fail(e.line, "bad operand type for unary " + e.name + ": '" + type_name(v) + "'");
  const Json& j = v.j();
  if (e.name == "+")
    return is_intlike(j) ? Value::own(Json(as_int(j))) : v;
  if (!is_intlike(j))
    return Value::own(Json(-j.get<double>()));
  if (as_int(j) == INT64_MIN)
    fail(e.line, "integer overflow in unary - (chat template integers are 64-bit)");
  return Value::own(Json(-as_int(j)));
}

Args Renderer::eval_args(const Expr& e) {
  Args out;
  for (size_t i = 1; i < e.args.size(); ++i)
    out.pos.push_back(eval(*e.args[i]));
  for (const auto& [k, x] : e.kwargs)
    out.kw.emplace_back(k, eval(*x));
  return out;
}

Value Renderer::eval_slice(const Expr& e) {
  const Value obj = eval(*e.args[0]);
  if (!obj.defined())
    fail(e.line, obj.hint);
  if (obj.lazy() || obj.view())
    fail(e.line, "'" + type_name(obj) + "' object is not subscriptable");
  std::optional<int64_t> bounds[3];
  for (int k = 0; k < 3; ++k) {
    if (e.args[k + 1] == nullptr)
      continue;
    const Value b = eval(*e.args[k + 1]);
    if (b.is_json() && b.j().is_null())
      continue;
    if (!b.is_json() || !is_intlike(b.j()))
      fail(e.line, "slice indices must be integers or None, not " + type_name(b));
    bounds[k] = as_int(b.j());
  }
  if (obj.is_json() && obj.j().is_array()) {
    Json out = Json::array();
    for (size_t i : slice_indices(static_cast<int64_t>(obj.j().size()), bounds, e.line))
      out.push_back(obj.j()[i]);
    return Value::own(std::move(out)).shaped(obj.shape, obj.pairs);
  }
  if (obj.is_json() && obj.j().is_string()) {
    const std::u32string u = utf8_decode(obj.j().get_ref<const std::string&>());
    std::u32string out;
    for (size_t i : slice_indices(static_cast<int64_t>(u.size()), bounds, e.line))
      out += u[i];
    return Value::own(Json(utf8_encode(out)));
  }
  fail(e.line, "'" + type_name(obj) + "' object is not subscriptable");
}

Value Renderer::eval_call(const Expr& e) {
  const Expr& callee = *e.args[0];
  const Args args = eval_args(e);
  if (callee.kind == Expr::Kind::kAttr)
    return call_method(eval(*callee.args[0]), callee.name, args, e.line);
  const Value f = eval(callee);
  if (f.kind == Value::Kind::kFunction)
    return call_global(f.hint, args, e.line);
  if (!f.defined())
    fail(e.line, f.hint);
  fail(e.line, "'" + type_name(f) + "' object is not callable");
}

}  // namespace

std::string render_nodes(const std::vector<Node>& body, const nlohmann::json& vars) {
  Renderer r(vars);
  return r.render(body);
}

}  // namespace updraft::chat::detail

namespace updraft::chat {

std::string Template::render(const nlohmann::json& vars) const {
  return detail::render_nodes(*body_, vars);
}

}  // namespace updraft::chat
