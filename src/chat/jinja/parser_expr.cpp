// Expression parsing, one function per precedence level (see parser.h).
#include <fmt/format.h>

#include "chat/jinja/builtins.h"
#include "chat/jinja/parser.h"

namespace kvlm::jinja {

namespace {

constexpr int kMaxExprDepth = 500;

// Left-deep chains (a + b + c ..., x.a.b.c ..., v|f|g ...) are built by loops,
// not recursion, but evaluating and destroying them recurses once per link.
// Each link counts toward the parser's depth so the tree height stays bounded.
class ChainGuard {
 public:
  explicit ChainGuard(int& depth) : depth_(depth) {}
  ~ChainGuard() { depth_ -= links_; }
  ChainGuard(const ChainGuard&) = delete;
  ChainGuard& operator=(const ChainGuard&) = delete;
  bool add_link() {
    ++links_;
    return ++depth_ <= kMaxExprDepth;
  }

 private:
  int& depth_;
  int links_ = 0;
};

bool is_compare_op(const Token& t) {
  if (t.kind != TokenKind::kOperator) return false;
  const std::string& s = t.text;
  return s == "==" || s == "!=" || s == "<" || s == "<=" || s == ">" || s == ">=";
}

CompareOp compare_op(const std::string& s) {
  if (s == "==") return CompareOp::kEq;
  if (s == "!=") return CompareOp::kNe;
  if (s == "<") return CompareOp::kLt;
  if (s == "<=") return CompareOp::kLe;
  if (s == ">") return CompareOp::kGt;
  return CompareOp::kGe;
}

}  // namespace

bool Parser::at_tuple_end() const {
  const Token& t = peek();
  return t.kind == TokenKind::kVarEnd || t.kind == TokenKind::kBlockEnd || t.kind == TokenKind::kEof ||
         at_op(")") || at_name("recursive");
}

ExprPtr Parser::parse_tuple(bool with_condexpr, bool explicit_parens) {
  SourcePos pos = peek().pos;
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) expect_op(",");
    if (at_tuple_end()) break;
    items.push_back(parse_expression(with_condexpr));
    if (!at_op(",")) break;
    is_tuple = true;
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items.front());
    if (!explicit_parens) fail(peek(), fmt::format("expected an expression, got {}", describe(peek())));
  }
  auto tuple = std::make_unique<ListExpr>(pos, true);
  tuple->items = std::move(items);
  return tuple;
}

ExprPtr Parser::parse_expression(bool with_condexpr) {
  if (++depth_ > kMaxExprDepth) fail(peek(), "expression nested too deeply");
  ExprPtr e = with_condexpr ? parse_condexpr() : parse_or();
  --depth_;
  return e;
}

ExprPtr Parser::parse_condexpr() {
  size_t num_unknown = unknown_names_.size();
  ExprPtr expr = parse_or();
  if (!at_name("if")) return expr;
  expr = parse_condexpr_rest(std::move(expr));
  unknown_names_.resize(num_unknown);  // every part of an inline if is soft (parser.h), even before `if`
  return expr;
}

ExprPtr Parser::parse_condexpr_rest(ExprPtr expr) {
  ChainGuard chain(depth_);
  while (at_name("if")) {
    if (!chain.add_link()) fail(peek(), "expression nested too deeply");
    SourcePos pos = next().pos;
    ExprPtr cond = parse_or();
    ExprPtr otherwise;
    if (at_name("else")) {
      next();
      otherwise = parse_condexpr();
    }
    expr = std::make_unique<CondExpr>(pos, std::move(cond), std::move(expr), std::move(otherwise));
  }
  return expr;
}

ExprPtr Parser::parse_or() {
  ExprPtr left = parse_and();
  ChainGuard chain(depth_);
  while (at_name("or")) {
    if (!chain.add_link()) fail(peek(), "expression nested too deeply");
    SourcePos pos = next().pos;
    left = std::make_unique<LogicalExpr>(ExprKind::kOr, pos, std::move(left), parse_and());
  }
  return left;
}

ExprPtr Parser::parse_and() {
  ExprPtr left = parse_not();
  ChainGuard chain(depth_);
  while (at_name("and")) {
    if (!chain.add_link()) fail(peek(), "expression nested too deeply");
    SourcePos pos = next().pos;
    left = std::make_unique<LogicalExpr>(ExprKind::kAnd, pos, std::move(left), parse_not());
  }
  return left;
}

