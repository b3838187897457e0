// The one way every generation API is answered (routes_choices.h): a
// Producer that the transport polls whenever a candidate's stream has an
// event, so no thread waits while the engine generates. Streamed, each event
// becomes the API's SSE text at once (and a keep-alive comment fills a quiet
// heartbeat); whole, the candidates' outputs are gathered and written once
// all have ended. Either way the request's usage is computed and charged to
// its API key here, once.
#include <chrono>

#include "common/log.h"
#include "server/routes_choices.h"
#include "tokenizer/unicode.h"
#include "wire/answer_writer.h"

namespace kvlm {
namespace {

// Exactly the comment line: one byte more (its NUL) would prefix the next
// event and make clients drop it.
constexpr std::string_view kKeepAlive = ": keep-alive\n\n";

class GenerationAnswer final : public http::Producer {
 public:
  GenerationAnswer(ServerContext& ctx, const http::Request& req, Generation gen, Submitted sub,
                   std::shared_ptr<InFlightRequests::Ticket> flight, FormatMaker make_format)
      : ctx_(ctx),
        key_(req.key_ticket),
        client_(req.remote_addr + ":" + std::to_string(req.remote_port)),
        gen_(std::move(gen)),
        sub_(std::move(sub)),
        flight_(std::move(flight)),
        format_(make_format(ctx, gen_, sub_)),
        candidates_(sub_.streams.size()) {}

  ~GenerationAnswer() override {
    for (const auto& s : sub_.streams) s->set_listener(nullptr);
    if (!charged_) cancel_all(ctx_.engine, sub_);  // never answered: nothing may keep running
  }

  void start(std::shared_ptr<http::Waker> waker) override {
    for (const auto& s : sub_.streams) s->set_listener([waker] { waker->wake(); });
  }

  Progress poll(http::Response& res, http::Clock::time_point& wake_at) override {
    try {
      return gen_.options.stream ? poll_stream(res, wake_at) : poll_whole(res);
    } catch (const std::exception& e) {
      // Past the head a fault can only end the answer, never the process.
      log_error("request {}: answer failed: {}", sub_.streams[0]->id().value(), unicode::sanitize_utf8(e.what()));
      cancel_all(ctx_.engine, sub_);
      finish_usage();
      const openai::RequestError error{500, "internal error while answering", std::nullopt, "server_error"};
      if (gen_.options.stream) {
        res.body += format_->stream_error(error);
      } else {
        res = http::Response{};
        send_error(res, error);
      }
      return Progress::kDone;
    }
  }

  void cancel() override {
    if (all_done()) return;
    log_info("server: client {} hung up; request {} ({} choices) cancelled", client_, sub_.streams[0]->id().value(),
             sub_.streams.size());
    cancel_all(ctx_.engine, sub_);
  }

 private:
  bool all_done() const {
    for (const auto& s : sub_.streams)
      if (!s->done()) return false;
    return true;
  }

  // The first candidate's output, which its slot holds after it (a resumed
  // stream's replayed tokens are in its prompt already).
  void note_slot_output(size_t i, const StreamEvent& ev) {
    if (i == 0 && sub_.slot && !ev.replayed && !gen_.prompt_only) sub_.slot->add_output(ev.tokens);
  }

  // The request's tokens, charged to its key once, at its end (its slot
  // is free from then on, holding what it ran).
  openai::Usage finish_usage() {
    if (sub_.slot) sub_.slot->release();
    const openai::Usage usage = total_usage(gen_, sub_);
    if (!charged_ && key_) key_->charge_tokens(usage.prompt_tokens + usage.completion_tokens);
    if (!charged_ && gen_.lora)
      ctx_.loras->record(gen_.model, usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens);
    charged_ = true;
    return usage;
  }

  Progress poll_stream(http::Response& res, http::Clock::time_point& wake_at) {
    if (!started_) {
      started_ = true;
      res.body += format_->stream_start();
    }
    for (size_t i = 0; i < sub_.streams.size(); ++i)
      while (std::optional<StreamEvent> ev = sub_.streams[i]->try_next()) {
        note_slot_output(i, *ev);
        res.body += format_->stream_event(i, *ev);
      }
    const auto now = http::Clock::now();
    if (all_done()) {
      res.body += format_->stream_end(finish_usage());
      return Progress::kDone;
    }
    if (res.body.empty() && now - last_write_ >= ctx_.sse_heartbeat) res.body = kKeepAlive;
    if (!res.body.empty()) last_write_ = now;
    wake_at = last_write_ + ctx_.sse_heartbeat;
    return Progress::kPending;
  }

  Progress poll_whole(http::Response& res) {
    for (size_t i = 0; i < sub_.streams.size(); ++i)
      while (std::optional<StreamEvent> ev = sub_.streams[i]->try_next()) {
        note_slot_output(i, *ev);
        take_event(candidates_[i], *ev, gen_.prompt_only);
      }
    if (!all_done()) return Progress::kPending;
    format_->whole(candidates_, finish_usage(), res);
    return Progress::kDone;
  }

  ServerContext& ctx_;
  std::shared_ptr<KeyTicket> key_;
  std::string client_;
  Generation gen_;
  Submitted sub_;
  std::shared_ptr<InFlightRequests::Ticket> flight_;
  std::unique_ptr<AnswerFormat> format_;
  std::vector<Candidate> candidates_;
  bool started_ = false;
  bool charged_ = false;
  http::Clock::time_point last_write_ = http::Clock::now();
};

}  // namespace

void take_event(Candidate& c, const StreamEvent& ev, bool prompt_only) {
  c.prompt_logprobs.insert(c.prompt_logprobs.end(), ev.prompt_logprobs.begin(), ev.prompt_logprobs.end());
  if (ev.error) c.error = ev.error;
  if (ev.finished) c.reason = ev.finish_reason;
  if (prompt_only) {
    if (ev.finished && c.reason != FinishReason::kAborted) c.reason = FinishReason::kLength;
    return;
  }
  c.text += ev.text;
  c.tokens.insert(c.tokens.end(), ev.tokens.begin(), ev.tokens.end());
  c.logprobs.insert(c.logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
}

void answer_generation(ServerContext& ctx, const http::Request& req, Generation gen, Submitted sub,
                       std::shared_ptr<InFlightRequests::Ticket> flight, FormatMaker make_format, http::Response& res) {
  const bool stream = gen.options.stream;
  auto answer = std::make_unique<GenerationAnswer>(ctx, req, std::move(gen), std::move(sub), std::move(flight),
                                                   make_format);
  if (!stream) return res.defer(std::move(answer));
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.stream("text/event-stream", std::move(answer));
}

// How often a blocking wait looks whether its client is still there.
constexpr auto kHangUpCheck = std::chrono::milliseconds(100);

std::optional<std::vector<Candidate>> wait_for_all(ServerContext& ctx, const Submitted& sub, const http::Request& req) {
  std::vector<Candidate> out(sub.streams.size());
  for (size_t i = 0; i < sub.streams.size(); ++i) {
    RequestStream& stream = *sub.streams[i];
    while (!stream.done()) {
      if (req.client_gone()) {
        cancel_all(ctx.engine, sub);
        for (const auto& s : sub.streams)
          while (s->next()) {}  // the engine finishes them as aborted
        return std::nullopt;
      }
      if (auto ev = stream.next_for(kHangUpCheck)) take_event(out[i], *ev, true);
    }
  }
  return out;
}

}  // namespace kvlm
