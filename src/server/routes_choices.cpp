// The generation routes' shared pieces, and the non-streaming answer: wait
// for every candidate, pick the best n (best_of), format one JSON body.
#include "server/routes_choices.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <numeric>

#include "common/log.h"
#include "server/http/peer_probe.h"
#include "server/openai/json_text.h"
#include "server/routes_tools.h"
#include "tokenizer/tokenizer.h"

namespace kvlm {

using openai::Json;

std::string reason_name(std::optional<FinishReason> r) { return r == FinishReason::kLength ? "length" : "stop"; }

std::string sse(const Json& j) { return "data: " + openai::dump_json(j) + "\n\n"; }

Json logprobs_json(const ServerContext& ctx, const Generation& gen, std::optional<int32_t> echoed_first,
                   const std::vector<SampledLogprobs>& prompt_lps, const std::vector<SampledLogprobs>& lps,
                   int64_t* offset) {
  const Tokenizer& tok = ctx.engine.tokenizer();
  std::vector<openai::LogprobEntry> entries;
  entries.reserve(1 + prompt_lps.size() + lps.size());
  if (echoed_first)
    entries.push_back({{tok.token_to_piece(*echoed_first), std::numeric_limits<float>::quiet_NaN()}, {}});
  for (const auto* list : {&prompt_lps, &lps}) {
    for (const SampledLogprobs& lp : *list) {
      openai::LogprobEntry e{{tok.token_to_piece(lp.chosen.token), lp.chosen.logprob}, {}};
      for (const TokenLogprob& t : lp.top) e.top.push_back({tok.token_to_piece(t.token), t.logprob});
      entries.push_back(std::move(e));
    }
  }
  return gen.chat ? openai::chat_logprobs(entries) : openai::completion_logprobs(entries, offset);
}

openai::Usage total_usage(const Submitted& sub) {
  openai::Usage u{sub.num_prompt, 0, 0};
  for (const auto& s : sub.streams) u.completion_tokens += s->stats().num_generated_tokens;
  if (!sub.streams.empty()) u.cached_tokens = sub.streams[0]->stats().num_cached_tokens;
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

// How often a non-streaming request looks whether its client is still there.
constexpr auto kHangUpCheck = std::chrono::milliseconds(100);

// One candidate's whole output.
struct Candidate {
  std::string text;
  std::vector<SampledLogprobs> logprobs, prompt_logprobs;
  std::optional<FinishReason> reason;
  std::optional<Error> error;
  double sum_logprobs() const {
    double sum = 0;
    for (const SampledLogprobs& lp : logprobs) sum += lp.chosen.logprob;
    return sum;
  }
};

// Reads every candidate to its end, one after the other (the engine runs
// them all meanwhile; their events wait in their streams). Nothing is
// written until the end, so the connection is watched instead: a client that
// gave up (timeout, Ctrl-C) gets every candidate cancelled; nullopt then.
std::optional<std::vector<Candidate>> collect(ServerContext& ctx, const Submitted& sub, const httplib::Request& req) {
  const PeerProbe probe(req.remote_addr, req.remote_port, req.local_port);
  auto last_check = std::chrono::steady_clock::now();
  std::vector<Candidate> out(sub.streams.size());
  for (size_t i = 0; i < sub.streams.size(); ++i) {
    RequestStream& stream = *sub.streams[i];
    Candidate& c = out[i];
    while (!stream.done()) {
      auto ev = stream.next_for(kHangUpCheck);
      if (const auto now = std::chrono::steady_clock::now(); now - last_check >= kHangUpCheck) {
        last_check = now;
        if (probe.peer_closed()) {
          cancel_all(ctx.engine, sub);
          log_info("server: client {}:{} hung up; request {} ({} choices) cancelled", req.remote_addr,
                   req.remote_port, sub.streams[0]->id().value(), sub.streams.size());
          for (const auto& s : sub.streams)
            while (s->next()) {}  // drain: the engine finishes them as aborted
          return std::nullopt;
        }
      }
      if (!ev) continue;
      c.text += ev->text;
      c.logprobs.insert(c.logprobs.end(), ev->logprobs.begin(), ev->logprobs.end());
      c.prompt_logprobs.insert(c.prompt_logprobs.end(), ev->prompt_logprobs.begin(), ev->prompt_logprobs.end());
      if (ev->error) c.error = ev->error;
      if (ev->finished) c.reason = ev->finish_reason;
    }
  }
  return out;
}

// The candidates to answer with, best first: all of them in seed order when
// best_of == n, else the n with the highest sum of token log-probabilities
// (ties keep seed order).
std::vector<size_t> pick(const std::vector<Candidate>& candidates, int32_t n) {
  std::vector<size_t> order(candidates.size());
  std::iota(order.begin(), order.end(), size_t{0});
  if (static_cast<size_t>(n) >= candidates.size()) return order;
  std::vector<double> sums;
  for (const Candidate& c : candidates) sums.push_back(c.sum_logprobs());
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return sums[a] > sums[b]; });
  order.resize(static_cast<size_t>(n));
  return order;
}

Json choice_json(const ServerContext& ctx, const Generation& gen, const Submitted& sub, const Candidate& c,
                 int32_t index) {
  Json lp = nullptr;
  if (gen.options.logprobs >= 0) {
    int64_t offset = 0;
    lp = logprobs_json(ctx, gen, sub.echoed_first, c.prompt_logprobs, c.logprobs, &offset);
  }
  const std::string text = gen.echo ? gen.prompt_text + c.text : c.text;
  if (gen.tool_calls && c.reason != FinishReason::kLength) {
    // A call cut off by max_tokens is malformed anyway: plain content.
    ParsedToolCalls p = parse_tool_calls(gen.tool_calls->format, c.text);
    if (!gen.tool_calls->parallel && p.calls.size() > 1) p.calls.resize(1);
    if (!p.calls.empty())
      return openai::chat_tool_calls_choice(index, trimmed(p.content), tool_calls_json(gen.tool_calls->format, p.calls),
                                            std::move(lp));
  }
  return gen.chat ? openai::chat_choice(index, text, reason_name(c.reason), std::move(lp))
                  : openai::completion_choice(index, text, reason_name(c.reason), std::move(lp));
}

}  // namespace

void answer_whole(ServerContext& ctx, const Generation& gen, const Submitted& sub, const httplib::Request& req,
                  httplib::Response& res) {
  const std::optional<std::vector<Candidate>> candidates = collect(ctx, sub, req);
  if (!candidates) return;  // the client is gone
  for (const Candidate& c : *candidates) {
    if (c.error) return send_error(res, error_for(*c.error));
  }
  for (const Candidate& c : *candidates) {
    if (c.reason == FinishReason::kAborted)
      return send_error(res, {503, "the request was aborted (the server is shutting down)", std::nullopt, "server_error"});
  }
  Json choices = Json::array();
  for (size_t i : pick(*candidates, gen.options.n))
    choices.push_back(choice_json(ctx, gen, sub, (*candidates)[i], static_cast<int32_t>(choices.size())));
  const Json body = openai::choices_response(gen.id, gen.created, ctx.model_name, gen.chat, std::move(choices),
                                             total_usage(sub));
  res.set_content(openai::dump_json(body), "application/json");
}

}  // namespace kvlm
