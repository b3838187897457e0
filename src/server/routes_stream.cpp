// The streaming answer: every choice's chunks as its tokens come, interleaved
// and tagged with the choice's index, then one usage chunk (include_usage)
// and [DONE].
#include <chrono>

#include "chat/tool_call_stream.h"
#include "common/log.h"
#include "server/openai/json_text.h"
#include "server/routes_choices.h"
#include "server/routes_tools.h"
#include "tokenizer/unicode.h"

namespace kvlm {
namespace {

using openai::Json;

// How long one look at the choices waits on the first one still running
// before it looks at all of them again: the latency a choice's chunk can
// gain while another's is awaited.
constexpr auto kPoll = std::chrono::milliseconds(5);

// Streaming state carried across calls of the content provider, per choice.
struct StreamState {
  StreamState(size_t n, const Generation& gen) : first(n, true), text_offset(n, 0) {
    if (gen.tool_calls)
      for (size_t i = 0; i < n; ++i) tools.emplace_back(gen.tool_calls->format, gen.tool_calls->parallel);
  }
  std::vector<bool> first;            // first chunk still to send (chat: carries the role)
  std::vector<int64_t> text_offset;   // completions' logprobs.text_offset so far
  std::vector<ToolCallStream> tools;  // chat with tools: each choice's held-back text
};

// The chunks of a choice's tool calls, as OpenAI streams them: per call, its
// id and name (arguments ""), then its arguments; then the finish reason.
std::string tool_call_chunks(const ServerContext& ctx, const Generation& gen, int32_t index,
                             const std::vector<ToolCall>& calls) {
  std::string out;
  const Json full = tool_calls_json(gen.tool_calls->format, calls);
  for (size_t k = 0; k < full.size(); ++k) {
    const Json& c = full[k];
    Json head = {{"index", k}, {"id", c["id"]}, {"type", "function"},
                 {"function", Json{{"name", c["function"]["name"]}, {"arguments", ""}}}};
    out += sse(openai::chat_tool_calls_chunk(gen.id, gen.created, ctx.model_name, Json::array({head}), index));
    Json args = {{"index", k}, {"function", Json{{"arguments", c["function"]["arguments"]}}}};
    out += sse(openai::chat_tool_calls_chunk(gen.id, gen.created, ctx.model_name, Json::array({args}), index));
  }
  return out + sse(openai::chat_chunk(gen.id, gen.created, ctx.model_name, "", "tool_calls", false, nullptr, index));
}

// The SSE chunk(s) of choice `index`'s event.
std::string event_chunks(const ServerContext& ctx, const Generation& gen, const Submitted& sub, StreamState& state,
                         int32_t index, const StreamEvent& ev) {
  if (ev.error) return sse(openai::error_json(error_for(*ev.error)));
  const auto i = static_cast<size_t>(index);
  const bool first = state.first[i];
  std::string piece = ev.text;
  std::vector<ToolCall> calls;
  if (!state.tools.empty()) {
    // Text that may be a call waits; at the end, calls or the held text.
    piece = state.tools[i].push(ev.text);
    if (ev.finished) {
      ParsedToolCalls rest = state.tools[i].finish(/*parse=*/ev.finish_reason != FinishReason::kLength);
      piece += rest.content;
      calls = std::move(rest.calls);
    }
  }
  if (piece.empty() && ev.logprobs.empty() && !first && !ev.finished) return {};
  const std::string reason = ev.finished && calls.empty() ? reason_name(ev.finish_reason) : "";
  // Echo: the first chunk starts with the prompt (its logprobs came with the first token).
  const bool echo_now = gen.echo && first;
  const std::string text = echo_now ? gen.prompt_text + piece : piece;
  Json lp = nullptr;
  if (gen.options.logprobs >= 0 && (echo_now || !ev.logprobs.empty()))
    lp = logprobs_json(ctx, gen, echo_now ? sub.echoed_first : std::nullopt, ev.prompt_logprobs, ev.logprobs,
                       &state.text_offset[i]);
  state.first[i] = false;
  std::string out;
  if (calls.empty() || first || !text.empty() || !lp.is_null())
    out = sse(gen.chat ? openai::chat_chunk(gen.id, gen.created, ctx.model_name, text, reason, first, lp, index)
                       : openai::completion_chunk(gen.id, gen.created, ctx.model_name, text, reason, lp, index));
  if (!calls.empty()) out += tool_call_chunks(ctx, gen, index, calls);
  return out;
}

// The chunks of every event that is waiting now, in choice order.
std::string waiting_chunks(const ServerContext& ctx, const Generation& gen, const Submitted& sub, StreamState& state) {
  std::string out;
  for (size_t i = 0; i < sub.streams.size(); ++i) {
    while (auto ev = sub.streams[i]->next_for(std::chrono::milliseconds(0)))
      out += event_chunks(ctx, gen, sub, state, static_cast<int32_t>(i), *ev);
  }
  return out;
}

bool all_done(const Submitted& sub) {
  for (const auto& s : sub.streams)
    if (!s->done()) return false;
  return true;
}

// One call of the streaming content provider: waits until some choice has an
// event (or a heartbeat has passed) and writes the chunks. Returns false when
// the client is gone.
bool stream_step(const ServerContext& ctx, const Generation& gen, const Submitted& sub, StreamState& state,
                 httplib::DataSink& sink) {
  const auto start = std::chrono::steady_clock::now();
  std::string out = waiting_chunks(ctx, gen, sub, state);
  while (out.empty() && !all_done(sub)) {
    if (std::chrono::steady_clock::now() - start >= ctx.sse_heartbeat) {
      // Exactly the comment line: one byte more (its NUL) would prefix the
      // next event and make clients drop it.
      static constexpr std::string_view kKeepAlive = ": keep-alive\n\n";
      return sink.write(kKeepAlive.data(), kKeepAlive.size());  // false: the client is gone
    }
    for (size_t i = 0; i < sub.streams.size(); ++i) {
      if (sub.streams[i]->done()) continue;
      if (auto ev = sub.streams[i]->next_for(kPoll))
        out += event_chunks(ctx, gen, sub, state, static_cast<int32_t>(i), *ev);
      break;  // waited on the first choice still running; now look at all
    }
    out += waiting_chunks(ctx, gen, sub, state);
  }
  const bool finished = all_done(sub);
  if (finished && gen.options.include_usage)
    out += sse(openai::usage_chunk(gen.id, gen.created, ctx.model_name, gen.chat, total_usage(sub)));
  if (finished) out += "data: [DONE]\n\n";
  if (!out.empty() && !sink.write(out.data(), out.size())) return false;
  if (finished) sink.done();
  return true;
}

}  // namespace

void answer_stream(ServerContext& ctx, Generation gen, Submitted sub,
                   std::shared_ptr<InFlightRequests::Ticket> ticket, httplib::Response& res) {
  // The provider runs on the connection's thread after the handler returns,
  // pulling events until every choice has finished.
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  auto state = std::make_shared<StreamState>(sub.streams.size(), gen);
  auto shared_sub = std::make_shared<const Submitted>(std::move(sub));
  const RequestId rid = shared_sub->streams[0]->id();
  res.set_chunked_content_provider(
      "text/event-stream",
      [&ctx, gen = std::move(gen), shared_sub, state, ticket](size_t, httplib::DataSink& sink) {
        // The headers are gone: a fault here can only end the stream with an
        // error event (and the request, through the releaser), never the process.
        const RequestId id = shared_sub->streams[0]->id();
        try {
          return stream_step(ctx, gen, *shared_sub, *state, sink);
        } catch (const std::exception& e) {
          log_error("request {}: stream failed: {}", id.value(), unicode::sanitize_utf8(e.what()));
        } catch (...) {
          log_error("request {}: stream failed", id.value());
        }
        const std::string out = sse(openai::error_json({500, "internal error while streaming", std::nullopt, "server_error"}));
        sink.write(out.data(), out.size());
        sink.done();
        return true;
      },
      [&ctx, rid, shared_sub](bool) {
        // The connection ended (client gone, write failed, or done): stop the
        // choices still running so their blocks go back to the pool.
        // Runs outside httplib's exception handling: nothing may escape.
        try {
          cancel_all(ctx.engine, *shared_sub);
        } catch (const std::exception& e) {
          log_error("request {}: cancel failed: {}", rid.value(), unicode::sanitize_utf8(e.what()));
        }
      });
}

}  // namespace kvlm
