#include "server/routes_tools.h"

#include <random>
#include <string>
#include <unordered_set>

#include <fmt/format.h>

#include "chat/chat_template.h"
#include "chat/tool_prompt.h"
#include "common/error.h"
#include "constrain/constraint.h"
#include "constrain/grammar_cache.h"

namespace kvlm {

using openai::Json;

namespace {

// The tools a call may name (all, or the named one), with their schemas:
// no parameters means none ({}), not any object.
struct CallableTool {
  size_t index;
  std::string name;
  Json schema;
  constrain::SchemaMode mode;
};

std::vector<CallableTool> callable_tools(const openai::ChatRequest& r) {
  std::vector<CallableTool> out;
  for (size_t i = 0; i < r.tools.size(); ++i) {
    const Json& fn = r.tools[i]["function"];
    std::string name = fn["name"].get<std::string>();
    if (r.tool_choice.kind == openai::ToolChoice::Kind::kNamed && name != r.tool_choice.name) continue;
    Json schema = fn.contains("parameters") && !fn["parameters"].is_null()
                      ? fn["parameters"]
                      : Json{{"type", "object"}, {"properties", Json::object()}, {"additionalProperties", false}};
    // strict: true schemas were checked while parsing; the others leave
    // what the grammar cannot enforce unenforced (constrain/json_schema.h).
    const bool strict = fn.contains("strict") && fn["strict"].is_boolean() && fn["strict"].get<bool>();
    out.push_back({i, std::move(name), std::move(schema),
                   strict ? constrain::SchemaMode::kStrict : constrain::SchemaMode::kLenient});
  }
  return out;
}

// A pythonic call's keyword arguments for an object schema: its properties
// as NAME=VALUE (JSON values, which the parser takes), the required ones
// first in their order, then each optional one or not.
constrain::Expr keyword_arguments(constrain::Grammar& g, const Json& schema, constrain::SchemaMode mode) {
  using constrain::Expr;
  const Json props = schema.contains("properties") && schema["properties"].is_object() ? schema["properties"] : Json::object();
  // A set of the required names: a search of the list for each property
  // was quadratic in the schema's size.
  std::unordered_set<std::string> required;
  if (schema.contains("required") && schema["required"].is_array())
    for (const Json& name : schema["required"])
      if (name.is_string()) required.insert(name.get<std::string>());
  std::vector<Expr> must, may;
  for (const auto& [name, sub] : props.items()) {
    const bool is_required = required.count(name) > 0;
    (is_required ? must : may).push_back(constrain::literal(name + "=") + constrain::json_schema_expr(g, sub, mode));
  }
  // tail[j]: the optional ones from j, each after ", " or left out.
  std::vector<Expr> tail(may.size() + 1);
  for (size_t j = may.size(); j-- > 0;) tail[j] = constrain::optional(constrain::literal(", ") + may[j]) + tail[j + 1];
  if (!must.empty()) {
    // One flat sequence: adding them one by one nested it two levels
    // deeper each time, and the compiler's recursion over it overflowed the
    // stack at 40,000 required properties.
    std::vector<Expr> parts{must[0]};
    for (size_t i = 1; i < must.size(); ++i) {
      parts.push_back(constrain::literal(", "));
      parts.push_back(must[i]);
    }
    parts.push_back(tail[0]);
    return constrain::seq(std::move(parts));
  }
  // No required one: the first written is any optional one, with no ", " before it.
  Expr first;  // none at all
  for (size_t i = may.size(); i-- > 0;) first = constrain::alt({may[i] + tail[i + 1], first});
  return first;
}

// More than one call: parallel_tool_calls and no function named (a named
// tool_choice is one call of it, as OpenAI answers).
bool many_calls(const openai::ChatRequest& r) {
  return r.parallel_tool_calls && r.tool_choice.kind != openai::ToolChoice::Kind::kNamed;
}

std::shared_ptr<const constrain::Program> tool_call_program(ToolCallFormat f, const openai::ChatRequest& r,
                                                            const std::vector<CallableTool>& tools) {
  const ToolCallShape shape = tool_call_shape(f);
  constrain::Grammar g;
  std::vector<constrain::Expr> calls;
  for (const CallableTool& t : tools) {
    try {
      const constrain::Expr args = f == ToolCallFormat::kPythonic ? keyword_arguments(g, t.schema, t.mode)
                                                                  : constrain::json_schema_expr(g, t.schema, t.mode);
      calls.push_back(constrain::literal(shape.call_prefix + t.name + shape.name_to_arguments) + args +
                      constrain::literal(shape.call_suffix));
    } catch (const constrain::GrammarLimitError&) {
      throw;
    } catch (const Error& e) {
      throw_error(ErrorCode::kInvalidArgument, "tools[{}].function.parameters: {}", t.index, e.what());
    }
  }
  const constrain::RuleId call = g.add_rule("tool_call", constrain::alt(std::move(calls)));
  constrain::Expr body = constrain::ref(call);
  if (shape.parallel && many_calls(r))
    body = body + constrain::repeat(constrain::literal(shape.separator) + constrain::ref(call), 0, std::nullopt);
  g.set_root(constrain::literal(shape.prefix) + body + constrain::literal(shape.suffix));
  return constrain::grammar_program(g);
}

// What the tool-call grammar compiles from, as text: the cache's key.
std::string tool_call_key(ToolCallFormat f, const openai::ChatRequest& r, const std::vector<CallableTool>& tools) {
  std::string key = fmt::format("tools {} {}\n", tool_call_format_name(f), many_calls(r) ? "parallel" : "one");
  for (const CallableTool& t : tools)
    key += fmt::format("{} {} {}\n", t.name, t.mode == constrain::SchemaMode::kStrict ? "strict" : "lenient",
                       constrain::canonical_schema_text(t.schema));
  return key;
}

}  // namespace

std::shared_ptr<const constrain::Program> tool_call_constraint(ToolCallFormat f, const openai::ChatRequest& r,
                                                               constrain::GrammarCache* grammars) {
  using Kind = openai::ToolChoice::Kind;
  if (r.tools.is_null() || (r.tool_choice.kind != Kind::kRequired && r.tool_choice.kind != Kind::kNamed))
    return nullptr;
  const std::vector<CallableTool> tools = callable_tools(r);
  auto build = [&] { return tool_call_program(f, r, tools); };
  return grammars ? grammars->get(tool_call_key(f, r, tools), build) : build();
}

std::string new_tool_call_id(ToolCallFormat f) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  if (f != ToolCallFormat::kMistral) return fmt::format("call_{:016x}{:08x}", rng(), static_cast<uint32_t>(rng()));
  static constexpr std::string_view kAlnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id;
  for (int i = 0; i < 9; ++i) id += kAlnum[rng() % kAlnum.size()];
  return id;
}

Json tool_calls_json(const std::vector<AnsweredCall>& calls) {
  Json out = Json::array();
  for (const AnsweredCall& c : calls)
    out.push_back(Json{{"id", c.id},
                       {"type", "function"},
                       {"function", Json{{"name", c.name}, {"arguments", c.arguments}}}});
  return out;
}

}  // namespace kvlm
