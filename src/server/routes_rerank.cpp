// POST /rerank, /v1/rerank (llama-server's Jina/Cohere shape) and vLLM's
// POST /v1/score: each (query, document) pair is one prompt in the model's
// rerank format (tokenizer/rerank_prompt.h), run as an embedding request of
// its last token's raw hidden state, batched with whatever else runs; the
// reranker's head (model/rank_head.h) turns each state into a score.
#include <ctime>

#include <fmt/format.h>

#include "common/error.h"
#include "common/log.h"
#include "engine/engine.h"
#include "model/model.h"
#include "server/routes.h"
#include "server/routes_choices.h"
#include "wire/llamacpp/rerank.h"
#include "wire/openai/json_text.h"

namespace kvlm {
namespace {

// The pairs' prompts, or nullopt after answering 400 for one the context
// cannot hold (named by the field it came from: documents[i], text_2[i]).
std::optional<std::vector<std::vector<int32_t>>> pair_prompts(const ServerContext& ctx,
                                                             const std::vector<llamacpp::RankPair>& pairs,
                                                             const char* param, http::Response& res) {
  const auto limit = static_cast<size_t>(ctx.engine.max_model_len());
  std::vector<std::vector<int32_t>> out;
  for (size_t i = 0; i < pairs.size(); ++i) {
    const size_t num_bytes = pairs[i].query.size() + pairs[i].document.size();
    const std::string where = fmt::format("{}[{}]", param, i);
    std::string size;  // what made it too long
    if (num_bytes > ctx.max_prompt_bytes) {
      size = fmt::format("{} bytes", num_bytes);  // refused before tokenizing
    } else {
      out.push_back(rerank_prompt(ctx.engine.tokenizer(), ctx.rerank_format, pairs[i].query, pairs[i].document));
      if (out.back().size() < limit) continue;
      size = fmt::format("{} tokens", out.back().size());
    }
    openai::RequestError e{400, fmt::format("This model's maximum context length is {} tokens. However, the pair "
                                            "of the query and {} is longer ({}).", limit, where, size),
                           where};
    e.code = "context_length_exceeded";
    send_error(res, e);
    return std::nullopt;
  }
  return out;
}

// Every pair's score, in order, with the prompt tokens they took; nullopt
// after answering an error.
std::optional<std::vector<float>> score_pairs(ServerContext& ctx, const ServedModel& model,
                                              const std::vector<llamacpp::RankPair>& pairs, const char* param, const http::Request& req, http::Response& res,
                                              int64_t& num_tokens) {
  std::optional<std::vector<std::vector<int32_t>>> prompts = pair_prompts(ctx, pairs, param, res);
  if (!prompts) return std::nullopt;
  num_tokens = 0;
  for (const auto& p : *prompts) num_tokens += static_cast<int64_t>(p.size());
  // llama.cpp pools the last token for Qwen3's rank head, before any norm of its own.
  const auto states = run_pooled(ctx, std::move(*prompts), {Pooling::kLast, false, model.lora}, req, res);
  if (!states) return std::nullopt;
  std::vector<float> scores;
  for (const std::vector<float>& h : *states) scores.push_back(ctx.rank_head->score(h));
  charge_tokens(req, num_tokens);  // the API key's tokens per minute
  return scores;
}

// The served name the answer gives, or nullopt after answering 404 for
// another model or 400 for one that is not a reranker.
std::optional<ServedModel> rank_model(const ServerContext& ctx, const std::string& asked, http::Response& res) {
  std::optional<ServedModel> model = served_model(ctx, asked, res);
  if (model && !ctx.rank_head) {
    send_error(res, {400, ctx.rank_error, std::string("model")});
    return std::nullopt;
  }
  return model;
}

}  // namespace

void handle_rerank(ServerContext& ctx, const http::Request& req, http::Response& res) {
  auto body = parse_body(req, res);
  if (!body) return;
  auto parsed = llamacpp::parse_rerank_request(*body);
  if (auto* e = std::get_if<openai::RequestError>(&parsed)) return send_error(res, *e);
  const auto& r = std::get<llamacpp::RerankRequest>(parsed);
  const std::optional<ServedModel> model = rank_model(ctx, r.model, res);
  if (!model) return;
  int64_t num_tokens = 0;
  const std::optional<std::vector<float>> scores = score_pairs(ctx, *model, r.pairs, "documents", req, res, num_tokens);
  if (!scores) return;
  res.set_content(openai::dump_json(llamacpp::rerank_body(r, *scores, model->name, num_tokens)), "application/json");
}

void handle_score(ServerContext& ctx, const http::Request& req, http::Response& res) {
  auto body = parse_body(req, res);
  if (!body) return;
  auto parsed = llamacpp::parse_score_request(*body);
  if (auto* e = std::get_if<openai::RequestError>(&parsed)) return send_error(res, *e);
  const auto& r = std::get<llamacpp::ScoreRequest>(parsed);
  const std::optional<ServedModel> model = rank_model(ctx, r.model, res);
  if (!model) return;
  int64_t num_tokens = 0;
  const std::optional<std::vector<float>> scores = score_pairs(ctx, *model, r.pairs, "text_2", req, res, num_tokens);
  if (!scores) return;
  const openai::Json answer = llamacpp::score_body(*scores, model->name, num_tokens, openai::new_id("score"),
                                           static_cast<int64_t>(std::time(nullptr)));
  res.set_content(openai::dump_json(answer), "application/json");
}

void set_reranker(ServerContext& ctx, const Model& model) {
  try {
    ctx.rank_head = RankHead::load(model);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kUnsupported) throw;
    ctx.rank_error = fmt::format("{}; /rerank and /v1/score need a reranker", e.what());
    return;
  }
  const Metadata& m = model.gguf().metadata();
  ctx.rerank_format.rerank_template = m.get_string("tokenizer.chat_template.rerank");
  ctx.rerank_format.add_sep = m.get_bool("tokenizer.ggml.add_sep_token").value_or(false);
  log_info("reranker: {} labels, {}", ctx.rank_head->num_labels(),
           ctx.rerank_format.rerank_template ? "the model's rerank template" : "query and document joined by EOS/SEP");
}

}  // namespace kvlm
