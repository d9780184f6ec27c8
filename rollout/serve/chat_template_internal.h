// Chat templates: the internals shared by chat_template_*.cc (the public API and its contract
// are in chat_template.h): tokens, the syntax tree, values and the helpers between the files.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "rollout/serve/chat_template.h"

namespace updraft::chat::detail {

using Json = nlohmann::ordered_json;

// ---- Tokens and syntax tree ----
struct Token {
  enum Type : uint8_t { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };
  Type type = kEof;
  std::string text;  // kText: the text; kName, kInt, kFloat, kOp: as written; kString: the decoded value
  int line = 0;
};

struct Expr {
  enum class Kind : uint8_t {
    kLiteral,
    kName,
    kList,
    kTuple,
    kDict,
    kAttr,
    kItem,
    kSlice,
    kCall,
    kFilter,
    kTest,
    kUnary,
    kNot,
    kBinary,
    kCompare,
    kAnd,
    kOr,
    kCond
  };
  Kind kind = Kind::kLiteral;
  int line = 0;
  std::shared_ptr<const Json> literal;  // kLiteral
  // kName: the name; kAttr: the attribute; kFilter/kTest: the filter or test; kUnary/kBinary: the
  // operator.
  std::string name;
  std::vector<std::string> ops;  // kCompare: the operator before each operand after the first
  // kList/kTuple: items; kDict: key, value, key, value...; kAttr/kUnary/kNot: [operand]; kItem: [obj, key];
  // kSlice: [obj, start, stop, step] (null when left out); kCall: [callee, positional args...];
  // kFilter/kTest: [subject, positional args...]; kBinary/kAnd/kOr: [lhs, rhs];
  // kCompare: operands; kCond: [then, cond, else (may be null)].
  std::vector<std::unique_ptr<Expr>> args;
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> kwargs;  // kCall, kFilter, kTest
  bool negated = false;                                               // kTest: "is not"
};
using ExprPtr = std::unique_ptr<Expr>;

struct Node {
  // kUndefine starts a scope (the template, a for body or else, a set or generation block): it
  // makes `targets` undefined there, as jinja2's static scoping does for names whose first use in
  // that scope is an assignment (parse.cc, bind_scopes).
  enum class Kind : uint8_t { kText, kOutput, kIf, kFor, kSet, kSetBlock, kBreak, kContinue, kGeneration, kUndefine };
  Kind kind = Kind::kText;
  int line = 0;
  std::string text;                  // kText: the text; kSet/kSetBlock: the variable
  std::string attr;                  // kSet: the attribute of "set ns.attr = ..." (else empty)
  std::vector<std::string> targets;  // kFor: the loop variables; kUndefine: the names
  // kOutput/kSet: [value]; kIf: one condition per branch; kFor: [iterable, filter (may be null)].
  std::vector<ExprPtr> exprs;
  // kIf: one body per condition, then the else body if any; kFor: [body, else body];
  // kSetBlock/kGeneration: [body].
  std::vector<std::vector<Node>> bodies;
};

// ---- Values ----
struct Namespace;
struct LoopInfo;

// A template value: undefined, a JSON value (borrowed from a shared immutable root, so lookups
// never copy), a namespace() object (shared and mutable), a for loop's `loop`, or a global
// function (range, namespace, raise_exception, ...: `hint` holds its name).
struct Value {
  enum class Kind : uint8_t { kUndefined, kJson, kNamespace, kLoop, kFunction };
  // The Python object a JSON array stands for, where output or behaviour tells them apart: a
  // list, a tuple, a generator (select, map, ...: always true, no len(), no index), a reverse
  // iterator, or a dict view (d.items(), d.keys(), d.values()).
  enum class Shape : uint8_t { kList, kTuple, kGenerator, kIterator, kItemsView, kKeysView, kValuesView };
  Kind kind = Kind::kUndefined;
  Shape shape = Shape::kList;
  bool pairs = false;                // an array whose elements are (key, value) tuples
  std::shared_ptr<const Json> root;  // keeps *at alive
  const Json* at = nullptr;
  std::shared_ptr<Namespace> ns;
  std::shared_ptr<const LoopInfo> loop;
  std::string hint;  // kUndefined: what was missing, for error messages; kFunction: the name

