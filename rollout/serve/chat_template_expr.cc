// Chat templates: the parser's expressions, with jinja2's precedence (chat_template.h).
#include <charconv>
#include <cstdlib>
#include <set>

#include "rollout/serve/chat_template_internal.h"

namespace updraft::chat::detail {

ExprPtr Parser::tuple(bool with_condexpr) {
  ExprPtr first = with_condexpr ? expr() : or_expr();
  if (!is_op(","))
    return first;
  ExprPtr t = make(Expr::Kind::kTuple, first->line);
  t->args.push_back(std::move(first));
  while (skip_op(",")) {
    const Token::Type ty = cur().type;
    if (ty == Token::kVarEnd || ty == Token::kBlockEnd || is_op(")") || is_name("if") || is_name("recursive"))
      break;
    t->args.push_back(with_condexpr ? expr() : or_expr());
  }
  return t;
}

// a if c else b (else optional), as jinja2's parse_condexpr.
ExprPtr Parser::expr() {
  Depth guard(*this);
  ExprPtr e = or_expr();
  while (is_name("if")) {
    guard.more();
    ExprPtr c = make(Expr::Kind::kCond, cur().line);
    take();
    c->args.push_back(std::move(e));
    c->args.push_back(or_expr());
    c->args.push_back(skip_name("else") ? expr() : nullptr);
    e = std::move(c);
  }
  return e;
}

ExprPtr Parser::or_expr() {
  Depth guard(*this, false);
  ExprPtr e = and_expr();
  while (is_name("or")) {
    guard.more();
    ExprPtr b = make(Expr::Kind::kOr, cur().line);
    take();
    b->args.push_back(std::move(e));
    b->args.push_back(and_expr());
    e = std::move(b);
  }
  return e;
}

ExprPtr Parser::and_expr() {
  Depth guard(*this, false);
  ExprPtr e = not_expr();
  while (is_name("and")) {
    guard.more();
    ExprPtr b = make(Expr::Kind::kAnd, cur().line);
    take();
    b->args.push_back(std::move(e));
    b->args.push_back(not_expr());
    e = std::move(b);
  }
  return e;
}

ExprPtr Parser::not_expr() {
  if (!is_name("not"))
    return compare();
  Depth guard(*this);
  ExprPtr n = make(Expr::Kind::kNot, cur().line);
  take();
  n->args.push_back(not_expr());
  return n;
}

ExprPtr Parser::compare() {
  static const std::set<std::string> kOps = {"==", "!=", "<", ">", "<=", ">="};
  ExprPtr first = binary(0);
  ExprPtr c = make(Expr::Kind::kCompare, first->line);
  while (true) {
    if (cur().type == Token::kOp && kOps.count(cur().text) > 0) {
      c->ops.push_back(cur().text);
      take();
    } else if (is_name("in")) {
      c->ops.push_back("in");
      take();
    } else if (is_name("not") && ahead(1).type == Token::kName && ahead(1).text == "in") {
      c->ops.push_back("notin");
      take();
      take();
    } else {
      break;
    }
    c->args.push_back(binary(0));
  }
  if (c->ops.empty())
    return first;
  c->args.insert(c->args.begin(), std::move(first));
  return c;
}

// Level 0: + -; 1: ~; 2: * / // %; 3: **; then unary operands (jinja2's math1, concat, math2, pow).
ExprPtr Parser::binary(int level) {
  static const std::vector<std::set<std::string>> kLevels = {{"+", "-"}, {"~"}, {"*", "/", "//", "%"}, {"**"}};
  if (level == static_cast<int>(kLevels.size()))
    return unary(true);
  Depth guard(*this, false);
  ExprPtr e = binary(level + 1);
  while (cur().type == Token::kOp && kLevels[static_cast<size_t>(level)].count(cur().text) > 0) {
    guard.more();
    ExprPtr b = make(Expr::Kind::kBinary, cur().line);
    b->name = cur().text;
    take();
    b->args.push_back(std::move(e));
    b->args.push_back(binary(level + 1));
    e = std::move(b);
  }
  return e;
}

// "-x | f" filters -x, as in jinja2: a unary operand takes postfixes but no filters.
ExprPtr Parser::unary(bool with_filter) {
  Depth guard(*this);
  ExprPtr e;
  if (is_op("-") || is_op("+")) {
    e = make(Expr::Kind::kUnary, cur().line);
    e->name = cur().text;
    take();
    e->args.push_back(unary(false));
  } else {
    e = primary();
  }
  e = postfix(std::move(e));
  return with_filter ? filters(std::move(e)) : std::move(e);
}

ExprPtr Parser::primary() {
  const Token tk = cur();
  if (tk.type == Token::kName) {
    take();
    if (tk.text == "true" || tk.text == "True" || tk.text == "false" || tk.text == "False")
      return literal(Json(tk.text == "true" || tk.text == "True"), tk.line);
    if (tk.text == "none" || tk.text == "None")
      return literal(Json(), tk.line);
    ExprPtr e = make(Expr::Kind::kName, tk.line);
    e->name = tk.text;
    return e;
  }
  if (tk.type == Token::kString) {
    std::string s;
    for (; cur().type == Token::kString; take())
      s += cur().text;
    return literal(Json(std::move(s)), tk.line);
  }
  if (tk.type == Token::kInt) {
    int64_t v = 0;
    const auto res = std::from_chars(tk.text.data(), tk.text.data() + tk.text.size(), v);
    if (res.ec != std::errc())
      error("integer literal " + tk.text + " does not fit 64 bits");
    take();
    return literal(Json(v), tk.line);
  }
  if (tk.type == Token::kFloat) {
    take();
    return literal(Json(std::strtod(tk.text.c_str(), nullptr)), tk.line);
  }
  const bool paren = is_op("("), list = is_op("["), dict = is_op("{");
  if (!paren && !list && !dict)
    error("unexpected " + describe());
  take();
  const char* close = paren ? ")" : list ? "]" : "}";
  ExprPtr e = make(dict ? Expr::Kind::kDict : paren ? Expr::Kind::kTuple : Expr::Kind::kList, tk.line);
  bool tuple = !paren;
  while (!is_op(close)) {
    e->args.push_back(expr());
    if (dict) {
      expect_op(":");
      e->args.push_back(expr());
    }
    if (!skip_op(","))
      break;
    tuple = true;
  }
  expect_op(close);
  if (paren && !tuple && e->args.size() == 1)
    return std::move(e->args[0]);  // (x) is x; (x,) and () are tuples
  return e;
}

ExprPtr Parser::postfix(ExprPtr e) {
  Depth guard(*this, false);
  for (;; guard.more()) {
    if (is_op(".")) {
      take();
      if (cur().type == Token::kInt) {  // a.0 is a[0]
        ExprPtr item = make(Expr::Kind::kItem, cur().line);
        item->args.push_back(std::move(e));
        item->args.push_back(literal(Json(std::stoll(cur().text)), cur().line));
        take();
        e = std::move(item);
        continue;
      }
      ExprPtr attr = make(Expr::Kind::kAttr, cur().line);
      attr->name = expect_name("an attribute name after '.'");
      attr->args.push_back(std::move(e));
      e = std::move(attr);
    } else if (is_op("[")) {
      take();
      e = subscript(std::move(e));
    } else if (is_op("(")) {
      e = call(std::move(e));
    } else {
      return e;
    }
  }
}

ExprPtr Parser::subscript(ExprPtr e) {
  const int line = cur().line;
  ExprPtr bounds[3];
  bool slice = false;
  if (!is_op(":")) {
    if (is_op("]"))
      error("empty subscript '[]'");
    bounds[0] = expr();
  }
  if (skip_op(":")) {
    slice = true;
    if (!is_op("]") && !is_op(":"))
      bounds[1] = expr();
    if (skip_op(":") && !is_op("]"))
      bounds[2] = expr();
  }
  if (is_op(","))
    error("subscripts with several indices are not supported");
  expect_op("]");
  ExprPtr out = make(slice ? Expr::Kind::kSlice : Expr::Kind::kItem, line);
  out->args.push_back(std::move(e));
  for (int k = 0; k < (slice ? 3 : 1); ++k)
    out->args.push_back(std::move(bounds[k]));
  return out;
}

ExprPtr Parser::call(ExprPtr callee) {
  ExprPtr c = make(Expr::Kind::kCall, cur().line);
  c->args.push_back(std::move(callee));
  call_args(*c);
  return c;
}

void Parser::call_args(Expr& e) {
  expect_op("(");
  while (!is_op(")")) {
    if (is_op("*") || is_op("**"))
      error("*args and **kwargs in calls are not supported");
    if (cur().type == Token::kName && ahead(1).type == Token::kOp && ahead(1).text == "=") {
      std::string key = cur().text;
      take();
      take();
      e.kwargs.emplace_back(std::move(key), expr());
    } else {
      if (!e.kwargs.empty())
        error("positional argument follows keyword argument");
      e.args.push_back(expr());
    }
    if (!skip_op(","))
      break;
  }
  expect_op(")");
}

// "| name(args)", "is [not] name [arg]" and calls on their results, as jinja2's parse_filter_expr.
ExprPtr Parser::filters(ExprPtr e) {
  Depth guard(*this, false);
  for (;; guard.more()) {
    if (is_op("|")) {
      take();
      ExprPtr f = make(Expr::Kind::kFilter, cur().line);
      f->name = expect_name("a filter name");
      if (!has_filter(f->name))
        fail(f->line, "unknown filter '" + f->name + "'");
      f->args.push_back(std::move(e));
      if (is_op("("))
        call_args(*f);
      e = std::move(f);
    } else if (is_name("is")) {
      e = test(std::move(e));
    } else if (is_op("(")) {
      e = call(std::move(e));
    } else {
      return e;
    }
  }
}

ExprPtr Parser::test(ExprPtr e) {
  take();  // is
  ExprPtr t = make(Expr::Kind::kTest, cur().line);
  t->negated = skip_name("not");
  t->name = expect_name("a test name");
  if (!has_test(t->name))
    fail(t->line, "unknown test '" + t->name + "'");
  t->args.push_back(std::move(e));
  const Token::Type ty = cur().type;
  if (is_op("(")) {
    call_args(*t);
  } else if ((ty == Token::kName || ty == Token::kString || ty == Token::kInt || ty == Token::kFloat || is_op("[") ||
              is_op("{")) &&
             !is_name("else") && !is_name("or") && !is_name("and")) {
    if (is_name("is"))
      error("cannot chain tests with 'is'");
    t->args.push_back(postfix(primary()));  // "x is divisibleby 3"
  }
  return t;
}

}  // namespace updraft::chat::detail
