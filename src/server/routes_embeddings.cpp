// POST /v1/embeddings: each input runs through the engine as an embedding
// request (GenerateRequest::pooling), batched with whatever else is running;
// the answer is OpenAI's list of vectors, as floats or base64.
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "common/error.h"
#include "common/log.h"
#include "engine/engine.h"
#include "model/config.h"
#include "server/routes.h"
#include "server/routes_choices.h"
#include "tokenizer/tokenizer.h"
#include "wire/openai/json_text.h"

namespace kvlm {
namespace {

using openai::Json;

// Inputs go to the engine this many at a time: they batch, and a request of
// 2,048 inputs neither fills the queue nor holds 2,048 streams.
constexpr size_t kWave = 64;

// OpenAI's base64 encoding: the float32 values' little-endian bytes.
std::string base64_floats(const std::vector<float>& v) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes(v.size() * sizeof(float), '\0');
  std::memcpy(bytes.data(), v.data(), bytes.size());  // x86-64 and aarch64 are little-endian
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t w = 0;
    for (size_t k = 0; k < 3; ++k) w = w << 8 | (k < n ? static_cast<uint8_t>(bytes[i + k]) : 0u);
    for (size_t k = 0; k < 4; ++k) out += k <= n ? kAlphabet[(w >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

// Each input's token ids; nullopt after answering 400 for one the context
// cannot hold.
std::optional<std::vector<std::vector<int32_t>>> input_tokens(const ServerContext& ctx,
                                                             const std::vector<openai::Prompt>& inputs,
                                                             http::Response& res) {
  const auto limit = static_cast<size_t>(ctx.engine.max_model_len());
  std::vector<std::vector<int32_t>> out;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string param = inputs.size() == 1 ? "input" : fmt::format("input[{}]", i);
    const auto* text = std::get_if<std::string>(&inputs[i]);
    std::string size;  // what made it too long
    if (text && text->size() > ctx.max_prompt_bytes) {
      size = fmt::format("{} bytes", text->size());  // refused before tokenizing
    } else {
      out.push_back(text ? ctx.engine.tokenizer().encode(*text, /*add_special=*/true, /*parse_special=*/true)
                         : std::get<std::vector<int32_t>>(inputs[i]));
      if (out.back().size() < limit) continue;
      size = fmt::format("{} tokens", out.back().size());
    }
    openai::RequestError e{400, fmt::format("This model's maximum context length is {} tokens. However, your {} is "
                                            "longer ({}).", limit, param, size),
                           param};
    e.code = "context_length_exceeded";
    send_error(res, e);
    return std::nullopt;
  }
  return out;
}

// Runs one wave of inputs to their end; their vectors are appended to
// `vectors`. False after answering an error (or when the client left).
bool embed_wave(ServerContext& ctx, std::vector<std::vector<int32_t>> prompts, const PooledRun& run,
                InFlightRequests::Ticket& ticket, bool first_wave, const http::Request& req, http::Response& res,
                std::vector<std::vector<float>>& vectors) {
  std::vector<GenerateRequest> gs(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    gs[i].prompt_tokens = std::move(prompts[i]);
    gs[i].max_tokens = 1;
    gs[i].sampling.temperature = 0.f;
    gs[i].pooling = run.pooling;
    gs[i].normalize = run.normalize;
    gs[i].timeout_s = ctx.request_timeout_s;
    gs[i].lora = run.lora;
  }
  Submitted sub;
  {
    std::unique_lock admission(ctx.admission_mu);  // limits.cpp: check and submit as one
    if (first_wave && refuse_when_queue_full(ctx, static_cast<int32_t>(gs.size()), res)) return false;
    try {
      sub.streams = ctx.engine.submit_batch(std::move(gs), 1);
    } catch (const Error& e) {
      send_error(res, error_for(e));
      return false;
    }
  }
  std::vector<RequestId> ids;
  for (const auto& s : sub.streams) ids.push_back(s->id());
  if (!ticket.set_requests(ids)) cancel_all(ctx.engine, sub);  // the drain's deadline has passed
  // Each input is one forward pass: the handler thread waits for them.
  const std::optional<std::vector<Candidate>> done = wait_for_all(ctx, sub, req);
  if (!done) return false;  // the client hung up: nothing to answer
  for (size_t i = 0; i < done->size(); ++i) {
    const Candidate& c = (*done)[i];
    if (c.error || c.reason == FinishReason::kAborted) {
      send_error(res, c.error ? error_for(*c.error) : openai::RequestError{503, "the request was cancelled", {}});
      return false;
    }
    vectors.push_back(sub.streams[i]->stats().embedding);
  }
  return true;
}

Json embeddings_body(const std::vector<std::vector<float>>& vectors, bool base64, const std::string& model,
                     int64_t num_tokens) {
  Json data = Json::array();
  for (size_t i = 0; i < vectors.size(); ++i) {
    Json e = {{"object", "embedding"}, {"index", i}};
    if (base64) {
      e["embedding"] = base64_floats(vectors[i]);
    } else {
      e["embedding"] = vectors[i];
    }
    data.push_back(std::move(e));
  }
  return {{"object", "list"},
          {"data", std::move(data)},
          {"model", model},
          {"usage", {{"prompt_tokens", num_tokens}, {"total_tokens", num_tokens}}}};
}

}  // namespace

void set_pooling(ServerContext& ctx, const ModelConfig& model, const std::string& flag) {
  try {
    ctx.pooling = choose_pooling(model, flag);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kUnsupported) throw;
    ctx.pooling = Pooling::kNone;
    ctx.pooling_error = e.what();
    // A reranker's hidden states are a means to its scores, not embeddings:
    // send its users to the routes that give those.
    if (model.pooling_type == 4)
      ctx.pooling_error = "the model is a reranker (pooling_type 4, rank): score (query, document) pairs with "
                          "POST /v1/rerank (or /rerank, /v1/score); --pooling mean or last embeds with it anyway";
    log_warn("/v1/embeddings: {}", ctx.pooling_error);
  }
}

void handle_embeddings(ServerContext& ctx, const http::Request& req, http::Response& res) {
  auto body = parse_body(req, res);
  if (!body) return;
  auto parsed = openai::parse_embeddings_request(*body);
  if (auto* e = std::get_if<openai::RequestError>(&parsed)) return send_error(res, *e);
  const auto& r = std::get<openai::EmbeddingsRequest>(parsed);
  const std::optional<ServedModel> model = served_model(ctx, r.model, res);
  if (!model) return;
  if (ctx.pooling == Pooling::kNone) return send_error(res, {400, ctx.pooling_error, std::string("model")});
  std::optional<std::vector<std::vector<int32_t>>> prompts = input_tokens(ctx, r.inputs, res);
  if (!prompts) return;
  int64_t num_tokens = 0;
  for (const auto& p : *prompts) num_tokens += static_cast<int64_t>(p.size());
  const auto vectors = run_pooled(ctx, std::move(*prompts), {ctx.pooling, true, model->lora}, req, res);
  if (!vectors) return;
  charge_tokens(req, num_tokens);  // the API key's tokens per minute
  res.set_content(openai::dump_json(embeddings_body(*vectors, r.base64, model->name, num_tokens)), "application/json");
}

std::optional<std::vector<std::vector<float>>> run_pooled(ServerContext& ctx, std::vector<std::vector<int32_t>> prompts,
                                                          const PooledRun& run, const http::Request& req,
                                                          http::Response& res) {
  // Registered before looking at draining(): a drain waits for us or we refuse.
  std::shared_ptr<InFlightRequests::Ticket> ticket = ctx.in_flight.enter();
  if (ctx.in_flight.draining()) {
    res.set_header("Connection", "close");
    send_shutting_down(res, "the server is shutting down; send the request to another replica");
    return std::nullopt;
  }
  std::vector<std::vector<float>> vectors;
  for (size_t first = 0; first < prompts.size(); first += kWave) {
    const size_t last = std::min(prompts.size(), first + kWave);
    std::vector<std::vector<int32_t>> wave(std::make_move_iterator(prompts.begin() + static_cast<ptrdiff_t>(first)),
                                           std::make_move_iterator(prompts.begin() + static_cast<ptrdiff_t>(last)));
    if (!embed_wave(ctx, std::move(wave), run, *ticket, first == 0, req, res, vectors)) return std::nullopt;
  }
  return vectors;
}

}  // namespace kvlm
