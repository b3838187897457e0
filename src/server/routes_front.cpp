// Answering a generation through another API's AnswerWriter (Anthropic
// Messages, OpenAI Responses): the one choice read by a ChoiceDecoder, as
// chat answers are, then handed to the writer whole or in pieces.
#include <chrono>

#include "common/log.h"
#include "server/answer_writer.h"
#include "server/choice_decoder.h"
#include "server/openai/json_text.h"
#include "server/routes_choices.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace kvlm {
namespace {

// The answer's token counts; the thinking's are its text tokenized again.
AnswerUsage usage_of(const ServerContext& ctx, const Generation& gen, const Submitted& sub, const ChoiceAnswer& a) {
  const openai::Usage u = total_usage(gen, sub);
  AnswerUsage out;
  out.prompt_tokens = u.prompt_tokens;
  out.completion_tokens = u.completion_tokens;
  out.cached_tokens = u.cached_tokens;
  if (!a.reasoning.empty()) {
    const auto n = static_cast<int32_t>(ctx.engine.tokenizer().encode(a.reasoning, false, false).size());
    out.reasoning_tokens = std::min(n, out.completion_tokens);
  }
  return out;
}

AnswerEnd end_of(const Submitted& sub, std::optional<FinishReason> reason, const ChoiceAnswer& a) {
  AnswerEnd e;
  if (reason == FinishReason::kLength) {
    e.reason = AnswerEnd::Reason::kLength;
  } else if (!a.calls.empty()) {
    e.reason = AnswerEnd::Reason::kToolCalls;
  } else {
    e.stop_string = sub.streams[0]->stats().stop_string;
  }
  return e;
}

void answer_whole_with(ServerContext& ctx, const Generation& gen, const Submitted& sub, const httplib::Request& req,
                       httplib::Response& res) {
  const std::optional<std::vector<Candidate>> candidates = collect(ctx, gen, sub, req);
  if (!candidates) return;  // the client is gone
  const Candidate& c = (*candidates)[0];
  if (c.error) return send_error(res, error_for(*c.error));
  if (c.reason == FinishReason::kAborted)
    return send_shutting_down(res, "the request was aborted (the server is shutting down)");
  ChoiceDecoder decoder(gen);
  decoder.push(c.text);
  decoder.finish(c.reason == FinishReason::kLength);
  const ChoiceAnswer& a = decoder.answer();
  const openai::Json body = gen.writer->whole(a, end_of(sub, c.reason, a), usage_of(ctx, gen, sub, a));
  res.set_content(openai::dump_json(body), "application/json");
}

struct WriterStream {
  explicit WriterStream(const Generation& gen) : decoder(gen) {}
  ChoiceDecoder decoder;
  bool started = false;
};

// The SSE text of one event of the choice (its end's events with the last).
std::string event_text(const ServerContext& ctx, const Generation& gen, const Submitted& sub, WriterStream& state,
                       const StreamEvent& ev) {
  if (ev.error) return gen.writer->stream_error(error_for(*ev.error));
  if (ev.finish_reason == FinishReason::kAborted)
    return gen.writer->stream_error({503, "the request was aborted (the server is shutting down)", std::nullopt,
                                     "server_error"});
  ChoiceDelta d = state.decoder.push(ev.text);
  if (ev.finished) {
    ChoiceDelta rest = state.decoder.finish(ev.finish_reason == FinishReason::kLength);
    d.reasoning += rest.reasoning;
    d.content += rest.content;
    for (ToolCallDelta& c : rest.calls) d.calls.push_back(std::move(c));
  }
  std::string out;
  if (!d.empty()) out += gen.writer->stream_piece(d, state.decoder.answer());
  if (ev.finished) {
    const ChoiceAnswer& a = state.decoder.answer();
    out += gen.writer->stream_end(a, end_of(sub, ev.finish_reason, a), usage_of(ctx, gen, sub, a));
  }
  return out;
}

// One call of the content provider: the start events the first time, then
// an event's (or a keep-alive comment after a heartbeat with none). False:
// the client is gone.
bool writer_step(const ServerContext& ctx, const Generation& gen, const Submitted& sub, WriterStream& state,
                 httplib::DataSink& sink) {
  if (!state.started) {
    state.started = true;
    AnswerUsage prompt;
    prompt.prompt_tokens = sub.num_prompt[0];
    const std::string start = gen.writer->stream_start(prompt);
    return sink.write(start.data(), start.size());
  }
  std::optional<StreamEvent> ev = sub.streams[0]->next_for(ctx.sse_heartbeat);
  if (!ev) {
    static constexpr std::string_view kKeepAlive = ": keep-alive\n\n";
    return sink.write(kKeepAlive.data(), kKeepAlive.size());
  }
  const std::string out = event_text(ctx, gen, sub, state, *ev);
  if (!out.empty() && !sink.write(out.data(), out.size())) return false;
  if (ev->finished) sink.done();
  return true;
}

void answer_stream_with(ServerContext& ctx, Generation gen, Submitted sub,
                        std::shared_ptr<InFlightRequests::Ticket> ticket, httplib::Response& res) {
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  auto state = std::make_shared<WriterStream>(gen);
  auto shared_sub = std::make_shared<const Submitted>(std::move(sub));
  const RequestId rid = shared_sub->streams[0]->id();
  res.set_chunked_content_provider(
      "text/event-stream",
      [&ctx, gen = std::move(gen), shared_sub, state, ticket](size_t, httplib::DataSink& sink) {
        // Past the headers a fault can only end the stream with an error event.
        try {
          return writer_step(ctx, gen, *shared_sub, *state, sink);
        } catch (const std::exception& e) {
          log_error("request {}: stream failed: {}", shared_sub->streams[0]->id().value(),
                    unicode::sanitize_utf8(e.what()));
        }
        const std::string out = gen.writer->stream_error({500, "internal error while streaming", std::nullopt,
                                                          "server_error"});
        sink.write(out.data(), out.size());
        sink.done();
        return true;
      },
      [&ctx, rid, shared_sub](bool) {
        // The connection ended: the choice, if still running, gives its blocks back.
        try {
          cancel_all(ctx.engine, *shared_sub);
        } catch (const std::exception& e) {
          log_error("request {}: cancel failed: {}", rid.value(), unicode::sanitize_utf8(e.what()));
        }
      });
}

}  // namespace

void answer_with_writer(ServerContext& ctx, Generation gen, Submitted sub,
                        std::shared_ptr<InFlightRequests::Ticket> ticket, const httplib::Request& req,
                        httplib::Response& res) {
  if (!gen.options.stream) return answer_whole_with(ctx, gen, sub, req, res);
  answer_stream_with(ctx, std::move(gen), std::move(sub), std::move(ticket), res);
}

}  // namespace kvlm
