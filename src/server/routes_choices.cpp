// The generation routes' shared pieces, and the non-streaming answer: wait
// for every candidate, pick the best n (best_of), format one JSON body.
#include "server/routes_choices.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <numeric>

#include "common/log.h"
#include "server/choice_decoder.h"
#include "server/routes_tools.h"
#include "tokenizer/tokenizer.h"
#include "wire/openai/json_text.h"

namespace kvlm {

using openai::Json;

std::string reason_name(std::optional<FinishReason> r) { return r == FinishReason::kLength ? "length" : "stop"; }

std::string sse(const Json& j) { return "data: " + openai::dump_json(j) + "\n\n"; }

EchoText echo_text(const Tokenizer& tok, std::span<const int32_t> ids) {
  StreamOptions options;
  options.render_special = true;       // as a text prompt holds them
  options.strip_leading_space = true;  // as a text prompt has none
  StreamingDetokenizer detok(tok, options);
  EchoText out;
  for (size_t i = 0; i < ids.size(); ++i) {
    out.offsets.push_back(static_cast<int64_t>(out.text.size()));
    if (i == 0 && ids[0] == tok.bos_id()) continue;  // added by the tokenizer, not in the text
    out.text += detok.push(ids[i]);
  }
  out.text += detok.flush();
  return out;
}

namespace {

// The text offsets of an echoed prompt's tokens (entries[0, n)) and of the
// first generated one (echo_text), within the echoed text of `text_size`.
void set_echo_offsets(const Tokenizer& tok, int32_t first, const std::vector<SampledLogprobs>& prompt_lps,
                      size_t text_size, std::vector<openai::LogprobEntry>& entries) {
  std::vector<int32_t> ids{first};
  for (const SampledLogprobs& lp : prompt_lps) ids.push_back(lp.chosen.token);
  const EchoText echo = echo_text(tok, ids);
  for (size_t i = 0; i < ids.size() && i < entries.size(); ++i)
    entries[i].text_offset = std::min(echo.offsets[i], static_cast<int64_t>(text_size));
  if (entries.size() > ids.size()) entries[ids.size()].text_offset = static_cast<int64_t>(text_size);
}

}  // namespace

Json logprobs_json(const ServerContext& ctx, const Generation& gen, std::optional<int32_t> echoed_first,
                   const std::vector<SampledLogprobs>& prompt_lps, const std::vector<SampledLogprobs>& lps,
                   int64_t* offset, size_t prompt) {
  const Tokenizer& tok = ctx.engine.tokenizer();
  std::vector<openai::LogprobEntry> entries;
  entries.reserve(1 + prompt_lps.size() + lps.size());
  if (echoed_first)
    entries.push_back({{tok.token_to_piece(*echoed_first), std::numeric_limits<float>::quiet_NaN()}, {}, {}});
  for (const auto* list : {&prompt_lps, &lps}) {
    for (const SampledLogprobs& lp : *list) {
      openai::LogprobEntry e{{tok.token_to_piece(lp.chosen.token), lp.chosen.logprob}, {}, {}};
      for (const TokenLogprob& t : lp.top) e.top.push_back({tok.token_to_piece(t.token), t.logprob});
      entries.push_back(std::move(e));
    }
  }
  if (echoed_first && !gen.chat) set_echo_offsets(tok, *echoed_first, prompt_lps, gen.prompt_texts[prompt].size(), entries);
  return gen.chat ? openai::chat_logprobs(entries) : openai::completion_logprobs(entries, offset);
}

openai::Usage total_usage(const Generation& gen, const Submitted& sub) {
  openai::Usage u{0, sub.num_replayed, 0};
  for (int32_t n : sub.num_prompt) u.prompt_tokens += n;
  for (size_t i = 0; i < sub.streams.size(); ++i) {
    const RequestStats stats = sub.streams[i]->stats();
    if (!gen.prompt_only) u.completion_tokens += stats.num_generated_tokens;
    if (i % static_cast<size_t>(sub.num_candidates) == 0)
      u.cached_tokens += std::min(stats.num_cached_tokens, sub.num_prompt[sub.prompt_of(i)]);
  }
  return u;
}

void cancel_all(Engine& engine, const Submitted& sub) {
  for (const auto& s : sub.streams)
    if (!s->done()) engine.cancel(s->id());
}

namespace {

// Text around tool calls without the space that separated it from them.
std::string trimmed(const std::string& s) {
  const size_t first = s.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t\r\n") - first + 1);
}

}  // namespace

namespace {

// The candidates to answer with, prompt by prompt, each prompt's best
// first: all of them in seed order when best_of == n, else the n with the
// highest sum of token log-probabilities (ties keep seed order).
std::vector<size_t> pick(const std::vector<Candidate>& candidates, int32_t num_candidates, int32_t n) {
  std::vector<size_t> out;
  for (size_t first = 0; first < candidates.size(); first += static_cast<size_t>(num_candidates)) {
    std::vector<size_t> order(static_cast<size_t>(num_candidates));
    std::iota(order.begin(), order.end(), first);
    std::vector<double> sums;
    for (size_t i : order) sums.push_back(candidates[i].sum_logprobs());
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return sums[a - first] > sums[b - first]; });
    order.resize(static_cast<size_t>(std::min(n, num_candidates)));
    out.insert(out.end(), order.begin(), order.end());
  }
  return out;
}