  static Value undefined(std::string why);
  static Value own(Json j);
  static Value borrow(const std::shared_ptr<const Json>& root, const Json& at);
  Value child(const Json& j) const { return borrow(root, j); }  // j must lie inside *at
  // An element of this array: a tuple where the array holds pairs.
  Value element(const Json& e) const {
    Value v = child(e);
    v.shape = pairs ? Shape::kTuple : Shape::kList;
    return v;
  }
  Value shaped(Shape s, bool p) const {
    Value v = *this;
    v.shape = s;
    v.pairs = p;
    return v;
  }
  bool defined() const { return kind != Kind::kUndefined; }
  bool is_json() const { return kind == Kind::kJson; }
  const Json& j() const { return *at; }
  bool lazy() const { return is_json() && (shape == Shape::kGenerator || shape == Shape::kIterator); }
  bool view() const { return is_json() && shape >= Shape::kItemsView; }
};

struct Namespace {
  std::vector<std::pair<std::string, Value>> attrs;
  Value* find(const std::string& name);
};

struct LoopInfo {
  size_t index0 = 0;
  std::shared_ptr<const std::vector<Value>> items;
};

struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  // Positional argument i, else keyword `name`, else nullptr.
  const Value* get(size_t i, const char* name) const;
};

// ---- Shared helpers ----
// chat_template.cc: text, str() and repr(), tojson; chat_template_lex.cc: skip_py_space;
// chat_template_methods.cc: case_map; chat_template_values.cc: type_name, truthy.
[[noreturn]] void fail(int line, const std::string& what);  // Error "chat template line N: what"
std::u32string utf8_decode(const std::string& s);
std::string utf8_encode(const std::u32string& s);
bool py_isspace(char32_t c);
size_t skip_py_space(const std::string& s, size_t pos);
// str.strip/lstrip/rstrip: Python whitespace, or the characters of `chars` when given.
std::string py_strip(const std::string& s, const std::u32string* chars, bool left, bool right);
// mode: 'u' upper, 'l' lower, 't' str.title, 'c' str.capitalize, 'j' the title filter.
std::string case_map(const std::string& s, char mode);
std::string type_name(const Value& v);                 // Python's: str, int, list, dict, NoneType, Undefined...
std::string py_str(const Value& v, int line = 0);      // str(v); Error for generators
std::string repr_value(const Value& v, int line = 0);  // repr(v), tuples and dict views included
std::string py_repr(const Json& j);                    // repr(j)
std::string float_repr(double d);
bool truthy(const Value& v);
// transformers' tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
std::string to_json_text(const Value& v, const Args& args, int line);

inline bool is_number(const Json& j) {
  return j.is_number() || j.is_boolean();
}
inline bool is_intlike(const Json& j) {
  return j.is_number_integer() || j.is_boolean();
}
inline int64_t as_int(const Json& j) {
  return j.is_boolean() ? int64_t{j.get<bool>() ? 1 : 0} : j.get<int64_t>();
}
inline double as_double(const Json& j) {
  return j.is_boolean() ? (j.get<bool>() ? 1.0 : 0.0) : j.get<double>();
}

// chat_template_values.cc: Python semantics of values.
bool py_equal(const Value& a, const Value& b);
// a op b for op in == != < > <= >= in notin; Error when Python would raise.
bool py_compare(const Value& a, const std::string& op, const Value& b, int line);
bool py_contains(const Value& container, const Value& item, int line);
// A JSON copy of v (for lists and dicts built by the template); Error for undefined and objects.
Json to_json(const Value& v, int line);
// The items a for loop visits (list elements, dict keys, string characters; none for undefined).
std::vector<Value> iterate(const Value& v, int line);
Value get_attr(const Value& obj, const std::string& name, int line);
Value get_item(const Value& obj, const Value& key, int line);
// a op b for the binary operators + - * / // % ** ~.
Value arith(const std::string& op, const Value& a, const Value& b, int line);
// The indices that Python's slice [start:stop:step] of n items takes.
std::vector<size_t> slice_indices(int64_t n, const std::optional<int64_t> bounds[3], int line);

