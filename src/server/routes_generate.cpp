// POST /v1/completions and /v1/chat/completions: validate and build the
// prompt (here; tools in routes_tools.cpp), submit its choices to the engine
// (routes_submit.cpp), then answer with one JSON body (routes_choices.cpp) or
// an SSE stream (routes_stream.cpp).
#include <algorithm>
#include <ctime>
#include <span>

#include <fmt/format.h>

#include "chat/chat_prompt.h"
#include "common/error.h"
#include "constrain/grammar_cache.h"
#include "engine/engine.h"
#include "server/routes.h"
#include "server/routes_choices.h"
#include "server/routes_tools.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/fim.h"
#include "wire/openai/chat_render.h"
#include "wire/openai/json_text.h"
#include "wire/openai/kv_chunks.h"

namespace kvlm {
namespace {

using openai::Json;

int64_t unix_now() { return static_cast<int64_t>(std::time(nullptr)); }

// A prompt of more bytes (or ids) than the context can hold tokens of is
// refused before tokenizing or decoding it: the answer run() would give after
// spending seconds on a 32 MiB prompt, at no cost.
bool refuse_long_prompt(const ServerContext& ctx, http::Response& res, size_t num_bytes, size_t num_ids,
                        const std::string& param) {
  const auto limit = static_cast<size_t>(ctx.engine.max_model_len());
  if (num_bytes <= ctx.max_prompt_bytes && num_ids < limit) return false;
  openai::RequestError e{400, fmt::format("This model's maximum context length is {} tokens. However, your {} is longer "
                                          "({} bytes, {} token ids).", limit, param, num_bytes, num_ids), param};
  e.code = "context_length_exceeded";
  send_error(res, e);
  return true;
}

// A completions prompt's token ids (and, for echo, its text) with its KV
// chunks (CompletionRequest::kv_chunks); false after answering 400. `param`
// names it ("prompt", "prompt[1]").
bool add_prompt(const ServerContext& ctx, const openai::Prompt& p, const std::string& param,
                std::span<const openai::PromptSpan> chunks, Generation& gen, http::Response& res) {
  if (const auto* text = std::get_if<std::string>(&p)) {
    if (refuse_long_prompt(ctx, res, text->size(), 0, param)) return false;
    PieceIds pieces = openai::completion_prompt_pieces(ctx.engine.tokenizer(), p, chunks);
    gen.prompts.push_back(std::move(pieces.ids));
    set_last_prompt_chunks(gen, pieces.chunks);
    gen.prompt_texts.push_back(gen.echo ? *text : "");
    return true;
  }
  const auto& ids = std::get<std::vector<int32_t>>(p);
  if (refuse_long_prompt(ctx, res, 0, ids.size(), param)) return false;
  std::string text;
  if (gen.echo) {
    try {
      text = echo_text(ctx.engine.tokenizer(), ids).text;
    } catch (const Error& e) {
      send_error(res, {400, e.what(), param});
      return false;
    }
  }
  gen.prompts.push_back(ids);
  set_last_prompt_chunks(gen, openai::completion_prompt_pieces(ctx.engine.tokenizer(), p, chunks).chunks);
  gen.prompt_texts.push_back(std::move(text));
  return true;
}

// A fill-in-the-middle prompt (tokenizer/fim.h): prefix, the gap, suffix.
// False after answering 400 for a model without FIM tokens.
bool add_fim_prompt(const ServerContext& ctx, const std::string& prefix, const std::string& suffix, Generation& gen,
                    http::Response& res) {
  if (refuse_long_prompt(ctx, res, prefix.size() + suffix.size(), 0, "prompt")) return false;
  std::optional<std::vector<int32_t>> ids = fim_prompt(ctx.engine.tokenizer(), {.prefix = prefix, .suffix = suffix});
  if (!ids) {
    send_no_fim_tokens(res, "suffix");
    return false;
  }
  gen.prompts.push_back(std::move(*ids));
  gen.prompt_texts.emplace_back();
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

void send_no_fim_tokens(http::Response& res, const std::string& param) {
  openai::RequestError e{400, fmt::format("this model has no fill-in-the-middle tokens (fim_pre, fim_suf, fim_mid): "
                                          "'{}' needs a code model trained for it", param), param};
  e.code = "unsupported_parameter";
  send_error(res, e);
}

std::optional<ServedModel> served_model(const ServerContext& ctx, const std::string& asked, http::Response& res) {
  if (asked.empty()) return ServedModel{ctx.model_names[0], nullptr};
  for (const std::string& name : ctx.model_names)
    if (name == asked) return ServedModel{asked, nullptr};
  if (std::shared_ptr<const LoraAdapter> lora = ctx.loras->find(asked)) return ServedModel{asked, std::move(lora)};
  send_model_not_found(res, asked);
  return std::nullopt;
}

void handle_completions(ServerContext& ctx, const http::Request& req, http::Response& res) {
  auto body = parse_body(req, res);
  if (!body) return;
  auto parsed = openai::parse_completion_request(*body);
  if (auto* e = std::get_if<openai::RequestError>(&parsed)) return send_error(res, *e);
  auto& r = std::get<openai::CompletionRequest>(parsed);
  try {
    if (auto e = openai::compile_grammars(r, ctx.grammars.get())) return send_error(res, *e);
  } catch (const constrain::GrammarLimitError& e) {
    return send_grammar_refusal(ctx, res, e, "response_format");
  }
  const std::optional<ServedModel> model = served_model(ctx, r.options.model, res);
  if (!model) return;
  Generation gen{.chat = false, .id = openai::new_id("cmpl"), .created = unix_now(), .model = model->name,
                 .lora = model->lora, .options = std::move(r.options)};
  gen.echo = r.echo;
  if (gen.options.prompt_token_ids) {
    // The router's resumed stream: the prompt as the first server tokenized it.
    if (refuse_long_prompt(ctx, res, 0, gen.options.prompt_token_ids->size(), "prompt_token_ids")) return;
    gen.prompts.push_back(*gen.options.prompt_token_ids);
    gen.prompt_texts.emplace_back();
  } else if (r.suffix) {
    for (const openai::Prompt& p : r.prompts)
      if (!add_fim_prompt(ctx, std::get<std::string>(p), *r.suffix, gen, res)) return;
  } else {
    // kv_chunks mark the one prompt (the parser refuses them with a list).
    for (size_t i = 0; i < r.prompts.size(); ++i)
      if (!add_prompt(ctx, r.prompts[i], r.prompts.size() == 1 ? "prompt" : fmt::format("prompt[{}]", i), r.kv_chunks,
                      gen, res))
        return;
  }
  run_generation(ctx, std::move(gen), req, res);
}

namespace {

// The thinking section of a chat generation (gen.prompts[0] rendered): its
// thinking answered apart unless the request or the server says none; and
// for a grammar (which applies to the answer) or a thinking budget, the
// engine told where the section ends, its open forced when the template
// leaves opening it to the model. A prompt that closed the section (thinking
// turned off) has none for the engine.
void set_reasoning(const ServerContext& ctx, const openai::ChatRequest& r, Generation& gen) {
  if (!ctx.reasoning_markers || !r.separate_reasoning.value_or(ctx.separate_reasoning)) return;
  const ReasoningMarkers& m = *ctx.reasoning_markers;
  const Tokenizer& tok = ctx.engine.tokenizer();
  const std::vector<int32_t>& prompt = gen.prompts[0];
  const std::string tail = tok.decode(std::span<const int32_t>(prompt).last(std::min<size_t>(prompt.size(), 32)));
  const bool opened = prompt_opens_reasoning(tail, m);
  gen.reasoning = Generation::Reasoning{m, opened};
  const bool constrained = gen.constraint || gen.options.constraint;
  if (prompt_closes_reasoning(tail, m) || (!constrained && !r.thinking_budget)) return;
  // A budget of nothing opens no section (one the prompt opened is closed at once).
  if (!opened && r.thinking_budget == 0) return;
  GenerateRequest::Thinking t;
  t.close = m.close;
  t.opened = opened;
  t.close_tokens = tok.encode("\n" + m.close + "\n\n", /*add_special=*/false, /*parse_special=*/true);
  if (!opened) t.open_tokens = tok.encode(m.open + "\n", /*add_special=*/false, /*parse_special=*/true);
  t.budget = r.thinking_budget.value_or(-1);
  gen.thinking = std::move(t);
}

}  // namespace

std::optional<Generation> chat_generation(ServerContext& ctx, openai::ChatRequest r, std::string id,
                                          http::Response& res) {
  const std::optional<ServedModel> model = served_model(ctx, r.options.model, res);
  if (!model) return std::nullopt;
  if (!ctx.chat_template) {
    send_error(res, {400, ctx.chat_template_error, std::string("messages")});
    return std::nullopt;
  }
  if (refuse_long_prompt(ctx, res, message_bytes(r.messages), 0, "messages")) return std::nullopt;
  Generation gen{.chat = true, .id = std::move(id), .created = unix_now(), .model = model->name,
                 .lora = model->lora, .options = std::move(r.options)};
  if (!r.tools.is_null() && r.tool_choice.kind != openai::ToolChoice::Kind::kNone) {
    // A named function is one call of it, as OpenAI answers (and its grammar allows).
    const bool named = r.tool_choice.kind == openai::ToolChoice::Kind::kNamed;
    gen.tool_calls = Generation::ToolCalls{ctx.tool_format, r.parallel_tool_calls && !named};
    if (r.legacy_functions) gen.tool_calls->style = openai::CallStyle::kFunctionCall;
    for (const Json& t : r.tools) gen.tool_calls->names.push_back(t["function"]["name"].get<std::string>());
  }
  try {
    gen.constraint = tool_call_constraint(ctx.tool_format, r, ctx.grammars.get());
  } catch (const constrain::GrammarLimitError& e) {
    send_grammar_refusal(ctx, res, e, "tools");
    return std::nullopt;
  } catch (const Error& e) {
    send_error(res, {400, e.what(), std::string("tools")});
    return std::nullopt;
  }
  gen.prompt_texts.emplace_back();
  if (gen.options.prompt_token_ids) {
    if (refuse_long_prompt(ctx, res, 0, gen.options.prompt_token_ids->size(), "prompt_token_ids")) return std::nullopt;
    gen.prompts.push_back(*gen.options.prompt_token_ids);  // rendered by the server this stream began on
  } else {
    try {
      add_auto_kv_chunks(ctx, r);
      PieceIds pieces = render_chat_prompt_pieces(ctx.engine.tokenizer(), *ctx.chat_template, r);
      gen.prompts.push_back(std::move(pieces.ids));
      set_last_prompt_chunks(gen, pieces.chunks);
    } catch (const Error& e) {
      send_error(res, {400, e.what(), std::string("messages")});
      return std::nullopt;
    }
  }
  set_reasoning(ctx, r, gen);
  return gen;
}

std::optional<openai::ChatRequest> parse_chat(ServerContext& ctx, const Json& body, http::Response& res) {
  auto parsed = openai::parse_chat_request(body);
  if (auto* e = std::get_if<openai::RequestError>(&parsed)) {
    send_error(res, *e);
    return std::nullopt;
  }
  try {
    if (auto e = openai::compile_grammars(std::get<openai::ChatRequest>(parsed), ctx.grammars.get())) {
      send_error(res, *e);
      return std::nullopt;
    }
  } catch (const constrain::GrammarLimitError& e) {
    send_grammar_refusal(ctx, res, e, "response_format");
    return std::nullopt;
  }
  return std::move(std::get<openai::ChatRequest>(parsed));
}

void handle_chat_completions(ServerContext& ctx, const http::Request& req, http::Response& res) {
  auto body = parse_body(req, res);
  if (!body) return;
  std::optional<openai::ChatRequest> r = parse_chat(ctx, *body, res);
  if (!r) return;
  std::optional<Generation> gen = chat_generation(ctx, std::move(*r), openai::new_id("chatcmpl"), res);
  if (gen) run_generation(ctx, std::move(*gen), req, res);
}

}  // namespace kvlm
