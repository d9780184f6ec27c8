// Chat templates: the parser's statements: text, {{ }}, if, for, set, break, continue and
// generation, and the tags refused by name (chat_template.h).
#include <map>
#include <set>

#include "rollout/serve/chat_template_internal.h"

namespace updraft::chat::detail {

namespace {

std::string squote(const std::string& s) {
  return "'" + s + "'";
}

}  // namespace

std::string Parser::describe() const {
  switch (cur().type) {
    case Token::kBlockEnd:
      return "'%}'";
    case Token::kVarEnd:
      return "'}}'";
    case Token::kEof:
      return "end of template";
    case Token::kText:
      return "template text";
    case Token::kString:
      return "string '" + cur().text + "'";
    default:
      return squote(cur().text);
  }
}

std::vector<Node> Parser::body(const std::set<std::string>& until, std::string* ended, const std::string& opener,
                               int line) {
  std::vector<Node> out;
  while (true) {
    const Token& tk = cur();
    if (tk.type == Token::kText) {
      out.push_back(Node{Node::Kind::kText, tk.line, tk.text, "", {}, {}, {}});
      take();
    } else if (tk.type == Token::kVarBegin) {
      take();
      if (cur().type == Token::kVarEnd)
        error("empty expression '{{ }}'");
      Node n{Node::Kind::kOutput, tk.line, "", "", {}, {}, {}};
      n.exprs.push_back(tuple(true));
      if (cur().type != Token::kVarEnd)
        error("expected '}}', got " + describe());
      take();
      out.push_back(std::move(n));
    } else if (tk.type == Token::kBlockBegin) {
      take();
      if (cur().type == Token::kName && until.count(cur().text) > 0) {
        *ended = cur().text;
        take();
        return out;
      }
      statement(out, opener, line);
    } else if (tk.type == Token::kEof) {
      if (!until.empty())
        error("unexpected end of template: '{% " + opener + " %}' on line " + std::to_string(line) +
              " is not closed (expected '{% end" + opener + " %}')");
      return out;
    } else {
      error("unexpected " + describe());
    }
  }
}

void Parser::statement(std::vector<Node>& out, const std::string& opener, int open_line) {
  Depth guard(*this);
  const int line = cur().line;
  const std::string name = expect_name("a tag name");
  if (name == "if") {
    out.push_back(if_stmt(line));
  } else if (name == "for") {
    out.push_back(for_stmt(line));
  } else if (name == "set") {
    out.push_back(set_stmt(line));
  } else if (name == "break" || name == "continue") {
    if (loops_ == 0)
      fail(line, "'{% " + name + " %}' outside a for loop");
    block_end();
    out.push_back(Node{name == "break" ? Node::Kind::kBreak : Node::Kind::kContinue, line, "", "", {}, {}, {}});
  } else if (name == "generation") {
    block_end();
    Node n{Node::Kind::kGeneration, line, "", "", {}, {}, {}};
    std::string ended;
    const int loops = loops_;  // the block is a function of its own in jinja2: no break out of it
    loops_ = 0;
    n.bodies.push_back(body({"endgeneration"}, &ended, "generation", line));
    loops_ = loops;
    block_end();
    out.push_back(std::move(n));
  } else {
    static const std::set<std::string> kRefused = {"macro",   "call",  "filter", "include",    "import", "from",
                                                   "extends", "block", "with",   "autoescape", "do",     "trans"};
    static const std::set<std::string> kEnds = {"elif", "else", "endif", "endfor", "endset", "endgeneration"};
    if (kRefused.count(name) > 0)
      fail(line, "'{% " + name + " %}' is not supported in chat templates");
    if (kEnds.count(name) > 0)
      fail(line, "unexpected '{% " + name + " %}'" +
                     (opener.empty() ? std::string()
                                     : " inside '{% " + opener + " %}' opened on line " + std::to_string(open_line)));
    fail(line, "unknown tag " + squote(name));
  }
}

Node Parser::if_stmt(int line) {
  Node n{Node::Kind::kIf, line, "", "", {}, {}, {}};
  n.exprs.push_back(tuple(false));  // jinja2 reads no inline if-expression in an if tag
  block_end();
  while (true) {
    std::string ended;
    n.bodies.push_back(body({"elif", "else", "endif"}, &ended, "if", line));
    if (ended == "elif") {
      n.exprs.push_back(tuple(false));
      block_end();
      continue;
    }
    block_end();
    if (ended == "else") {
      n.bodies.push_back(body({"endif"}, &ended, "if", line));
      block_end();
    }
    return n;
  }
}

Node Parser::for_stmt(int line) {
  Node n{Node::Kind::kFor, line, "", "", {}, {}, {}};
  const bool paren = skip_op("(");
  do {
    n.targets.push_back(expect_name("a loop variable"));
  } while (skip_op(","));
  if (paren)
    expect_op(")");
  if (!skip_name("in"))
    error("expected 'in', got " + describe());
  n.exprs.push_back(tuple(false));
  n.exprs.push_back(skip_name("if") ? expr() : nullptr);
  if (is_name("recursive"))
    error("recursive for loops are not supported");
  block_end();
  std::string ended;
  ++loops_;
  n.bodies.push_back(body({"else", "endfor"}, &ended, "for", line));
  --loops_;
  block_end();
  n.bodies.emplace_back();
  if (ended == "else") {
    n.bodies.back() = body({"endfor"}, &ended, "for", line);
    block_end();
  }
  return n;
}

Node Parser::set_stmt(int line) {
  Node n{Node::Kind::kSet, line, "", "", {}, {}, {}};
  n.text = expect_name("a variable name");
  if (skip_op("."))
    n.attr = expect_name("an attribute name");
  if (is_op(","))
    error("'{% set a, b = ... %}' (assignment to several names) is not supported");
  if (skip_op("=")) {
    n.exprs.push_back(tuple(true));
    block_end();
    return n;
  }
  if (!n.attr.empty() || is_op("|"))
    error("expected '=', got " + describe());
  block_end();
  n.kind = Node::Kind::kSetBlock;
  std::string ended;
  n.bodies.push_back(body({"endset"}, &ended, "set", line));
  block_end();
  return n;
}

namespace {

// jinja2's static scoping (jinja2/idtracking.py): in each scope, a name is a parameter (loop
// variables), resolved from the render variables when the scope starts, an alias of the
// enclosing scope's variable, or undefined until assigned. Only the last differs from looking
// names up outward at run time, so only those names are recorded (kUndefine).
class Symbols {
 public:
  explicit Symbols(const Symbols* parent) : parent_(parent) {}
  enum class Load : uint8_t { kParam, kResolve, kAlias, kUndefined };

