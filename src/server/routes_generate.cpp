// POST /v1/completions and /v1/chat/completions: validate, build the prompt,
// submit to the engine, then answer with one JSON body or an SSE stream.
#include <chrono>
#include <limits>
#include <ctime>

#include <fmt/format.h>

#include "common/error.h"
#include "common/hash.h"
#include "common/log.h"
#include "engine/engine.h"
#include "model/model.h"
#include "server/http/peer_probe.h"
#include "server/openai/json_text.h"
#include "server/routes.h"
#include "tokenizer/chat_prompt.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace kvlm {
namespace {

using openai::Json;

// How long a stream waits for tokens before it writes an SSE comment; a write
// to a client that has gone fails, which cancels its request.
// How often a non-streaming request looks whether its client is still there.
constexpr auto kHangUpCheck = std::chrono::milliseconds(100);

std::string reason_name(std::optional<FinishReason> r) {
  return r == FinishReason::kLength ? "length" : "stop";
}

// dump_json: a chunk may end inside a UTF-8 character (a byte token); it becomes U+FFFD.
std::string sse(const Json& j) { return "data: " + openai::dump_json(j) + "\n\n"; }

// The logprobs entries of a response or a chunk: an echoed prompt's first
// token (nothing predicts it: NaN), the prompt's other tokens (prompt_lps, sent
// only for an echo), then the generated tokens.
std::vector<openai::LogprobEntry> logprob_entries(const Tokenizer& tok, std::optional<int32_t> echoed_first,
                                                  const std::vector<SampledLogprobs>& prompt_lps,
                                                  const std::vector<SampledLogprobs>& lps) {
  std::vector<openai::LogprobEntry> out;
  out.reserve(1 + prompt_lps.size() + lps.size());
  if (echoed_first) out.push_back({{tok.token_to_piece(*echoed_first), std::numeric_limits<float>::quiet_NaN()}, {}});
  for (const auto* list : {&prompt_lps, &lps}) {
    for (const SampledLogprobs& lp : *list) {
      openai::LogprobEntry e{{tok.token_to_piece(lp.chosen.token), lp.chosen.logprob}, {}};
      for (const TokenLogprob& t : lp.top) e.top.push_back({tok.token_to_piece(t.token), t.logprob});
      out.push_back(std::move(e));
    }
  }
  return out;
}

struct Generation {
  bool chat;
  std::string id;
  int64_t created;
  openai::GenerationOptions options;
  std::vector<int32_t> prompt;
  bool echo = false;        // completions: the response starts with the prompt
  std::string prompt_text;  // what echo repeats
};

// The server's --kv-* defaults with the request's own kv_* fields over them.
KvBudget request_budget(const Engine& engine, const openai::GenerationOptions& o) {
  KvBudget b = engine.config().kv_budget;
  if (o.kv_budget) b.budget_tokens = *o.kv_budget;
  if (o.kv_policy) b.policy = *o.kv_policy;
  if (o.kv_sinks) b.num_sinks = *o.kv_sinks;
  if (o.kv_recent) b.num_recent = *o.kv_recent;
  if (o.kv_shift) b.shift = *o.kv_shift;
  return b;
}

// Streaming state carried across calls of the content provider.
struct StreamState {
  bool first = true;        // first chunk still to send (chat: carries the role)
  int64_t text_offset = 0;  // completions' logprobs.text_offset so far
};

// One call of the streaming content provider: waits for the next event and
// writes its SSE chunks. Returns false when the client is gone.
bool stream_step(ServerContext& ctx, const Generation& gen, RequestStream& stream, StreamState& state,
                 bool want_logprobs, std::optional<int32_t> echoed_first, int32_t num_prompt,
                 httplib::DataSink& sink) {
  auto ev = stream.next_for(ctx.sse_heartbeat);
  if (!ev) {
    if (stream.done()) {
      sink.done();
      return true;
    }
    // Exactly the comment line: one byte more (its NUL) would prefix the
    // next event and make clients drop it.
    static constexpr std::string_view kKeepAlive = ": keep-alive\n\n";
    return sink.write(kKeepAlive.data(), kKeepAlive.size());  // false: the client is gone
  }
  std::string out;
  if (ev->error) {
    out += sse(openai::error_json(error_for(*ev->error)));
  } else {
    const bool finished = ev->finished;
    const std::string reason = finished ? reason_name(ev->finish_reason) : "";
    if (!ev->text.empty() || !ev->logprobs.empty() || state.first || finished) {
      const Tokenizer& tok = ctx.engine.tokenizer();
      // Echo: the first chunk starts with the prompt (its logprobs came with the first token).
      const bool echo_now = gen.echo && state.first;
      const std::string text = echo_now ? gen.prompt_text + ev->text : ev->text;
      Json lp = nullptr;
      if (want_logprobs && (echo_now || !ev->logprobs.empty())) {
        const auto entries =
            logprob_entries(tok, echo_now ? echoed_first : std::nullopt, ev->prompt_logprobs, ev->logprobs);
        lp = gen.chat ? openai::chat_logprobs(entries) : openai::completion_logprobs(entries, &state.text_offset);
      }
      Json chunk = gen.chat ? openai::chat_chunk(gen.id, gen.created, ctx.model_name, text, reason,
                                                 state.first, lp)
                            : openai::completion_chunk(gen.id, gen.created, ctx.model_name, text, reason, lp);
      out += sse(chunk);
      state.first = false;
    }
    if (finished && gen.options.include_usage) {
      const RequestStats st = stream.stats();
      const openai::Usage usage{num_prompt, st.num_generated_tokens, st.num_cached_tokens};
      out += sse(openai::usage_chunk(gen.id, gen.created, ctx.model_name, gen.chat, usage));
    }
  }
  if (ev->finished) out += "data: [DONE]\n\n";
  if (!out.empty() && !sink.write(out.data(), out.size())) return false;
  if (ev->finished) sink.done();
  return true;
}

void run(ServerContext& ctx, Generation gen, const httplib::Request& req, httplib::Response& res) {
  Engine& engine = ctx.engine;
  // Registered before looking at draining(): a drain waits for us or we refuse.
  std::shared_ptr<InFlightRequests::Ticket> ticket = ctx.in_flight.enter();
  if (ctx.in_flight.draining()) {
    res.set_header("Connection", "close");
    send_error(res, {503, "the server is shutting down; send the request to another replica", std::nullopt,
                     "server_error"});
    return;
  }
  const int32_t num_prompt = static_cast<int32_t>(gen.prompt.size());
  const KvBudget budget = request_budget(engine, gen.options);
  // With a budget and kv_shift, positions stay inside the budget: no context end.
  const int32_t limit = budget.enabled() && budget.shift ? INT32_MAX : engine.max_model_len();
  if (num_prompt >= limit) {
    send_error(res, {400, fmt::format("This model's maximum context length is {} tokens. However, your prompt has {} tokens; "
                                      "leave room for at least one generated token.", limit, num_prompt),
                     std::string(gen.chat ? "messages" : "prompt")});
    return;
  }
  int32_t max_tokens = gen.options.max_tokens.value_or(
      limit == INT32_MAX ? std::max(engine.max_model_len() - num_prompt, 16) : limit - num_prompt);
  if (num_prompt + max_tokens > limit) {
    if (gen.options.max_tokens) {
      send_error(res, {400, fmt::format("This model's maximum context length is {} tokens. However, you requested {} tokens "
                                        "({} in the {}, {} in the completion). Please reduce the length.",
                                        limit, num_prompt + max_tokens, num_prompt, gen.chat ? "messages" : "prompt",
                                        max_tokens),
                       std::string("max_tokens")});
      return;
    }
    max_tokens = limit - num_prompt;
  }
  GenerateRequest g;
  g.prompt_tokens = std::move(gen.prompt);
  g.sampling = gen.options.sampling;
  g.max_tokens = max_tokens;
  g.stop = gen.options.stop;
  g.ignore_eos = gen.options.ignore_eos;
  g.logprobs = gen.options.logprobs;
  g.prompt_logprobs = gen.echo && gen.options.logprobs >= 0;
  g.kv_budget = budget;
  // The echoed prompt's other tokens come back as prompt logprobs.
  const std::optional<int32_t> echoed_first =
      gen.echo && !g.prompt_tokens.empty() ? std::optional<int32_t>(g.prompt_tokens[0]) : std::nullopt;
  if (gen.options.cache_salt) {
    const Hash128 h = hash128(gen.options.cache_salt->data(), gen.options.cache_salt->size());
    g.cache_salt = h.lo | 1;  // never 0, which means "shared"
  }
  std::shared_ptr<RequestStream> stream;
  try {
    stream = engine.submit(std::move(g));
  } catch (const Error& e) {
    send_error(res, error_for(e));
    return;
  }
  if (!ticket->set_request(stream->id())) engine.cancel(stream->id());  // the drain's deadline has passed

  auto usage_of = [num_prompt](const RequestStats& st) {
    return openai::Usage{num_prompt, st.num_generated_tokens, st.num_cached_tokens};
  };

  const Tokenizer& tok = engine.tokenizer();
  const bool want_logprobs = gen.options.logprobs >= 0;
  if (!gen.options.stream) {
    std::string text;
    std::vector<SampledLogprobs> logprobs, prompt_logprobs;
    std::optional<FinishReason> reason;
    // Nothing is written until the end, so look at the connection instead: a
    // client that gave up (timeout, Ctrl-C) gets its request cancelled.
    const PeerProbe probe(req.remote_addr, req.remote_port, req.local_port);
    auto last_check = std::chrono::steady_clock::now();
    for (;;) {
      auto ev = stream->next_for(kHangUpCheck);
      if (const auto now = std::chrono::steady_clock::now(); now - last_check >= kHangUpCheck) {
        last_check = now;
        if (probe.peer_closed()) {
          engine.cancel(stream->id());
          log_info("server: client {}:{} hung up; request {} cancelled", req.remote_addr, req.remote_port,
                   stream->id().value());
          while (stream->next()) {}  // drain: the engine finishes it as aborted
          return;
        }
      }
      if (!ev) {
        if (stream->done()) break;
        continue;
      }
      text += ev->text;
      logprobs.insert(logprobs.end(), ev->logprobs.begin(), ev->logprobs.end());
      prompt_logprobs.insert(prompt_logprobs.end(), ev->prompt_logprobs.begin(), ev->prompt_logprobs.end());
      if (ev->error) {
        send_error(res, error_for(*ev->error));
        return;
      }
      if (ev->finished) reason = ev->finish_reason;
    }
    if (reason == FinishReason::kAborted) {
      send_error(res, {503, "the request was aborted (the server is shutting down)", std::nullopt, "server_error"});
      return;
    }
    const openai::Usage usage = usage_of(stream->stats());
    Json lp = nullptr;
    if (want_logprobs) {
      int64_t offset = 0;
      const auto entries = logprob_entries(tok, echoed_first, prompt_logprobs, logprobs);
      lp = gen.chat ? openai::chat_logprobs(entries) : openai::completion_logprobs(entries, &offset);
    }
    if (gen.echo) text = gen.prompt_text + text;
    Json body = gen.chat ? openai::chat_response(gen.id, gen.created, ctx.model_name, text, reason_name(reason), usage, lp)
                         : openai::completion_response(gen.id, gen.created, ctx.model_name, text, reason_name(reason),
                                                       usage, lp);
    res.set_content(openai::dump_json(body), "application/json");
    return;
  }

  // Streaming: the provider runs on the connection's thread after this
  // handler returns, pulling events until the request finishes.
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  auto state = std::make_shared<StreamState>();
  const RequestId rid = stream->id();
  res.set_chunked_content_provider(
      "text/event-stream",
      [&ctx, want_logprobs, echoed_first, num_prompt, gen = std::move(gen), stream, state,
       ticket](size_t, httplib::DataSink& sink) {
        // The headers are gone: a fault here can only end the stream with an
        // error event (and the request, through the releaser), never the process.
        try {
          return stream_step(ctx, gen, *stream, *state, want_logprobs, echoed_first, num_prompt, sink);
        } catch (const std::exception& e) {
          log_error("request {}: stream failed: {}", stream->id().value(), unicode::sanitize_utf8(e.what()));
        } catch (...) {
          log_error("request {}: stream failed", stream->id().value());
        }
        const std::string out = sse(openai::error_json({500, "internal error while streaming", std::nullopt, "server_error"}));
        sink.write(out.data(), out.size());
        sink.done();
        return true;
      },
      [&ctx, rid, stream](bool success) {
        // The connection ended early (client gone, write failed): stop the
        // request so its blocks go back to the pool.
        // Runs outside httplib's exception handling: nothing may escape.
        try {
          if (!success || !stream->done()) ctx.engine.cancel(rid);
        } catch (const std::exception& e) {
          log_error("request {}: cancel failed: {}", rid.value(), unicode::sanitize_utf8(e.what()));
        }
      });
}

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
  Generation gen{false, openai::new_id("cmpl"), unix_now(), std::move(r.options), {}, r.echo, {}};
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
  run(ctx, std::move(gen), req, res);
}

void handle_chat_completions(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  auto body = parse_body(req, res);
  if (!body) return;
  auto parsed = openai::parse_chat_request(*body);
  if (auto* e = std::get_if<openai::RequestError>(&parsed)) return send_error(res, *e);
  auto& r = std::get<openai::ChatRequest>(parsed);
  if (!ctx.chat_template) return send_error(res, {400, ctx.chat_template_error, std::string("messages")});
  if (refuse_long_prompt(ctx, res, message_bytes(r.messages), 0, "messages")) return;
  Generation gen{true, openai::new_id("chatcmpl"), unix_now(), std::move(r.options), {}, false, {}};
  try {
    gen.prompt = encode_chat(ctx.engine.tokenizer(), *ctx.chat_template, r.messages, /*add_generation_prompt=*/true,
                             r.template_extra);
  } catch (const Error& e) {
    // The template's own words, e.g. "System role not supported".
    return send_error(res, {400, e.what(), std::string("messages")});
  }
  run(ctx, std::move(gen), req, res);
}

}  // namespace kvlm