// With return_token_ids, the choice's prompt and output as token ids.
Json with_token_ids(Json choice, const Generation& gen, const Submitted& sub, const Candidate& c, size_t prompt) {
  if (!gen.options.return_token_ids) return choice;
  choice["prompt_token_ids"] = sub.prompt_tokens[prompt];
  choice["token_ids"] = c.tokens;
  return choice;
}

// Candidate `c` of prompt `prompt` as the answer's choice `index`.
Json choice_json(const ServerContext& ctx, const Generation& gen, const Submitted& sub, const Candidate& c,
                 size_t prompt, int32_t index) {
  Json lp = nullptr;
  if (gen.options.logprobs >= 0) {
    int64_t offset = 0;
    lp = logprobs_json(ctx, gen, sub.echoed_first[prompt], c.prompt_logprobs, c.logprobs, &offset, prompt);
  }
  if (gen.tool_calls || gen.reasoning) {
    // A call cut off by max_tokens is still a call (finish_reason "length").
    const bool cut = c.reason == FinishReason::kLength;
    ChoiceDecoder decoder(gen);
    decoder.push(c.text);
    decoder.finish(cut);
    const ChoiceAnswer& a = decoder.answer();
    Json choice;
    if (!a.calls.empty()) {
      choice = openai::chat_tool_calls_choice(index, trimmed(a.content), tool_calls_json(a.calls), std::move(lp),
                                              gen.tool_calls->style, cut);
    } else {
      choice = openai::chat_choice(index, a.content, reason_name(c.reason), std::move(lp));
      // Cut before a call could be named: no text, no call, as the stream ends.
      if (gen.tool_calls && cut && a.content.empty()) choice["message"]["content"] = nullptr;
    }
    if (gen.reasoning) choice["message"]["reasoning_content"] = a.reasoning.empty() ? Json(nullptr) : Json(a.reasoning);
    return choice;
  }
  const std::string text = gen.echo ? gen.prompt_texts[prompt] + c.text : c.text;
  return gen.chat ? openai::chat_choice(index, text, reason_name(c.reason), std::move(lp))
                  : openai::completion_choice(index, text, reason_name(c.reason), std::move(lp));
}

}  // namespace

void openai_whole(const ServerContext& ctx, const Generation& gen, const Submitted& sub,
                  const std::vector<Candidate>& candidates, const openai::Usage& usage, http::Response& res) {
  for (const Candidate& c : candidates) {
    if (c.error) return send_error(res, error_for(*c.error));
  }
  for (const Candidate& c : candidates) {
    if (c.reason == FinishReason::kAborted)
      return send_shutting_down(res, "the request was aborted (the server is shutting down)");
  }
  Json choices = Json::array();
  for (size_t i : pick(candidates, sub.num_candidates, gen.options.n)) {
    const auto index = static_cast<int32_t>(choices.size());
    choices.push_back(with_token_ids(choice_json(ctx, gen, sub, candidates[i], sub.prompt_of(i), index), gen, sub,
                                     candidates[i], sub.prompt_of(i)));
  }
  const Json body = openai::choices_response(gen.id, gen.created, gen.model, gen.chat, std::move(choices), usage);
  res.set_content(openai::dump_json(body), "application/json");
}

}  // namespace kvlm
