// The answer format of the APIs other than OpenAI's chat and completions
// (Anthropic Messages, OpenAI Responses; routes_choices.h): the one choice
// read by a ChoiceDecoder, as chat answers are, and handed to the request's
// AnswerWriter whole or in pieces.
#include "server/choice_decoder.h"
#include "server/routes_choices.h"
#include "tokenizer/tokenizer.h"
#include "wire/answer_writer.h"
#include "wire/openai/json_text.h"

namespace kvlm {
namespace {

// The answer's token counts; the thinking's are its text tokenized again.
AnswerUsage usage_of(const ServerContext& ctx, const openai::Usage& u, const ChoiceAnswer& a) {
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

const openai::RequestError kAborted{503, "the request was aborted (the server is shutting down)", std::nullopt,
                                    "server_error"};

class WriterFormat final : public AnswerFormat {
 public:
  WriterFormat(const ServerContext& ctx, const Generation& gen, const Submitted& sub)
      : ctx_(ctx), gen_(gen), sub_(sub), writer_(*gen.writer), decoder_(gen) {}

  std::string stream_start() override {
    AnswerUsage prompt;
    prompt.prompt_tokens = sub_.num_prompt[0];
    return writer_.stream_start(prompt);
  }

  std::string stream_event(size_t, const StreamEvent& ev) override {
    if (failed_) return {};
    if (ev.error) return stream_error(error_for(*ev.error));
    if (ev.finish_reason == FinishReason::kAborted) return stream_error(kAborted);
    ChoiceDelta d = decoder_.push(ev.text);
    if (ev.finished) {
      reason_ = ev.finish_reason;
      ChoiceDelta rest = decoder_.finish(ev.finish_reason == FinishReason::kLength);
      d.reasoning += rest.reasoning;
      d.content += rest.content;
      for (ToolCallDelta& c : rest.calls) d.calls.push_back(std::move(c));
    }
    return d.empty() ? std::string() : writer_.stream_piece(d, decoder_.answer());
  }

  std::string stream_end(const openai::Usage& usage) override {
    if (failed_) return {};
    const ChoiceAnswer& a = decoder_.answer();
    return writer_.stream_end(a, end_of(sub_, reason_, a), usage_of(ctx_, usage, a));
  }

  std::string stream_error(const openai::RequestError& e) override {
    if (failed_) return {};
    failed_ = true;
    return writer_.stream_error(e);
  }

  void whole(const std::vector<Candidate>& candidates, const openai::Usage& usage, http::Response& res) override {
    const Candidate& c = candidates[0];
    if (c.error) return send_error(res, error_for(*c.error));
    if (c.reason == FinishReason::kAborted) return send_shutting_down(res, kAborted.message);
    ChoiceDecoder decoder(gen_);
    decoder.push(c.text);
    decoder.finish(c.reason == FinishReason::kLength);
    const ChoiceAnswer& a = decoder.answer();
    const openai::Json body = writer_.whole(a, end_of(sub_, c.reason, a), usage_of(ctx_, usage, a));
    res.set_content(openai::dump_json(body), "application/json");
  }

 private:
  const ServerContext& ctx_;
  const Generation& gen_;
  const Submitted& sub_;
  AnswerWriter& writer_;
  ChoiceDecoder decoder_;
  std::optional<FinishReason> reason_;
  bool failed_ = false;  // an error ended the stream: nothing follows it
};

}  // namespace

std::unique_ptr<AnswerFormat> writer_format(const ServerContext& ctx, const Generation& gen, const Submitted& sub) {
  return std::make_unique<WriterFormat>(ctx, gen, sub);
}

}  // namespace kvlm
