// OpenAI's answer format (routes_choices.h): streamed, every choice's chunks
// as its tokens come, interleaved and tagged with the choice's index, then
// one usage chunk (include_usage) and [DONE]; whole, routes_choices.cpp.
#include "common/log.h"
#include "server/choice_decoder.h"
#include "server/routes_choices.h"
#include "server/routes_tools.h"
#include "tokenizer/unicode.h"
#include "wire/openai/json_text.h"

namespace kvlm {
namespace {

using openai::Json;

// Streaming state carried from event to event, per choice.
struct StreamState {
  StreamState(size_t n, const Generation& gen, const Submitted& sub)
      : first(n, sub.num_replayed == 0), text_offset(n, 0), pending_ids(n) {
    if (gen.tool_calls || gen.reasoning)
      for (size_t i = 0; i < n; ++i) decoders.emplace_back(gen);
  }
  // First chunk still to send (chat: carries the role). A resumed stream's
  // client has had it.
  std::vector<bool> first;
  std::vector<int64_t> text_offset;   // completions' logprobs.text_offset so far
  // Chat with tools or thinking: each choice's reader, holding back text
  // that may be a call or a marker.
  std::vector<ChoiceDecoder> decoders;
  // return_token_ids: ids generated since the choice's last chunk. An event
  // whose text is held back sends no chunk; its ids go with the next one.
  std::vector<std::vector<int32_t>> pending_ids;
};

// The chunks of a choice's call pieces, as OpenAI streams them: a call's
// id and name first (arguments ""), then its arguments as they come. The
// legacy style sends the first call as `function_call` deltas.
void call_chunks(const Generation& gen, int32_t index, const ChoiceDecoder& decoder,
                 const std::vector<ToolCallDelta>& calls, std::vector<Json>& out) {
  const bool legacy = gen.tool_calls->style == openai::CallStyle::kFunctionCall;
  for (const ToolCallDelta& d : calls) {
    if (legacy) {
      if (d.index != 0) continue;
      if (!d.name.empty())
        out.push_back(openai::chat_function_call_chunk(gen.id, gen.created, gen.model,
                                                       Json{{"name", d.name}, {"arguments", ""}}, index));
      if (!d.arguments.empty())
        out.push_back(openai::chat_function_call_chunk(gen.id, gen.created, gen.model,
                                                       Json{{"arguments", d.arguments}}, index));
      continue;
    }
    if (!d.name.empty()) {
      const Json head = {{"index", d.index}, {"id", decoder.call_id(d.index)}, {"type", "function"},
                         {"function", Json{{"name", d.name}, {"arguments", ""}}}};
      out.push_back(openai::chat_tool_calls_chunk(gen.id, gen.created, gen.model, Json::array({head}), index));
    }
    if (d.arguments.empty()) continue;
    const Json args = {{"index", d.index}, {"function", Json{{"arguments", d.arguments}}}};
    out.push_back(openai::chat_tool_calls_chunk(gen.id, gen.created, gen.model, Json::array({args}), index));
  }
}

// A chat chunk's delta with the thinking beside (or instead of) the content.
void add_reasoning(Json& chunk, const std::string& reasoning) {
  if (reasoning.empty()) return;
  Json& delta = chunk["choices"][0]["delta"];
  if (delta.contains("content") && delta["content"] == "") delta.erase("content");
  delta["reasoning_content"] = reasoning;
}

// The SSE text of one event's chunks. With return_token_ids the last one
// carries the ids pending (and on the choice's first event the prompt's): a
// reader that resumes streams (the router) forwards an event's chunks once
// it has that last one, so a stream cut between them is resumed before the
// event, never inside it.
std::string serialize_chunks(const Generation& gen, const Submitted& sub, StreamState& state, size_t i,
                             bool first, std::vector<Json> chunks) {
  if (gen.options.return_token_ids && !chunks.empty()) {
    Json& choice = chunks.back()["choices"][0];
    if (first) choice["prompt_token_ids"] = sub.prompt_tokens[sub.prompt_of(i)];
    choice["token_ids"] = std::move(state.pending_ids[i]);
    state.pending_ids[i].clear();
  }
  std::string out;
  for (const Json& c : chunks) out += sse(c);
  return out;
}

// A resumed stream's replayed event: the client has its text, so it only
// brings the choice's state (held-back tool-call text, text offsets) to
// where the first server left it.
void take_replayed(StreamState& state, size_t i, const StreamEvent& ev) {
  if (!state.decoders.empty()) state.decoders[i].push(ev.text);
  state.text_offset[i] += static_cast<int64_t>(ev.text.size());
}

// What a choice's event gives out: as it is, or read by its decoder.
ChoiceDelta decoded(StreamState& state, size_t i, std::string piece, bool finished, bool cut) {
  if (state.decoders.empty()) {
    ChoiceDelta d;
    d.content = std::move(piece);
    return d;
  }
  ChoiceDelta d = state.decoders[i].push(piece);
  if (!finished) return d;
  ChoiceDelta rest = state.decoders[i].finish(cut);
  d.reasoning += rest.reasoning;
  d.content += rest.content;
  for (ToolCallDelta& c : rest.calls) d.calls.push_back(std::move(c));
  return d;
}

// The SSE chunk(s) of choice `index`'s event (candidate stream `index`:
// streaming has n == best_of, so streams and choices line up).
std::string event_chunks(const ServerContext& ctx, const Generation& gen, const Submitted& sub, StreamState& state,
                         int32_t index, const StreamEvent& ev) {
  if (ev.error) return sse(openai::error_json(error_for(*ev.error)));
  const auto i = static_cast<size_t>(index);
  if (ev.replayed) {
    take_replayed(state, i, ev);
    return {};
  }
  if (gen.options.return_token_ids)
    state.pending_ids[i].insert(state.pending_ids[i].end(), ev.tokens.begin(), ev.tokens.end());
  const bool first = state.first[i];
  // prompt_only: the token sampled after the prompt is not an answer's.
  const std::vector<SampledLogprobs> no_logprobs;
  const std::vector<SampledLogprobs>& logprobs = gen.prompt_only ? no_logprobs : ev.logprobs;
  std::optional<FinishReason> finish = ev.finish_reason;
  if (gen.prompt_only && ev.finished && finish != FinishReason::kAborted) finish = FinishReason::kLength;
  const bool cut = finish == FinishReason::kLength;
  const ChoiceDelta d = decoded(state, i, gen.prompt_only ? "" : ev.text, ev.finished, cut);
  const bool with_calls = ev.finished && !state.decoders.empty() && !state.decoders[i].answer().calls.empty();
  if (d.empty() && logprobs.empty() && !first && !ev.finished) return {};
  // Echo: the first chunk starts with the prompt (its logprobs came with the first token).
  const bool echo_now = gen.echo && first;
  const size_t prompt = sub.prompt_of(i);
  const std::string text = echo_now ? gen.prompt_texts[prompt] + d.content : d.content;
  Json lp = nullptr;
  if (gen.options.logprobs >= 0 && (echo_now || !logprobs.empty()))
    lp = logprobs_json(ctx, gen, echo_now ? sub.echoed_first[prompt] : std::nullopt, ev.prompt_logprobs, logprobs,
                       &state.text_offset[i], prompt);
  state.first[i] = false;
  std::vector<Json> chunks;
  const std::string reason = ev.finished && !with_calls ? reason_name(finish) : "";
  if (first || !text.empty() || !d.reasoning.empty() || !lp.is_null() || !reason.empty()) {
    chunks.push_back(gen.chat ? openai::chat_chunk(gen.id, gen.created, gen.model, text, reason, first, lp, index)
                              : openai::completion_chunk(gen.id, gen.created, gen.model, text, reason, lp, index));
    add_reasoning(chunks.back(), d.reasoning);
  }
  if (!d.calls.empty()) call_chunks(gen, index, state.decoders[i], d.calls, chunks);
  if (with_calls) {
    const bool legacy = gen.tool_calls->style == openai::CallStyle::kFunctionCall;
    const char* r = cut ? "length" : legacy ? "function_call" : "tool_calls";
    chunks.push_back(openai::chat_chunk(gen.id, gen.created, gen.model, "", r, false, nullptr, index));
  }
  return serialize_chunks(gen, sub, state, i, first, std::move(chunks));
}

class OpenAIFormat final : public AnswerFormat {
 public:
  OpenAIFormat(const ServerContext& ctx, const Generation& gen, const Submitted& sub)
      : ctx_(ctx), gen_(gen), sub_(sub), state_(sub.streams.size(), gen, sub) {}

