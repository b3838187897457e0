// Statement parsing and the token stream; expressions are in parser_expr.cpp.
#include "chat/jinja/parser.h"

#include <fmt/format.h>

namespace kvlm::jinja {

namespace {

constexpr int kMaxDepth = 500;  // shared with expression nesting (parser_expr.cpp)

// Raises the parser's nesting depth for the lifetime of a scope.
class DepthGuard {
 public:
  DepthGuard(int& depth, SourcePos pos) : depth_(depth) {
    if (++depth_ > kMaxDepth) throw_syntax(pos, "template nested too deeply");
  }
  ~DepthGuard() { --depth_; }
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;

 private:
  int& depth_;
};

// Sets the parser's soft flag (parser.h) for a scope.
class SoftMode {
 public:
  SoftMode(bool& flag, bool soft) : flag_(flag), saved_(flag) { flag_ = soft; }
  ~SoftMode() { flag_ = saved_; }
  SoftMode(const SoftMode&) = delete;
  SoftMode& operator=(const SoftMode&) = delete;

 private:
  bool& flag_;
  bool saved_;
};

bool is_constant_name(std::string_view name) {
  return name == "true" || name == "false" || name == "none" || name == "True" || name == "False" || name == "None";
}

}  // namespace

Body Parser::parse(std::vector<Token> tokens) {
  Parser p(std::move(tokens));
  Body body;
  p.parse_body(body, {}, "");
  return body;
}

void Parser::settle_unknown_names() {
  if (!soft_ && !unknown_names_.empty()) throw_syntax(unknown_names_.front().pos, unknown_names_.front().message);
  unknown_names_.clear();
}

// ---------------------------------------------------------------- token stream

const Token& Parser::peek(size_t ahead) const {
  size_t i = pos_ + ahead;
  return i < tokens_.size() ? tokens_[i] : tokens_.back();  // the last token is always kEof
}

const Token& Parser::next() {
  const Token& t = peek();
  if (pos_ < tokens_.size() - 1) ++pos_;
  return t;
}

bool Parser::at_op(std::string_view op, size_t ahead) const {
  const Token& t = peek(ahead);
  return t.kind == TokenKind::kOperator && t.text == op;
}

bool Parser::at_name(std::string_view name, size_t ahead) const {
  const Token& t = peek(ahead);
  return t.kind == TokenKind::kName && t.text == name;
}

void Parser::expect_op(std::string_view op) {
  if (!at_op(op)) fail(peek(), fmt::format("expected '{}', got {}", op, describe(peek())));
  next();
}

std::string Parser::expect_name() {
  if (peek().kind != TokenKind::kName) fail(peek(), fmt::format("expected a name, got {}", describe(peek())));
  return next().text;
}

void Parser::expect_block_end() {
  if (peek().kind != TokenKind::kBlockEnd) {
    fail(peek(), fmt::format("expected end of statement block, got {}", describe(peek())));
  }
  next();
}

void Parser::fail(const Token& at, std::string_view message) const { throw_syntax(at.pos, message); }

std::string Parser::describe(const Token& t) {
  switch (t.kind) {
    case TokenKind::kText: return "template text";
    case TokenKind::kVarBegin: return "'{{'";
    case TokenKind::kVarEnd: return "end of print statement";
    case TokenKind::kBlockBegin: return "'{%'";
    case TokenKind::kBlockEnd: return "end of statement block";
    case TokenKind::kString: return "string literal";
    case TokenKind::kInteger:
    case TokenKind::kFloat: return "number '" + t.text + "'";
    case TokenKind::kEof: return "end of template";
    default: return "'" + t.text + "'";
  }
}

// ---------------------------------------------------------------- statements

std::string Parser::parse_body(Body& out, std::initializer_list<std::string_view> end_tags,
                               std::string_view inside) {
  while (true) {
    const Token& t = peek();
    switch (t.kind) {
      case TokenKind::kEof: {
        if (end_tags.size() == 0) return "";
        std::string expected;
        for (std::string_view tag : end_tags) {
          expected += expected.empty() ? "" : " or ";
          expected += fmt::format("'{}'", tag);
        }
        fail(t, fmt::format("unexpected end of template: expected {} to close '{}'", expected, inside));
      }
      case TokenKind::kText:
        out.push_back(std::make_unique<TextStmt>(t.pos, t.text));
        next();
        break;
      case TokenKind::kVarBegin: {
        SourcePos pos = next().pos;
        ExprPtr e = parse_tuple(true, false);
        settle_unknown_names();
        if (peek().kind != TokenKind::kVarEnd) {
          fail(peek(), fmt::format("expected end of print statement, got {}", describe(peek())));
        }
        next();
        out.push_back(std::make_unique<OutputStmt>(pos, std::move(e)));
        break;
      }
      case TokenKind::kBlockBegin: {
        const Token& tag = peek(1);
        if (tag.kind == TokenKind::kName) {
          for (std::string_view end : end_tags) {
            if (tag.text == end) {
              next();
              return next().text;
            }
          }
        }
        parse_statement(out);
        break;
      }
      default: fail(t, fmt::format("unexpected {}", describe(t)));
    }
  }
}

void Parser::parse_statement(Body& out) {
  SourcePos pos = next().pos;  // "{%"
  const Token& tag = peek();
  if (tag.kind != TokenKind::kName) fail(tag, fmt::format("expected a tag name, got {}", describe(tag)));
  DepthGuard guard(depth_, pos);
  std::string name = next().text;
  if (name == "if") {
    out.push_back(parse_if(pos));
  } else if (name == "for") {
    out.push_back(parse_for(pos));
  } else if (name == "set") {
    out.push_back(parse_set(pos));
  } else if (name == "macro") {
    out.push_back(parse_macro(pos));
  } else if (name == "call") {
    out.push_back(parse_call_block(pos));
  } else if (name == "filter") {
    out.push_back(parse_filter_block(pos));
  } else if (name == "with") {
    out.push_back(parse_with(pos));
  } else if (name == "break" || name == "continue") {
    if (loop_depth_ == 0) fail(tag, fmt::format("'{}' outside of a for loop", name));
    expect_block_end();
    out.push_back(std::make_unique<LoopControlStmt>(name == "break" ? StmtKind::kBreak : StmtKind::kContinue, pos));
  } else if (name == "generation") {
    // Hugging Face's marker for assistant-token masks; it renders its body unchanged.
    expect_block_end();
    SoftMode hard(soft_, false);  // HF compiles it as a call block: a frame of its own
    parse_body(out, {"endgeneration"}, "generation");
    expect_block_end();
  } else if (name.rfind("end", 0) == 0 || name == "elif" || name == "else") {
    fail(tag, fmt::format("unexpected '{}' tag: no open block expects it here", name));
  } else {
    fail(tag, fmt::format("unknown tag '{}'", name));
  }
}

StmtPtr Parser::parse_if(SourcePos pos) {
  auto stmt = std::make_unique<IfStmt>(pos);
  SoftMode soft(soft_, true);
  while (true) {
    ExprPtr cond = parse_tuple(false, false);
    settle_unknown_names();
    expect_block_end();
    Body body;
    std::string end = parse_body(body, {"elif", "else", "endif"}, "if");
    stmt->branches.emplace_back(std::move(cond), std::move(body));
    if (end == "elif") continue;
    expect_block_end();
    if (end == "else") {
      parse_body(stmt->else_body, {"endif"}, "if");
      expect_block_end();
    }
    return stmt;
  }
}

StmtPtr Parser::parse_for(SourcePos pos) {
  auto stmt = std::make_unique<ForStmt>(pos);
  stmt->target = parse_target(false);
  if (!at_name("in")) fail(peek(), fmt::format("expected 'in' in for loop, got {}", describe(peek())));
  next();
  stmt->iterable = parse_tuple(false, false);
  if (at_name("if")) {
    next();
    stmt->filter = parse_expression();
  }
  settle_unknown_names();
  if (at_name("recursive")) fail(peek(), "recursive for loops are not supported");
  expect_block_end();
  SoftMode hard(soft_, false);  // a loop body is a frame of its own
  ++loop_depth_;
  std::string end = parse_body(stmt->body, {"else", "endfor"}, "for");
  --loop_depth_;
  expect_block_end();
  if (end == "else") {
    parse_body(stmt->else_body, {"endfor"}, "for");
    expect_block_end();
  }
  return stmt;
}

StmtPtr Parser::parse_set(SourcePos pos) {
  Target target = parse_target(true);
  if (at_op("=")) {
    next();
    auto stmt = std::make_unique<SetStmt>(pos);
    stmt->target = std::move(target);
    stmt->value = parse_tuple(true, false);
    settle_unknown_names();
    expect_block_end();
    return stmt;
  }
  auto stmt = std::make_unique<SetBlockStmt>(pos);
  stmt->target = std::move(target);
  if (at_op("|")) {
    next();
    stmt->filters = parse_filter_chain();
  }
  settle_unknown_names();
  expect_block_end();
  SoftMode hard(soft_, false);
  parse_body(stmt->body, {"endset"}, "set");
  expect_block_end();
  return stmt;
}

StmtPtr Parser::parse_macro(SourcePos pos) {
  auto stmt = std::make_unique<MacroStmt>(pos);
  SoftMode hard(soft_, false);  // defaults and body run in the macro's own frame
  stmt->name = expect_name();
  stmt->params = parse_params();
  settle_unknown_names();
  expect_block_end();
  int saved_loops = loop_depth_;
  loop_depth_ = 0;  // a macro body cannot break out of the loop it is defined in
  parse_body(stmt->body, {"endmacro"}, "macro");
  loop_depth_ = saved_loops;
  expect_block_end();
  return stmt;
}

StmtPtr Parser::parse_call_block(SourcePos pos) {
  auto stmt = std::make_unique<CallBlockStmt>(pos);
  if (at_op("(")) {
    SoftMode hard(soft_, false);
    stmt->caller_params = parse_params();
    settle_unknown_names();
  }
  ExprPtr call = parse_expression();
  settle_unknown_names();
  if (call->kind != ExprKind::kCall) fail(peek(), "expected a macro call after 'call'");
  stmt->call.reset(static_cast<CallExpr*>(call.release()));
  expect_block_end();
  SoftMode hard(soft_, false);
  int saved_loops = loop_depth_;
  loop_depth_ = 0;
  parse_body(stmt->body, {"endcall"}, "call");
  loop_depth_ = saved_loops;
  expect_block_end();
  return stmt;
}

StmtPtr Parser::parse_filter_block(SourcePos pos) {
  auto stmt = std::make_unique<FilterBlockStmt>(pos);
  SoftMode hard(soft_, false);  // the filters and the body run in a frame of their own
  stmt->filters = parse_filter_chain();
  settle_unknown_names();
  expect_block_end();
  parse_body(stmt->body, {"endfilter"}, "filter");
  expect_block_end();
  return stmt;
}

StmtPtr Parser::parse_with(SourcePos pos) {
  auto stmt = std::make_unique<WithStmt>(pos);
  while (peek().kind != TokenKind::kBlockEnd) {
    if (!stmt->assignments.empty()) expect_op(",");
    Target target = parse_target(false);
    expect_op("=");
    stmt->assignments.emplace_back(std::move(target), parse_expression());
    settle_unknown_names();
  }
  expect_block_end();
  SoftMode hard(soft_, false);
  parse_body(stmt->body, {"endwith"}, "with");
  expect_block_end();
  return stmt;
}

// A target as Jinja2 reads it: items separated by commas (a trailing comma
// makes a one-item tuple); each item a name, `ns.attr` when allowed, or a
// parenthesised target.
Target Parser::parse_target(bool allow_attr) {
  Target first = parse_target_item(allow_attr);
  if (!at_op(",")) return first;
  Target tuple;
  tuple.is_tuple = true;
  tuple.items.push_back(std::move(first));
  while (at_op(",")) {
    next();
    if (at_op(")")) break;  // trailing comma in parentheses: `(a,)`
    tuple.items.push_back(parse_target_item(allow_attr));
  }
  return tuple;
}

Target Parser::parse_target_item(bool allow_attr) {
  if (at_op("(")) {
    SourcePos pos = next().pos;
    if (++depth_ > kMaxDepth) throw_syntax(pos, "template nested too deeply");
    Target inner = parse_target(allow_attr);
    --depth_;
    expect_op(")");
    return inner;
  }
  const Token& t = peek();
  Target target;
  target.name = expect_name();
  if (is_constant_name(target.name)) fail(t, fmt::format("cannot assign to '{}'", target.name));
  // Only a for loop's target would hide the loop variable.
  if (target.name == "loop" && !allow_attr) fail(t, "cannot use 'loop' as a loop or with-block variable");
  if (allow_attr && at_op(".")) {
    next();
    target.attr = expect_name();
  }
  return target;
}

std::vector<Param> Parser::parse_params() {
  std::vector<Param> params;
  expect_op("(");
  while (!at_op(")")) {
    if (!params.empty()) expect_op(",");  // no trailing comma in a signature, as in Jinja2
    Param p;
    p.name = expect_name();
    if (at_op("=")) {
      next();
      p.default_value = parse_expression();
    }
    params.push_back(std::move(p));
  }
  next();
  return params;
}

std::vector<std::unique_ptr<FilterExpr>> Parser::parse_filter_chain() {
  std::vector<std::unique_ptr<FilterExpr>> filters;
  filters.push_back(parse_filter(nullptr));
  while (at_op("|")) {
    next();
    filters.push_back(parse_filter(nullptr));
  }
  return filters;
}

}  // namespace kvlm::jinja
