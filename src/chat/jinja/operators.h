// Python's arithmetic and Jinja's attribute / item access over values.
// Failures (a string minus a number, an undefined operand) throw RuntimeError.
#pragma once

#include <optional>
#include <string_view>

#include "chat/jinja/ast.h"
#include "chat/jinja/value.h"

namespace kvlm::jinja {

Value binary_op(BinaryOp op, const Value& lhs, const Value& rhs);
Value unary_op(UnaryOp op, const Value& operand);

// obj.name: Python attributes first (str.upper, dict.items), then dict keys;
// a miss is undefined with Jinja2's hint. Undefined `obj` throws, as in Jinja2.
Value get_attr(const Value& obj, std::string_view name);
// obj[key]: items first, then (for string keys) attributes.
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step] with Python's clamping; absent parts are nullopt.
Value get_slice(const Value& obj, std::optional<int64_t> start, std::optional<int64_t> stop,
                std::optional<int64_t> step);
// Jinja2's attribute= argument of filters: "a.b.0" walks get_item part by part.
Value get_attr_path(const Value& obj, std::string_view path);

}  // namespace kvlm::jinja