ExprPtr Parser::parse_not() {
  if (at_name("not")) {
    SourcePos pos = next().pos;
    if (++depth_ > kMaxExprDepth) fail(peek(), "expression nested too deeply");
    ExprPtr operand = parse_not();
    --depth_;
    return std::make_unique<UnaryExpr>(pos, UnaryOp::kNot, std::move(operand));
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
  SourcePos pos = peek().pos;
  ExprPtr first = parse_math1();
  std::unique_ptr<CompareExpr> cmp;
  ChainGuard chain(depth_);
  while (true) {
    if (!chain.add_link()) fail(peek(), "expression nested too deeply");
    CompareOp op;
    if (is_compare_op(peek())) {
      op = compare_op(next().text);
    } else if (at_name("in")) {
      next();
      op = CompareOp::kIn;
    } else if (at_name("not") && at_name("in", 1)) {
      next();
      next();
      op = CompareOp::kNotIn;
    } else {
      break;
    }
    if (!cmp) cmp = std::make_unique<CompareExpr>(pos, std::move(first));
    cmp->rest.emplace_back(op, parse_math1());
  }
  if (!cmp) return first;
  return cmp;
}

ExprPtr Parser::parse_math1() {
  ExprPtr left = parse_concat();
  ChainGuard chain(depth_);
  while (at_op("+") || at_op("-")) {
    if (!chain.add_link()) fail(peek(), "expression nested too deeply");
    const Token& t = next();
    BinaryOp op = t.text == "+" ? BinaryOp::kAdd : BinaryOp::kSub;
    left = std::make_unique<BinaryExpr>(t.pos, op, std::move(left), parse_concat());
  }
  return left;
}

ExprPtr Parser::parse_concat() {
  ExprPtr left = parse_math2();
  ChainGuard chain(depth_);
  while (at_op("~")) {
    if (!chain.add_link()) fail(peek(), "expression nested too deeply");
    SourcePos pos = next().pos;
    left = std::make_unique<BinaryExpr>(pos, BinaryOp::kConcat, std::move(left), parse_math2());
  }
  return left;
}

ExprPtr Parser::parse_math2() {
  ExprPtr left = parse_pow();
  ChainGuard chain(depth_);
  while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
    if (!chain.add_link()) fail(peek(), "expression nested too deeply");
    const Token& t = next();
    BinaryOp op = t.text == "*"    ? BinaryOp::kMul
                  : t.text == "/"  ? BinaryOp::kDiv
                  : t.text == "//" ? BinaryOp::kFloorDiv
                                   : BinaryOp::kMod;
    left = std::make_unique<BinaryExpr>(t.pos, op, std::move(left), parse_pow());
  }
  return left;
}

ExprPtr Parser::parse_pow() {
  ExprPtr left = parse_unary(true);
  ChainGuard chain(depth_);
  while (at_op("**")) {
    if (!chain.add_link()) fail(peek(), "expression nested too deeply");
    SourcePos pos = next().pos;
    left = std::make_unique<BinaryExpr>(pos, BinaryOp::kPow, std::move(left), parse_unary(true));
  }
  return left;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  ExprPtr node;
  if (at_op("-") || at_op("+")) {
    const Token& t = next();
    if (++depth_ > kMaxExprDepth) fail(t, "expression nested too deeply");
    ExprPtr operand = parse_unary(false);
    --depth_;
    node = std::make_unique<UnaryExpr>(t.pos, t.text == "-" ? UnaryOp::kNeg : UnaryOp::kPos, std::move(operand));
  } else {
    node = parse_primary();
  }
  node = parse_postfix(std::move(node));
  if (with_filter) node = parse_filter_expr(std::move(node));
  return node;
}

ExprPtr Parser::parse_primary() {
  const Token& t = peek();
  switch (t.kind) {
    case TokenKind::kName: {
      next();
      if (t.text == "true" || t.text == "True") return std::make_unique<LiteralExpr>(t.pos, Value(true));
      if (t.text == "false" || t.text == "False") return std::make_unique<LiteralExpr>(t.pos, Value(false));
      if (t.text == "none" || t.text == "None") return std::make_unique<LiteralExpr>(t.pos, Value::none());
      return std::make_unique<NameExpr>(t.pos, t.text);
    }
    case TokenKind::kString: {
      std::string s = next().text;
      while (peek().kind == TokenKind::kString) s += next().text;  // 'a' 'b' is 'ab'
      return std::make_unique<LiteralExpr>(t.pos, Value(std::move(s)));
    }
    case TokenKind::kInteger: next(); return std::make_unique<LiteralExpr>(t.pos, Value(t.int_value));
    case TokenKind::kFloat: next(); return std::make_unique<LiteralExpr>(t.pos, Value(t.float_value));
    case TokenKind::kOperator:
      if (t.text == "(") {
        next();
        if (++depth_ > kMaxExprDepth) fail(t, "expression nested too deeply");
        ExprPtr inner = parse_tuple(true, true);
        --depth_;
        expect_op(")");
        return inner;
      }
      if (t.text == "[") return parse_list();
      if (t.text == "{") return parse_dict();
      break;
    default: break;
  }
  fail(t, fmt::format("expected an expression, got {}", describe(t)));
}

ExprPtr Parser::parse_list() {
  SourcePos pos = next().pos;  // "["
  auto list = std::make_unique<ListExpr>(pos, false);
  while (!at_op("]")) {
    if (!list->items.empty()) expect_op(",");
    if (at_op("]")) break;
    list->items.push_back(parse_expression());
  }
  next();
  return list;
}

ExprPtr Parser::parse_dict() {
  SourcePos pos = next().pos;  // "{"
  auto dict = std::make_unique<DictExpr>(pos);
  while (!at_op("}")) {
    if (!dict->items.empty()) expect_op(",");
    if (at_op("}")) break;
    ExprPtr key = parse_expression();
    expect_op(":");
    dict->items.emplace_back(std::move(key), parse_expression());
  }
  next();
  return dict;
}

