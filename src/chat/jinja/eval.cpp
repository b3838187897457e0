// Expression evaluation. pos_ tracks the node being evaluated so a runtime
// error names the line and column of the operation that failed.
#include <optional>

#include "chat/jinja/builtins.h"
#include "chat/jinja/error.h"
#include "chat/jinja/operators.h"
#include "chat/jinja/render.h"

namespace kvlm::jinja {

Value Renderer::eval(const Expr& e) {
  pos_ = e.pos;
  switch (e.kind) {
    case ExprKind::kLiteral: return static_cast<const LiteralExpr&>(e).value;
    case ExprKind::kName: return lookup(static_cast<const NameExpr&>(e).name);
    case ExprKind::kList: return eval_list(static_cast<const ListExpr&>(e));
    case ExprKind::kDict: return eval_dict(static_cast<const DictExpr&>(e));
    case ExprKind::kAttr: {
      const auto& x = static_cast<const AttrExpr&>(e);
      Value obj = eval(*x.object);
      pos_ = e.pos;
      return get_attr(obj, x.name);
    }
    case ExprKind::kItem: {
      const auto& x = static_cast<const ItemExpr&>(e);
      Value obj = eval(*x.object);
      Value key = eval(*x.index);
      pos_ = e.pos;
      return get_item(obj, key);
    }
    case ExprKind::kSlice: return eval_slice(static_cast<const SliceExpr&>(e));
    case ExprKind::kUnary: {
      const auto& x = static_cast<const UnaryExpr&>(e);
      Value v = eval(*x.operand);
      pos_ = e.pos;
      return unary_op(x.op, v);
    }
    case ExprKind::kBinary: {
      const auto& x = static_cast<const BinaryExpr&>(e);
      Value lhs = eval(*x.lhs);
      Value rhs = eval(*x.rhs);
      pos_ = e.pos;
      return binary_op(x.op, lhs, rhs);
    }
    case ExprKind::kCompare: return eval_compare(static_cast<const CompareExpr&>(e));
    case ExprKind::kAnd: {
      const auto& x = static_cast<const LogicalExpr&>(e);
      Value lhs = eval(*x.lhs);
      return lhs.truthy() ? eval(*x.rhs) : lhs;
    }
    case ExprKind::kOr: {
      const auto& x = static_cast<const LogicalExpr&>(e);
      Value lhs = eval(*x.lhs);
      return lhs.truthy() ? lhs : eval(*x.rhs);
    }
    case ExprKind::kCond: return eval_cond(static_cast<const CondExpr&>(e));
    case ExprKind::kCall: return eval_call(static_cast<const CallExpr&>(e));
    case ExprKind::kFilter: {
      const auto& x = static_cast<const FilterExpr&>(e);
      Value operand = eval(*x.operand);
      CallArgs args = eval_args(x.args);
      pos_ = e.pos;
      return call_filter(x.name, operand, args);
    }
    case ExprKind::kTest: return Value(eval_test(static_cast<const TestExpr&>(e)));
  }
  return Value::none();
}

Value Renderer::eval_list(const ListExpr& e) {
  std::vector<Value> items;
  items.reserve(e.items.size());
  for (const auto& item : e.items) items.push_back(eval(*item));
  return e.is_tuple ? Value::make_tuple(std::move(items)) : Value::make_list(std::move(items));
}

Value Renderer::eval_dict(const DictExpr& e) {
  Value d = Value::make_dict();
  for (const auto& [key, value] : e.items) {
    Value k = eval(*key);
    d.dict().set(k, eval(*value));
  }
  return d;
}

// Only the branch taken is evaluated, as Python's conditional expression.
Value Renderer::eval_cond(const CondExpr& e) {
  if (eval(*e.cond).truthy()) return eval(*e.then);
  if (e.otherwise) return eval(*e.otherwise);
  return Value::undefined("the inline if-expression evaluated to false and no else section was defined");
}

Value Renderer::eval_call(const CallExpr& e) {
  Value callee = eval(*e.callee);
  CallArgs args = eval_args(e.args);
  pos_ = e.pos;
  if (callee.is_undefined()) callee.fail_undefined();
  if (!callee.is_callable()) throw_runtime("'{}' object is not callable", callee.type_name());
  return callee.callable().fn(args);
}

Value Renderer::eval_compare(const CompareExpr& e) {
  Value lhs = eval(*e.first);
  for (const auto& [op, expr] : e.rest) {
    Value rhs = eval(*expr);
    pos_ = e.pos;
    bool ok = false;
    switch (op) {
      case CompareOp::kEq: ok = values_equal(lhs, rhs); break;
      case CompareOp::kNe: ok = !values_equal(lhs, rhs); break;
      case CompareOp::kLt: ok = compare_values(lhs, rhs, "<") < 0; break;
      case CompareOp::kLe: ok = compare_values(lhs, rhs, "<=") <= 0; break;
      case CompareOp::kGt: ok = compare_values(lhs, rhs, ">") > 0; break;
      case CompareOp::kGe: ok = compare_values(lhs, rhs, ">=") >= 0; break;
      case CompareOp::kIn: ok = contains(rhs, lhs); break;
      case CompareOp::kNotIn: ok = !contains(rhs, lhs); break;
    }
    if (!ok) return Value(false);
    lhs = std::move(rhs);
  }
  return Value(true);
}

CallArgs Renderer::eval_args(const ArgList& args) {
  CallArgs out;
  out.args.reserve(args.args.size());
  for (const auto& a : args.args) out.args.push_back(eval(*a));
  for (const auto& kw : args.kwargs) out.kwargs.emplace_back(kw.name, eval(*kw.value));
  return out;
}

Value Renderer::eval_slice(const SliceExpr& e) {
  Value obj = eval(*e.object);
  auto bound = [&](const ExprPtr& part) -> std::optional<int64_t> {
    if (!part) return std::nullopt;
    Value v = eval(*part);
    if (v.is_none() || v.is_undefined()) return std::nullopt;
    if (!v.is_int() && !v.is_bool()) throw_runtime("slice indices must be integers or None");
    return v.as_int();
  };
  std::optional<int64_t> start = bound(e.start), stop = bound(e.stop), step = bound(e.step);
  pos_ = e.pos;
  return get_slice(obj, start, stop, step);
}

bool Renderer::eval_test(const TestExpr& e) {
  Value operand = eval(*e.operand);
  CallArgs args = eval_args(e.args);
  pos_ = e.pos;
  bool result = call_test(e.name, operand, args);
  return e.negated ? !result : result;
}

}  // namespace kvlm::jinja
