// The parsed template: plain data the parser builds once and the renderer
// walks for every render (so one parsed template serves concurrent renders).
// Nodes carry their source position for runtime error messages.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja/error.h"
#include "chat/jinja/value.h"

namespace kvlm::jinja {

// ---------------------------------------------------------------- expressions

enum class ExprKind {
  kLiteral, kName, kList, kDict, kAttr, kItem, kSlice, kUnary, kBinary, kCompare,
  kAnd, kOr, kCond, kCall, kFilter, kTest,
};

struct Expr {
  Expr(ExprKind k, SourcePos p) : kind(k), pos(p) {}
  virtual ~Expr() = default;
  ExprKind kind;
  SourcePos pos;
};
using ExprPtr = std::unique_ptr<Expr>;

struct Kwarg {
  std::string name;
  ExprPtr value;
};

// Arguments as written at a call, filter or test site.
struct ArgList {
  std::vector<ExprPtr> args;
  std::vector<Kwarg> kwargs;
};

struct LiteralExpr : Expr {  // 1, 'a', true, none
  LiteralExpr(SourcePos p, Value v) : Expr(ExprKind::kLiteral, p), value(std::move(v)) {}
  Value value;
};

struct NameExpr : Expr {
  NameExpr(SourcePos p, std::string n) : Expr(ExprKind::kName, p), name(std::move(n)) {}
  std::string name;
};

struct ListExpr : Expr {  // [a, b] or (a, b)
  ListExpr(SourcePos p, bool t) : Expr(ExprKind::kList, p), is_tuple(t) {}
  std::vector<ExprPtr> items;
  bool is_tuple;
};

struct DictExpr : Expr {  // {k: v}
  explicit DictExpr(SourcePos p) : Expr(ExprKind::kDict, p) {}
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};

struct AttrExpr : Expr {  // object.name
  AttrExpr(SourcePos p, ExprPtr o, std::string n) : Expr(ExprKind::kAttr, p), object(std::move(o)), name(std::move(n)) {}
  ExprPtr object;
  std::string name;
};

struct ItemExpr : Expr {  // object[index]
  ItemExpr(SourcePos p, ExprPtr o, ExprPtr i) : Expr(ExprKind::kItem, p), object(std::move(o)), index(std::move(i)) {}
  ExprPtr object, index;
};

struct SliceExpr : Expr {  // object[start:stop:step], each part optional
  SliceExpr(SourcePos p, ExprPtr o) : Expr(ExprKind::kSlice, p), object(std::move(o)) {}
  ExprPtr object, start, stop, step;
};

enum class UnaryOp { kNot, kNeg, kPos };
struct UnaryExpr : Expr {
  UnaryExpr(SourcePos p, UnaryOp o, ExprPtr e) : Expr(ExprKind::kUnary, p), op(o), operand(std::move(e)) {}
  UnaryOp op;
  ExprPtr operand;
};

enum class BinaryOp { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow, kConcat };
struct BinaryExpr : Expr {
  BinaryExpr(SourcePos p, BinaryOp o, ExprPtr l, ExprPtr r)
      : Expr(ExprKind::kBinary, p), op(o), lhs(std::move(l)), rhs(std::move(r)) {}
  BinaryOp op;
  ExprPtr lhs, rhs;
};

enum class CompareOp { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };
struct CompareExpr : Expr {  // a < b <= c chains like Python
  CompareExpr(SourcePos p, ExprPtr f) : Expr(ExprKind::kCompare, p), first(std::move(f)) {}
  ExprPtr first;
  std::vector<std::pair<CompareOp, ExprPtr>> rest;
};

struct LogicalExpr : Expr {  // kAnd / kOr, returning an operand as Python does
  LogicalExpr(ExprKind k, SourcePos p, ExprPtr l, ExprPtr r) : Expr(k, p), lhs(std::move(l)), rhs(std::move(r)) {}
  ExprPtr lhs, rhs;
};

struct CondExpr : Expr {  // then if cond else otherwise; no else -> undefined
  CondExpr(SourcePos p, ExprPtr c, ExprPtr t, ExprPtr o)
      : Expr(ExprKind::kCond, p), cond(std::move(c)), then(std::move(t)), otherwise(std::move(o)) {}
  ExprPtr cond, then, otherwise;
};

struct CallExpr : Expr {
  CallExpr(SourcePos p, ExprPtr c) : Expr(ExprKind::kCall, p), callee(std::move(c)) {}
  ExprPtr callee;
  ArgList args;
};

struct FilterExpr : Expr {  // operand | name(args); operand is null in {% filter %} blocks
  FilterExpr(SourcePos p, ExprPtr o, std::string n) : Expr(ExprKind::kFilter, p), operand(std::move(o)), name(std::move(n)) {}
  ExprPtr operand;
  std::string name;
  ArgList args;
};

struct TestExpr : Expr {  // operand is [not] name(args)
  TestExpr(SourcePos p, ExprPtr o, std::string n) : Expr(ExprKind::kTest, p), operand(std::move(o)), name(std::move(n)) {}
  ExprPtr operand;
  std::string name;
  ArgList args;
  bool negated = false;
};

// ---------------------------------------------------------------- statements

enum class StmtKind {
  kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kCallBlock, kFilterBlock, kWith, kBreak, kContinue,
};

struct Stmt {
  Stmt(StmtKind k, SourcePos p) : kind(k), pos(p) {}
  virtual ~Stmt() = default;
  StmtKind kind;
  SourcePos pos;
};
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct TextStmt : Stmt {
  TextStmt(SourcePos p, std::string t) : Stmt(StmtKind::kText, p), text(std::move(t)) {}
  std::string text;
};

struct OutputStmt : Stmt {  // {{ expr }}
  OutputStmt(SourcePos p, ExprPtr e) : Stmt(StmtKind::kOutput, p), expr(std::move(e)) {}
  ExprPtr expr;
};

struct IfStmt : Stmt {  // if / elif ... / else
  explicit IfStmt(SourcePos p) : Stmt(StmtKind::kIf, p) {}
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body else_body;
};

// Where `set`, `for` and `with` store values: a name, a namespace attribute
// (`ns.x`, in `set` only), or a tuple of targets to unpack into
// (`for k, v in ...`, `{% set a, ns.b = 1, 2 %}`, `for (a, b), c in ...`).
struct Target {
  std::string name;           // the variable, or the namespace when attr is set
  std::string attr;           // non-empty: name.attr
  std::vector<Target> items;  // the parts of a tuple target
  bool is_tuple = false;
};

struct ForStmt : Stmt {
  explicit ForStmt(SourcePos p) : Stmt(StmtKind::kFor, p) {}
  Target target;
  ExprPtr iterable;
  ExprPtr filter;  // `for x in xs if cond`, may be null
  Body body;
  Body else_body;  // runs when no item passed the filter
};

struct SetStmt : Stmt {  // {% set target = value %}
  explicit SetStmt(SourcePos p) : Stmt(StmtKind::kSet, p) {}
  Target target;
  ExprPtr value;
};

struct SetBlockStmt : Stmt {  // {% set target | filters %}body{% endset %}
  explicit SetBlockStmt(SourcePos p) : Stmt(StmtKind::kSetBlock, p) {}
  Target target;
  std::vector<std::unique_ptr<FilterExpr>> filters;  // operands null, applied in order
  Body body;
};

struct Param {
  std::string name;
  ExprPtr default_value;  // may be null
};

struct MacroStmt : Stmt {
  explicit MacroStmt(SourcePos p) : Stmt(StmtKind::kMacro, p) {}
  std::string name;
  std::vector<Param> params;
  Body body;
};

struct CallBlockStmt : Stmt {  // {% call(params) macro(args) %}body{% endcall %}
  explicit CallBlockStmt(SourcePos p) : Stmt(StmtKind::kCallBlock, p) {}
  std::vector<Param> caller_params;
  std::unique_ptr<CallExpr> call;
  Body body;
};

struct FilterBlockStmt : Stmt {  // {% filter upper|trim %}body{% endfilter %}
  explicit FilterBlockStmt(SourcePos p) : Stmt(StmtKind::kFilterBlock, p) {}
  std::vector<std::unique_ptr<FilterExpr>> filters;
  Body body;
};

struct WithStmt : Stmt {  // {% with a = 1, b = 2 %}body{% endwith %}
  explicit WithStmt(SourcePos p) : Stmt(StmtKind::kWith, p) {}
  std::vector<std::pair<Target, ExprPtr>> assignments;
  Body body;
};

struct LoopControlStmt : Stmt {  // kBreak / kContinue
  LoopControlStmt(StmtKind k, SourcePos p) : Stmt(k, p) {}
};

}  // namespace kvlm::jinja