ExprPtr Parser::parse_postfix(ExprPtr node) {
  ChainGuard chain(depth_);
  while (true) {
    if (!chain.add_link()) fail(peek(), "expression nested too deeply");
    if (at_op(".") || at_op("[")) {
      node = parse_subscript(std::move(node));
    } else if (at_op("(")) {
      auto call = std::make_unique<CallExpr>(peek().pos, std::move(node));
      call->args = parse_call_args();
      node = std::move(call);
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_filter_expr(ExprPtr node) {
  ChainGuard chain(depth_);
  while (true) {
    if (!chain.add_link()) fail(peek(), "expression nested too deeply");
    if (at_op("|")) {
      next();
      node = parse_filter(std::move(node));
    } else if (at_name("is")) {
      node = parse_test(std::move(node));
    } else if (at_op("(")) {
      auto call = std::make_unique<CallExpr>(peek().pos, std::move(node));
      call->args = parse_call_args();
      node = std::move(call);
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_subscript(ExprPtr node) {
  const Token& t = next();
  if (t.text == ".") {
    const Token& attr = next();
    if (attr.kind == TokenKind::kName) return std::make_unique<AttrExpr>(attr.pos, std::move(node), attr.text);
    if (attr.kind == TokenKind::kInteger) {
      return std::make_unique<ItemExpr>(attr.pos, std::move(node), std::make_unique<LiteralExpr>(attr.pos, Value(attr.int_value)));
    }
    fail(attr, fmt::format("expected an attribute name after '.', got {}", describe(attr)));
  }
  // "[": an index or a slice start:stop:step with every part optional.
  ExprPtr start;
  if (!at_op(":")) {
    start = parse_expression();
    if (!at_op(":")) {
      expect_op("]");
      return std::make_unique<ItemExpr>(t.pos, std::move(node), std::move(start));
    }
  }
  auto slice = std::make_unique<SliceExpr>(t.pos, std::move(node));
  slice->start = std::move(start);
  next();  // ":"
  if (!at_op("]") && !at_op(":")) slice->stop = parse_expression();
  if (at_op(":")) {
    next();
    if (!at_op("]")) slice->step = parse_expression();
  }
  expect_op("]");
  return slice;
}

ArgList Parser::parse_call_args() {
  expect_op("(");
  ArgList out;
  while (!at_op(")")) {
    if (!out.args.empty() || !out.kwargs.empty()) expect_op(",");
    if (at_op(")")) break;
    if (at_op("*") || at_op("**")) fail(peek(), "*args and **kwargs in calls are not supported");
    if (peek().kind == TokenKind::kName && at_op("=", 1)) {
      std::string name = next().text;
      next();
      out.kwargs.push_back(Kwarg{std::move(name), parse_expression()});
    } else {
      if (!out.kwargs.empty()) fail(peek(), "positional argument after keyword argument");
      out.args.push_back(parse_expression());
    }
  }
  next();
  return out;
}

// Filter and test names may be dotted (Jinja2 allows `x|ns.name` for
// extension filters); none of ours is, so a dotted name is an unknown one.
std::string Parser::parse_dotted_name() {
  std::string name = expect_name();
  while (at_op(".")) {
    next();
    name += '.';
    name += expect_name();
  }
  return name;
}

std::unique_ptr<FilterExpr> Parser::parse_filter(ExprPtr operand) {
  const Token& name = peek();
  auto filter = std::make_unique<FilterExpr>(name.pos, std::move(operand), parse_dotted_name());
  // Jinja2 refuses unknown filters when it compiles the template, not when a branch runs.
  if (find_filter(filter->name) == nullptr) {
    unknown_names_.push_back(UnknownName{name.pos, fmt::format("no filter named '{}'", filter->name)});
  }
  if (at_op("(")) filter->args = parse_call_args();
  return filter;
}

ExprPtr Parser::parse_test(ExprPtr node) {
  next();  // "is"
  bool negated = false;
  if (at_name("not")) {
    next();
    negated = true;
  }
  const Token& name = peek();
  auto test = std::make_unique<TestExpr>(name.pos, std::move(node), parse_dotted_name());
  if (find_test(test->name) == nullptr) {
    unknown_names_.push_back(UnknownName{name.pos, fmt::format("no test named '{}'", test->name)});
  }
  test->negated = negated;
  const Token& t = peek();
  if (at_op("(")) {
    test->args = parse_call_args();
  } else if ((t.kind == TokenKind::kName || t.kind == TokenKind::kString || t.kind == TokenKind::kInteger ||
              t.kind == TokenKind::kFloat || at_op("[") || at_op("{")) &&
             !at_name("else") && !at_name("or") && !at_name("and") && !at_name("if")) {
    // `x is divisibleby 3`, `x is equalto 'user'`: one argument without parentheses.
    if (at_name("is")) fail(t, "tests cannot be chained with 'is'");
    test->args.args.push_back(parse_postfix(parse_primary()));
  }
  return test;
}

}  // namespace kvlm::jinja
