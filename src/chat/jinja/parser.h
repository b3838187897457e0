// Jinja parser: tokens -> statement tree (ast.h). The grammar and operator
// precedence follow Jinja2's parser, lowest first:
//   a if c else b  <  or  <  and  <  not  <  comparisons, in, not in
//   <  + -  <  ~  <  * / // %  <  **  <  unary - +  <  postfix . [] ()
//   and filters / tests (| and is), which bind to the unary expression on
//   their left: `-x|abs` is `(-x)|abs`, `a + b|trim` is `a + (b|trim)`.
// `**` is left-associative, as in Jinja2 (not Python).
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "chat/jinja/ast.h"
#include "chat/jinja/lexer.h"

namespace kvlm::jinja {

class Parser {
 public:
  // Throws Error(kInvalidArgument) "template syntax error at line L, column C: ...".
  static Body parse(std::vector<Token> tokens);

 private:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  // --- token stream ---
  const Token& peek(size_t ahead = 0) const;
  const Token& next();
  bool at_op(std::string_view op, size_t ahead = 0) const;
  bool at_name(std::string_view name, size_t ahead = 0) const;
  void expect_op(std::string_view op);
  std::string expect_name();
  void expect_block_end();
  [[noreturn]] void fail(const Token& at, std::string_view message) const;
  static std::string describe(const Token& t);

  // --- statements (parser.cpp) ---
  // Parses until one of `end_tags` opens a block tag; consumes "{% tag" and
  // returns the tag, leaving the rest of that tag to the caller. With no end
  // tags, parses to the end of the template.
  std::string parse_body(Body& out, std::initializer_list<std::string_view> end_tags, std::string_view inside);
  void parse_statement(Body& out);
  StmtPtr parse_if(SourcePos pos);
  StmtPtr parse_for(SourcePos pos);
  StmtPtr parse_set(SourcePos pos);
  StmtPtr parse_macro(SourcePos pos);
  StmtPtr parse_call_block(SourcePos pos);
  StmtPtr parse_filter_block(SourcePos pos);
  StmtPtr parse_with(SourcePos pos);
  Target parse_target(bool allow_attr);
  Target parse_target_item(bool allow_attr);
  std::vector<Param> parse_params();
  std::vector<std::unique_ptr<FilterExpr>> parse_filter_chain();

  // --- expressions (parser_expr.cpp) ---
  ExprPtr parse_tuple(bool with_condexpr, bool explicit_parens);
  ExprPtr parse_expression(bool with_condexpr = true);
  ExprPtr parse_condexpr();
  ExprPtr parse_condexpr_rest(ExprPtr expr);  // after `then` when an `if` follows
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_filter_expr(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr node);
  ExprPtr parse_list();
  ExprPtr parse_dict();
  ExprPtr parse_test(ExprPtr node);
  std::unique_ptr<FilterExpr> parse_filter(ExprPtr operand);
  std::string parse_dotted_name();
  ArgList parse_call_args();
  bool at_tuple_end() const;

  // Jinja2 refuses an unknown filter or test when it compiles the template,
  // except inside an if statement or an inline if-expression, where it only
  // fails if that code runs. Unknown names are collected while an expression
  // is parsed and settled when it ends: dropped in those "soft" places,
  // reported otherwise.
  struct UnknownName {
    SourcePos pos;
    std::string message;
  };
  void settle_unknown_names();

  std::vector<Token> tokens_;
  std::vector<UnknownName> unknown_names_;
  bool soft_ = false;  // parsing an if statement's condition or its branches' own statements
  size_t pos_ = 0;
  int depth_ = 0;       // expression / block nesting, bounded so hostile input cannot overflow the stack
  int loop_depth_ = 0;  // for loops enclosing the current statement (break/continue need one)
};

}  // namespace kvlm::jinja