  bool find_ref(const std::string& name) const {
    return refs_.count(name) > 0 || (parent_ != nullptr && parent_->find_ref(name));
  }
  void load(const std::string& name) {
    if (!find_ref(name))
      refs_[name] = Load::kResolve;
  }
  void store(const std::string& name) {
    stores_.insert(name);
    if (refs_.count(name) == 0)
      refs_[name] = parent_ != nullptr && parent_->find_ref(name) ? Load::kAlias : Load::kUndefined;
  }
  void param(const std::string& name) {
    stores_.insert(name);
    refs_[name] = Load::kParam;
  }
  std::vector<std::string> undefined() const {
    std::vector<std::string> out;
    for (const auto& [name, load] : refs_)
      if (load == Load::kUndefined)
        out.push_back(name);
    return out;
  }
  void visit(const Expr& e) {
    if (e.kind == Expr::Kind::kName)
      load(e.name);
    for (const ExprPtr& a : e.args)
      if (a != nullptr)
        visit(*a);
    for (const auto& kw : e.kwargs)
      visit(*kw.second);
  }
  void visit(const Node& n);
  void visit_if(const Node& n, size_t branch);

 private:
  // A name first assigned inside an if branch starts as the enclosing value or a render variable.
  void branch_update(const std::vector<Symbols>& branches) {
    std::set<std::string> stored;
    for (const Symbols& b : branches)
      for (const std::string& name : b.stores_)
        if (stores_.count(name) == 0)
          stored.insert(name);
    for (const Symbols& b : branches) {
      for (const auto& [name, load] : b.refs_)
        refs_[name] = load;
      stores_.insert(b.stores_.begin(), b.stores_.end());
    }
    for (const std::string& name : stored)
      refs_[name] = parent_ != nullptr && parent_->find_ref(name) ? Load::kAlias : Load::kResolve;
  }

