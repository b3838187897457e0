// llama.cpp's POST /infill: fill-in-the-middle with other files as context,
// generated as a completion (batched, prefix-cached, with its sampling and
// stop options) and answered in llama.cpp's native shape (InfillWriter).
#include <ctime>

#include "constrain/grammar_cache.h"
#include "engine/engine.h"
#include "server/routes.h"
#include "server/routes_choices.h"
#include "tokenizer/fim.h"
#include "wire/llamacpp/infill.h"

namespace kvlm {

void handle_infill(ServerContext& ctx, const http::Request& req, http::Response& res) {
  auto body = parse_body(req, res);
  if (!body) return;
  auto parsed = llamacpp::parse_infill_request(*body);
  if (auto* e = std::get_if<openai::RequestError>(&parsed)) return send_error(res, *e);
  llamacpp::InfillRequest& r = std::get<llamacpp::InfillRequest>(parsed);
  auto options = openai::parse_completion_request(r.completion_body);
  if (auto* e = std::get_if<openai::RequestError>(&options)) return send_error(res, *e);
  auto& c = std::get<openai::CompletionRequest>(options);
  const std::optional<ServedModel> model = served_model(ctx, c.options.model, res);
  if (!model) return;
  size_t num_bytes = r.input_prefix.size() + r.input_suffix.size() + r.prompt.size();
  FimParts parts{.prefix = std::move(r.input_prefix), .suffix = std::move(r.input_suffix), .middle = std::move(r.prompt)};
  for (llamacpp::InfillChunk& chunk : r.input_extra) {
    num_bytes += chunk.filename.size() + chunk.text.size();
    parts.extra.push_back({std::move(chunk.filename), std::move(chunk.text)});
  }
  if (num_bytes > ctx.max_prompt_bytes)
    return send_error(res, {400, fmt::format("the infill's parts have {} bytes; at most {} fit the context", num_bytes,
                                             ctx.max_prompt_bytes), std::string("input_prefix")});
  std::optional<std::vector<int32_t>> ids = fim_prompt(ctx.engine.tokenizer(), parts);
  if (!ids) return send_no_fim_tokens(res, "input_suffix");
  Generation gen{.chat = false, .id = openai::new_id("cmpl"), .created = static_cast<int64_t>(std::time(nullptr)),
                 .model = model->name, .lora = model->lora, .options = std::move(c.options)};
  gen.prompts.push_back(std::move(*ids));
  gen.prompt_texts.emplace_back();
  gen.writer = std::make_shared<llamacpp::InfillWriter>(gen.model);
  run_generation(ctx, std::move(gen), req, res);
}

}  // namespace kvlm