  std::string stream_event(size_t i, const StreamEvent& ev) override {
    return event_chunks(ctx_, gen_, sub_, state_, static_cast<int32_t>(i), ev);
  }
  std::string stream_end(const openai::Usage& usage) override {
    std::string out;
    if (gen_.options.include_usage) out += sse(openai::usage_chunk(gen_.id, gen_.created, gen_.model, gen_.chat, usage));
    return out + "data: [DONE]\n\n";
  }
  std::string stream_error(const openai::RequestError& e) override { return sse(openai::error_json(e)); }
  void whole(const std::vector<Candidate>& candidates, const openai::Usage& usage, http::Response& res) override {
    openai_whole(ctx_, gen_, sub_, candidates, usage, res);
  }

 private:
  const ServerContext& ctx_;
  const Generation& gen_;
  const Submitted& sub_;
  StreamState state_;
};

}  // namespace

std::unique_ptr<AnswerFormat> openai_format(const ServerContext& ctx, const Generation& gen, const Submitted& sub) {
  return std::make_unique<OpenAIFormat>(ctx, gen, sub);
}

void answer_resumed_at_length(const Generation& gen, int32_t num_prompt, http::Response& res) {
  const std::string& model = gen.model;
  std::string out = sse(gen.chat ? openai::chat_chunk(gen.id, gen.created, model, "", "length", false)
                                 : openai::completion_chunk(gen.id, gen.created, model, "", "length"));
  const auto num_output = static_cast<int32_t>(gen.options.resume_token_ids.size());
  if (gen.options.include_usage) out += sse(openai::usage_chunk(gen.id, gen.created, model, gen.chat, {num_prompt, num_output, 0}));
  res.set_header("Cache-Control", "no-cache");
  res.set_content(out + "data: [DONE]\n\n", "text/event-stream");
}

}  // namespace kvlm