  const Symbols* parent_;
  std::map<std::string, Load> refs_;
  std::set<std::string> stores_;
};

void Symbols::visit(const Node& n) {
  switch (n.kind) {
    case Node::Kind::kOutput:
    case Node::Kind::kFor:  // only the iterable belongs to this scope
      visit(*n.exprs[0]);
      break;
    case Node::Kind::kSet:
      visit(*n.exprs[0]);
      if (n.attr.empty())
        store(n.text);
      else
        load(n.text);
      break;
    case Node::Kind::kSetBlock:
      store(n.text);
      break;
    case Node::Kind::kIf:
      visit_if(n, 0);
      break;
    default:
      break;
  }
}

// Branch `first` of an if chain as jinja2 sees it: If(test, body, elif_=[If, ...], else_).
void Symbols::visit_if(const Node& n, size_t first) {
  visit(*n.exprs[first]);
  std::vector<Symbols> branches(3, *this);
  for (const Node& c : n.bodies[first])
    branches[0].visit(c);
  if (first == 0)
    for (size_t i = 1; i < n.exprs.size(); ++i)
      branches[1].visit_if(n, i);
  if (first == 0 && n.bodies.size() > n.exprs.size())
    for (const Node& c : n.bodies.back())
      branches[2].visit(c);
  branch_update(branches);
}

// Analyses the scope `body` (its parameters given), then the scopes inside it, and records the
// names that start undefined.
void bind_scopes(std::vector<Node>& body, const Symbols* parent, const std::vector<std::string>& params);

void bind_children(std::vector<Node>& body, const Symbols& scope) {
  for (Node& n : body) {
    if (n.kind == Node::Kind::kIf) {
      for (std::vector<Node>& b : n.bodies)
        bind_children(b, scope);
    } else if (n.kind == Node::Kind::kFor) {
      std::vector<std::string> params = n.targets;
      params.push_back("loop");
      bind_scopes(n.bodies[0], &scope, params);
      bind_scopes(n.bodies[1], &scope, {});
    } else if (n.kind == Node::Kind::kSetBlock || n.kind == Node::Kind::kGeneration) {
      bind_scopes(n.bodies[0], &scope, {});
    }
  }
}

void bind_scopes(std::vector<Node>& body, const Symbols* parent, const std::vector<std::string>& params) {
  Symbols scope(parent);
  for (const std::string& p : params)
    scope.param(p);
  for (const Node& n : body)
    scope.visit(n);
  bind_children(body, scope);
  Node undefine{Node::Kind::kUndefine, 0, "", "", scope.undefined(), {}, {}};
  if (!undefine.targets.empty())
    body.insert(body.begin(), std::move(undefine));
}

}  // namespace

std::vector<Node> parse_template(const std::string& source) {
  std::vector<Node> body = Parser(lex_template(source)).run();
  bind_scopes(body, nullptr, {});
  return body;
}

}  // namespace updraft::chat::detail

namespace updraft::chat {

Template::Template(const std::string& source)
    : body_(std::make_shared<const std::vector<detail::Node>>(detail::parse_template(source))) {}

}  // namespace updraft::chat
