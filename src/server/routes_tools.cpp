#include "server/routes_tools.h"

#include <random>

#include <fmt/format.h>

#include "chat/tool_prompt.h"

namespace kvlm {

using openai::Json;

TemplateInput template_input(const ServerContext& ctx, const openai::ChatRequest& r) {
  TemplateInput in{template_messages(ctx.tool_format, r.messages), r.template_extra, std::nullopt};
  const bool describe = !r.tools.is_null() && !ctx.template_renders_tools &&
                        r.tool_choice.kind != openai::ToolChoice::Kind::kNone;
  if (!describe) return in;
  const std::string text = tools_system_prompt(ctx.tool_format, r.tools);
  in.messages_without_system = with_tools_prompt(in.messages, text, /*into_system=*/false);
  in.messages = with_tools_prompt(in.messages, text, /*into_system=*/true);
  return in;
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
