// POST /v1/completions and /v1/chat/completions: validate and build the
// prompt (here; tools in routes_tools.cpp), submit its choices to the engine
// (routes_submit.cpp), then answer with one JSON body (routes_choices.cpp) or
// an SSE stream (routes_stream.cpp).
#include <ctime>

#include <fmt/format.h>

#include "chat/chat_prompt.h"
#include "common/error.h"
#include "engine/engine.h"
#include "server/openai/json_text.h"
#include "server/routes.h"
#include "server/routes_choices.h"
#include "server/routes_tools.h"
#include "tokenizer/tokenizer.h"

namespace kvlm {
namespace {

using openai::Json;

int64_t unix_now() { return static_cast<int64_t>(std::time(nullptr)); }

// A prompt of more bytes (or ids) than the context can hold tokens of is
// refused before tokenizing or decoding it: the answer run() would give after
// spending seconds on a 32 MiB prompt, at no cost.
bool refuse_long_prompt(const ServerContext& ctx, httplib::Response& res, size_t num_bytes, size_t num_ids,
                        const char* param) {
  const auto limit = static_cast<size_t>(ctx.engine.max_model_len());
  if (num_bytes <= ctx.max_prompt_bytes && num_ids < limit) return false;
  send_error(res, {400, fmt::format("This model's maximum context length is {} tokens. However, your {} is longer "
                                    "({} bytes, {} token ids).", limit, param, num_bytes, num_ids),
                   std::string(param)});
  return true;
}

// The bytes of every message's text: a lower bound of the rendered prompt's.
size_t message_bytes(const openai::Json& messages) {
  size_t n = 0;
  for (const openai::Json& m : messages)
    if (const auto it = m.find("content"); it != m.end() && it->is_string()) n += it->get_ref<const std::string&>().size();
  return n;
}

}  // namespace

void handle_completions(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  auto body = parse_body(req, res);
  if (!body) return;
  auto parsed = openai::parse_completion_request(*body);
  if (auto* e = std::get_if<openai::RequestError>(&parsed)) return send_error(res, *e);
  auto& r = std::get<openai::CompletionRequest>(parsed);
  Generation gen{false, openai::new_id("cmpl"), unix_now(), std::move(r.options), {}, r.echo, {}, std::nullopt, nullptr};
  if (auto* text = std::get_if<std::string>(&r.prompt)) {
    if (refuse_long_prompt(ctx, res, text->size(), 0, "prompt")) return;
    gen.prompt = ctx.engine.tokenizer().encode(*text, /*add_special=*/true, /*parse_special=*/true);
    if (gen.echo) gen.prompt_text = *text;
  } else {
    gen.prompt = std::get<std::vector<int32_t>>(r.prompt);
    if (refuse_long_prompt(ctx, res, 0, gen.prompt.size(), "prompt")) return;
    if (gen.echo) {
      try {
        gen.prompt_text = ctx.engine.tokenizer().decode(gen.prompt);
      } catch (const Error& e) {
        return send_error(res, {400, e.what(), std::string("prompt")});
      }
    }
  }
  run_generation(ctx, std::move(gen), req, res);
}

void handle_chat_completions(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  auto body = parse_body(req, res);
  if (!body) return;
  auto parsed = openai::parse_chat_request(*body);
  if (auto* e = std::get_if<openai::RequestError>(&parsed)) return send_error(res, *e);
  auto& r = std::get<openai::ChatRequest>(parsed);
  if (!ctx.chat_template) return send_error(res, {400, ctx.chat_template_error, std::string("messages")});
  if (refuse_long_prompt(ctx, res, message_bytes(r.messages), 0, "messages")) return;
  Generation gen{true, openai::new_id("chatcmpl"), unix_now(), std::move(r.options), {}, false, {}, std::nullopt, nullptr};
  if (!r.tools.is_null() && r.tool_choice.kind != openai::ToolChoice::Kind::kNone)
    gen.tool_calls = Generation::ToolCalls{ctx.tool_format, r.parallel_tool_calls};
  try {
    gen.constraint = tool_call_constraint(ctx.tool_format, r);
  } catch (const Error& e) {
    return send_error(res, {400, e.what(), std::string("tools")});
  }
  const TemplateInput in = template_input(ctx, r);
  try {
    gen.prompt = encode_chat(ctx.engine.tokenizer(), *ctx.chat_template, in.messages, /*add_generation_prompt=*/true,
                             in.extra);
  } catch (const Error& e) {
    // A template that refuses a system message gets the tools described in
    // the first user message instead.
    try {
      if (!in.messages_without_system) throw;
      gen.prompt = encode_chat(ctx.engine.tokenizer(), *ctx.chat_template, *in.messages_without_system,
                               /*add_generation_prompt=*/true, in.extra);
    } catch (const Error&) {
      // The template's own words, e.g. "System role not supported".
      return send_error(res, {400, e.what(), std::string("messages")});
    }
  }
  run_generation(ctx, std::move(gen), req, res);
}

}  // namespace kvlm
