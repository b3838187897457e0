#include "server/routes_tools.h"

#include <random>

#include <fmt/format.h>

#include "chat/chat_template.h"
#include "chat/tool_prompt.h"
#include "common/error.h"
#include "constrain/constraint.h"

namespace kvlm {

using openai::Json;

TemplateInput template_input(const ServerContext& ctx, const openai::ChatRequest& r) {
  ToolPromptMessages m = tool_prompt_messages(ctx.chat_template->source(), r.messages, r.tools,
                                              r.tool_choice.kind != openai::ToolChoice::Kind::kNone);
  return {std::move(m.messages), r.template_extra, std::move(m.without_system)};
}

std::shared_ptr<const constrain::Program> tool_call_constraint(ToolCallFormat f, const openai::ChatRequest& r) {
  using Kind = openai::ToolChoice::Kind;
  if (r.tools.is_null() || (r.tool_choice.kind != Kind::kRequired && r.tool_choice.kind != Kind::kNamed))
    return nullptr;
  const ToolCallShape shape = tool_call_shape(f);
  constrain::Grammar g;
  std::vector<constrain::Expr> calls;
  for (size_t i = 0; i < r.tools.size(); ++i) {
    const Json& fn = r.tools[i]["function"];
    const std::string name = fn["name"].get<std::string>();
    if (r.tool_choice.kind == Kind::kNamed && name != r.tool_choice.name) continue;
    // No parameters: the function takes none ({}).
    const Json schema = fn.contains("parameters") ? fn["parameters"] : Json{{"type", "object"}};
    try {
      calls.push_back(constrain::literal(shape.call_prefix + name + shape.name_to_arguments) +
                      constrain::json_schema_expr(g, schema) + constrain::literal(shape.call_suffix));
    } catch (const Error& e) {
      throw_error(ErrorCode::kInvalidArgument, "tools[{}].function.parameters: {}", i, e.what());
    }
  }
  const constrain::RuleId call = g.add_rule("tool_call", constrain::alt(std::move(calls)));
  constrain::Expr body = constrain::ref(call);
  if (shape.parallel && r.parallel_tool_calls)
    body = body + constrain::repeat(constrain::literal(shape.separator) + constrain::ref(call), 0, std::nullopt);
  g.set_root(constrain::literal(shape.prefix) + body + constrain::literal(shape.suffix));
  return constrain::grammar_program(g);
}

std::string new_tool_call_id(ToolCallFormat f) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  if (f != ToolCallFormat::kMistral) return fmt::format("call_{:016x}{:08x}", rng(), static_cast<uint32_t>(rng()));
  static constexpr std::string_view kAlnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id;
  for (int i = 0; i < 9; ++i) id += kAlnum[rng() % kAlnum.size()];
  return id;
}

Json tool_calls_json(ToolCallFormat f, const std::vector<ToolCall>& calls) {
  Json out = Json::array();
  for (const ToolCall& c : calls)
    out.push_back(Json{{"id", new_tool_call_id(f)},
                       {"type", "function"},
                       {"function", Json{{"name", c.name}, {"arguments", c.arguments}}}});
  return out;
}

}  // namespace kvlm