// chat_template_filters.cc and chat_template_methods.cc.
const std::string& need_str(const Value* v, const std::string& what, int line);    // Error unless a string
int64_t int_arg(const Value* v, int64_t dflt, const std::string& what, int line);  // dflt when absent or none
std::string py_replace(const std::string& s, const std::string& old, const std::string& rep, int64_t count);
// fmt % args for the conversions s r d i f F e E g G x X o c and %% (Error for others).
std::string py_format(const std::string& fmt, const std::vector<Value>& args, int line);
// The global functions: a Value of kind kFunction for their names, and calling one.
bool is_global(const std::string& name);
Value call_global(const std::string& name, const Args& args, int line);
bool has_filter(const std::string& name);
bool has_test(const std::string& name);
Value apply_filter(const std::string& name, const Value& v, const Args& args, int line);
bool apply_test(const std::string& name, const Value& v, const Args& args, int line);
Value call_method(const Value& obj, const std::string& name, const Args& args, int line);

// Lexing (chat_template_lex.cc), parsing (chat_template_parse.cc), rendering (chat_template_eval.cc).
std::vector<Token> lex_template(const std::string& source);
std::vector<Node> parse_template(const std::string& source);
std::string render_nodes(const std::vector<Node>& body, const nlohmann::json& vars);

// ---- The parser (statements in chat_template_parse.cc, expressions in chat_template_expr.cc) ----
// Recursive descent over lex_template()'s tokens, jinja2's grammar for the supported subset.
class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}
  std::vector<Node> run() { return body({}, nullptr, "", 0); }

 private:
  // ---- Token stream ----
  const Token& cur() const { return t_[i_]; }
  const Token& ahead(size_t k) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  void take() { i_ += i_ + 1 < t_.size() ? 1 : 0; }
  bool is_op(const char* s) const { return cur().type == Token::kOp && cur().text == s; }
  bool is_name(const char* s) const { return cur().type == Token::kName && cur().text == s; }
  bool skip_op(const char* s) { return is_op(s) ? (take(), true) : false; }
  bool skip_name(const char* s) { return is_name(s) ? (take(), true) : false; }
  [[noreturn]] void error(const std::string& what) const { fail(cur().line, what); }
  std::string describe() const;
  void expect_op(const char* s) {
    if (!skip_op(s))
      error("expected '" + std::string(s) + "', got " + describe());
  }
  std::string expect_name(const char* what) {
    if (cur().type != Token::kName)
      error(std::string("expected ") + what + ", got " + describe());
    std::string s = cur().text;
    take();
    return s;
  }
  void block_end() {
    if (cur().type != Token::kBlockEnd)
      error("expected '%}', got " + describe());
    take();
  }
  ExprPtr make(Expr::Kind kind, int line) const {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }
  ExprPtr literal(Json j, int line) const {
    ExprPtr e = make(Expr::Kind::kLiteral, line);
    e->literal = std::make_shared<const Json>(std::move(j));
    return e;
  }

  // ---- Statements ----
  std::vector<Node> body(const std::set<std::string>& until, std::string* ended, const std::string& opener, int line);
  void statement(std::vector<Node>& out, const std::string& opener, int open_line);
  Node if_stmt(int line);
  Node for_stmt(int line);
  Node set_stmt(int line);

  // ---- Expressions, lowest precedence first ----
  ExprPtr tuple(bool with_condexpr);  // "a, b" is a tuple where a tag holds one expression
  ExprPtr expr();
  ExprPtr or_expr();
  ExprPtr and_expr();
  ExprPtr not_expr();
  ExprPtr compare();
  ExprPtr binary(int level);
  ExprPtr unary(bool with_filter);
  ExprPtr primary();
  ExprPtr postfix(ExprPtr e);
  ExprPtr filters(ExprPtr e);
  ExprPtr test(ExprPtr e);
  ExprPtr subscript(ExprPtr e);
  ExprPtr call(ExprPtr callee);
  void call_args(Expr& e);

  // Nesting of blocks and expressions (recursion, and operator chains that build deep trees) is
  // bounded, so that a hostile template cannot overflow the stack when parsed, rendered or freed.
  static constexpr int kMaxDepth = 256;
  void nest(int& added) {
    ++added;
    if (++depth_ > kMaxDepth)
      error("template nested too deeply (more than " + std::to_string(kMaxDepth) + " levels)");
  }
  // One level for a recursive call (at construction), one more per node an operator chain wraps.
  struct Depth {
    explicit Depth(Parser& p, bool recursive = true) : p_(p) {
      if (recursive)
        more();
    }
    ~Depth() { p_.depth_ -= added_; }
    void more() { p_.nest(added_); }
    Parser& p_;
    int added_ = 0;
  };

  std::vector<Token> t_;
  size_t i_ = 0;
  int loops_ = 0;
  int depth_ = 0;
};

}  // namespace updraft::chat::detail
