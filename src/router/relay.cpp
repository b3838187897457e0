// A stream relayed from its worker to the client, and continued on another
// worker when its own fails (docs/router.md "Streams that survive a worker").
//
// The worker is asked for token ids (return_token_ids): the last chunk of
// each of its events carries the ids of that event's tokens. The relay holds
// an event's chunks until that last one has come, then forwards them all and
// counts the ids as delivered. When the worker fails (reset, abort, silence)
// the chunks of an unfinished event are dropped, and each unfinished choice
// is sent to another worker with prompt_token_ids and resume_token_ids (the
// ids delivered): that worker replays them (same sampler draws, grammar,
// stop strings, held-back tool-call text) and goes on with exactly the
// chunks the first one had left. One choice at a time; each keeps its
// index, and every chunk the first id and `created`.
#include <fmt/format.h>

#include "common/error.h"
#include "common/log.h"
#include "router/chunk_scan.h"
#include "router/context.h"
#include "router/sse.h"
#include "router/usage_tally.h"
#include "wire/openai/json_text.h"

namespace kvlm::router {
namespace {

using Ms = std::chrono::milliseconds;

// How long a stream waits for some worker to continue it.
constexpr Ms kResumeDeadline{10000};
constexpr Ms kResumePause{50};

std::string sse(const Json& j) { return "data: " + openai::dump_json(j) + "\n\n"; }

// How many prompts a completions body holds (a list of texts or of token
// lists: several; anything else: one).
int64_t num_prompts(const Json& body) {
  const auto p = body.find("prompt");
  if (p == body.end() || !p->is_array() || p->empty() || (*p)[0].is_number()) return 1;
  return static_cast<int64_t>(p->size());
}

struct ChoiceState {
  std::optional<std::vector<int32_t>> prompt_ids;  // its prompt, as its first chunk gave it
  std::vector<int32_t> ids;  // token ids delivered to the client
  bool started = false;      // some chunk of it was delivered
  bool done = false;         // its last chunk was delivered (or it failed for good)
  std::vector<std::string> held;  // SSE text of an event's chunks until its last one has come
};

// The relay as the transport's Producer: each poll reads what the worker has
// sent (never waiting for it: the transport wakes the relay when the
// worker's socket is readable), resumes on another worker when its own has
// failed, and sends a keep-alive comment when the stream has been quiet for
// a heartbeat. Only a poll that resumes may block (it connects to a worker):
// that one runs on a handler thread, the others on the I/O thread.
class StreamRelay final : public http::Producer {
 public:
  StreamRelay(RouterContext& ctx, StreamStart s);
  void start(std::shared_ptr<http::Waker> waker) override { waker_ = std::move(waker); }
  Progress poll(http::Response& res, Clock::time_point& wake_at) override;
  // The client's connection ended: a worker still streaming is cancelled.
  void cancel() override;
  // Reads never wait (read_body with no wait); a resume connects to a worker.
  bool poll_may_block() const override { return !s_.exchange && !finished_; }

 private:
  void step(std::string& out);
  void read_upstream(std::string& out);
  void on_event(const SseEvent& ev, std::string& out);
  void on_chunk(Json chunk, std::string& out);
  // The same for a chunk scan_chunk could read, on the first worker's stream
  // (no id or index to rewrite): no JSON parse.
  void on_scanned_chunk(ScannedChunk chunk, const std::string& data, std::string& out);
  // An event's last chunk has come: its chunks go out, its ids are delivered.
  void deliver(ChoiceState& state, std::vector<int32_t> ids, bool finished, std::string& out);
  void on_upstream_failure(const std::string& why);
  enum class Resumed { kStarted, kRefused, kNoWorker };
  bool resume(std::string& out);
  Resumed start_choice(size_t c, std::string& out);
  Json resume_body(size_t c) const;
  std::string finish();
  Json stream_usage() const;
  bool all_done() const;

  RouterContext& ctx_;
  StreamStart s_;
  std::shared_ptr<http::Waker> waker_;
  std::vector<ChoiceState> choices_;
  std::vector<size_t> index_map_;  // the current exchange's choice index -> the client's
  SseReader sse_;
  Json id_, created_;              // the first chunk's, on every chunk
  int64_t n_ = 1;                  // choices per prompt (a completions list has several prompts)
  Json usage_chunk_;               // the last usage chunk a worker sent
  bool usage_observed_ = false;
  bool client_usage_ = false, client_ids_ = false;
  bool resumed_ = false;
  bool finished_ = false;
  std::optional<Clock::time_point> resume_deadline_;  // set while no worker can take the stream
  std::optional<Clock::time_point> retry_at_;         // when to look for a worker again
  Clock::time_point last_byte_ = Clock::now();
  Clock::time_point last_write_ = Clock::now();
};

StreamRelay::StreamRelay(RouterContext& ctx, StreamStart s) : ctx_(ctx), s_(std::move(s)) {
  if (const auto it = s_.body.find("n"); it != s_.body.end() && it->is_number_integer())
    n_ = std::clamp<int64_t>(it->get<int64_t>(), 1, 128);
  choices_.resize(static_cast<size_t>(n_ * num_prompts(s_.body)));
  for (size_t i = 0; i < choices_.size(); ++i) index_map_.push_back(i);
  const Json options = s_.body.value("stream_options", Json::object());
  client_usage_ = options.is_object() && options.value("include_usage", false) == true;
  client_ids_ = s_.body.value("return_token_ids", false) == true;
}

bool StreamRelay::all_done() const {
  for (const ChoiceState& c : choices_)
    if (!c.done) return false;
  return true;
}

void StreamRelay::step(std::string& out) {
  if (finished_) return;
  if (!s_.exchange) {
    if (retry_at_ && Clock::now() < *retry_at_) return;
    retry_at_.reset();
    if (!resume(out)) out += finish();
    return;
  }
  read_upstream(out);
  if (!s_.exchange && all_done()) out += finish();
}

StreamRelay::Progress StreamRelay::poll(http::Response& res, Clock::time_point& wake_at) {
  std::string& out = res.body;
  try {
    step(out);
  } catch (const std::exception& e) {
    log_error("router: stream failed: {}", e.what());
    out += "data: {\"error\":{\"message\":\"internal error while streaming\",\"type\":\"server_error\","
           "\"param\":null,\"code\":null}}\n\ndata: [DONE]\n\n";
    cancel();
    return Progress::kDone;
  }
  if (finished_) return Progress::kDone;
  const auto now = Clock::now();
  if (out.empty() && now - last_write_ >= ctx_.config.sse_heartbeat) out = ": keep-alive\n\n";
  if (!out.empty()) last_write_ = now;
  wake_at = last_write_ + ctx_.config.sse_heartbeat;
  if (s_.exchange) {
    // The worker's next bytes wake us; its silence past the idle timeout too.
    waker_->wake_when_readable(s_.exchange->fd());
    wake_at = std::min(wake_at, last_byte_ + ctx_.config.stream_idle_timeout);
  } else {
    wake_at = std::min(wake_at, retry_at_.value_or(now));  // resume now, or when a worker may be back
  }
  return Progress::kPending;
}

void StreamRelay::cancel() {
  s_.exchange.reset();  // closing the connection cancels the worker's request
  s_.dispatch.reset();
}

// What the current exchange has ready (never waiting): its complete events
// go to `out`.
void StreamRelay::read_upstream(std::string& out) {
  try {
    for (;;) {
      std::string bytes;
      const auto r = s_.exchange->read_body(bytes, std::chrono::milliseconds(0));
      if (r == UpstreamExchange::Read::kIdle) {
        if (Clock::now() - last_byte_ >= ctx_.config.stream_idle_timeout)
          throw_error(ErrorCode::kUnavailable, "worker {}: nothing for {} ms", s_.dispatch->worker().url(),
                      ctx_.config.stream_idle_timeout.count());
        return;
      }
      if (r == UpstreamExchange::Read::kEnd) {
        ctx_.workers.report_success(s_.dispatch->worker());
        s_.exchange.reset();
        s_.dispatch.reset();
        // A stream that ended with choices unfinished was cut: continue them.
        if (!all_done()) on_upstream_failure("the stream ended early");
        return;
      }
      last_byte_ = Clock::now();
      for (const SseEvent& ev : sse_.feed(bytes)) on_event(ev, out);
      if (!s_.exchange) return;
    }
  } catch (const Error& e) {
    ctx_.workers.report_failure(s_.dispatch->worker(), e.what());
    on_upstream_failure(e.what());
  }
}

void StreamRelay::on_upstream_failure(const std::string& why) {
  if (s_.dispatch) s_.tried.insert(s_.dispatch->worker().url());
  log_info("router: a stream's worker failed ({}); continuing it elsewhere", why);
  s_.exchange.reset();
  s_.dispatch.reset();
  sse_ = SseReader();
  for (ChoiceState& c : choices_) c.held.clear();  // an event cut in two: resent whole
}

void StreamRelay::on_event(const SseEvent& ev, std::string& out) {
  if (ev.comment) {
    out += ": keep-alive\n\n";
    return;
  }
  if (ev.data == "[DONE]") return;  // the end comes with the body's end
  if (!resumed_ && !id_.is_null() && s_.dispatch)
    if (std::optional<ScannedChunk> chunk = scan_chunk(ev.data)) return on_scanned_chunk(std::move(*chunk), ev.data, out);
  Json j = Json::parse(ev.data, nullptr, false);
  if (!j.is_object()) return;
  if (j.contains("error")) {
    // The worker failed the request itself (its time limit, a fault): that
    // is the answer, not something another worker should redo.
    out += sse(j);
    for (size_t i : index_map_) choices_[i].done = true;
    return;
  }
  const auto choices = j.find("choices");
  if (choices == j.end() || !choices->is_array()) return;
  if (choices->empty()) {
    if (j.contains("usage")) {
      usage_chunk_ = j;
      if (!resumed_ && !usage_observed_ && s_.dispatch) {
        usage_observed_ = true;
        observe_usage(ctx_, *s_.dispatch, j["usage"]);
      }
    }
    return;
  }
  on_chunk(std::move(j), out);
}

void StreamRelay::on_chunk(Json j, std::string& out) {
  s_.dispatch->started();
  Json& choice = j["choices"][0];
  const size_t up_index = choice.value("index", 0);
  if (up_index >= index_map_.size()) return;
  const size_t c = index_map_[up_index];
  ChoiceState& state = choices_[c];
  if (id_.is_null()) {
    id_ = j.value("id", Json());
    created_ = j.value("created", Json());
  }
  j["id"] = id_;
  j["created"] = created_;
  choice["index"] = c;
  const auto ids = choice.find("token_ids");
  if (ids == choice.end()) {
    state.held.push_back(sse(j));  // more chunks of this event to come
    return;
  }
  std::vector<int32_t> new_ids = ids->get<std::vector<int32_t>>();
  if (const auto p = choice.find("prompt_token_ids"); p != choice.end() && !state.prompt_ids)
    state.prompt_ids = p->get<std::vector<int32_t>>();
  if (!client_ids_ || state.started) choice.erase("prompt_token_ids");
  if (!client_ids_) choice.erase("token_ids");
  const bool finished = !choice.value("finish_reason", Json()).is_null();
  state.held.push_back(sse(j));
  deliver(state, std::move(new_ids), finished, out);
}

void StreamRelay::on_scanned_chunk(ScannedChunk chunk, const std::string& data, std::string& out) {
  s_.dispatch->started();
  if (chunk.index >= choices_.size()) return;
  ChoiceState& state = choices_[chunk.index];
  const std::string& text = client_ids_ ? data : chunk.without_ids;
  state.held.push_back("data: " + text + "\n\n");
  if (!chunk.has_ids) return;  // more chunks of this event to come
  if (chunk.prompt_ids && !state.prompt_ids) state.prompt_ids = std::move(chunk.prompt_ids);
  deliver(state, std::move(chunk.ids), chunk.finished, out);
}

void StreamRelay::deliver(ChoiceState& state, std::vector<int32_t> ids, bool finished, std::string& out) {
  for (const std::string& chunk : state.held) out += chunk;
  state.held.clear();
  state.ids.insert(state.ids.end(), ids.begin(), ids.end());
  state.started = true;
  if (finished) state.done = true;
}

// Sends the next unfinished choice to another worker. False when none could
// take it within kResumeDeadline (the stream then ends with an error event);
// true also while it waits for one (the caller keeps the client's
// connection alive meanwhile).
bool StreamRelay::resume(std::string& out) {
  if (!resumed_) ctx_.metrics.stream_resumed();
  resumed_ = true;
  for (size_t c = 0; c < choices_.size(); ++c) {
    if (choices_[c].done) continue;
    switch (start_choice(c, out)) {
      case Resumed::kStarted:
        resume_deadline_.reset();
        return true;
      case Resumed::kRefused: continue;  // that choice ended with the worker's error
      case Resumed::kNoWorker: break;
    }
    const auto now = Clock::now();
    if (!resume_deadline_) resume_deadline_ = now + kResumeDeadline;
    if (now < *resume_deadline_) {
      retry_at_ = now + kResumePause;
      return true;
    }
    ctx_.metrics.resume_failed();
    const Json error = {{"error", {{"message", "the stream's worker failed and no other worker could continue it"},
                                   {"type", "server_error"}, {"param", nullptr}, {"code", "no_worker_available"}}}};
    out += sse(error);
    for (ChoiceState& s : choices_) s.done = true;
    return false;
  }
  return false;
}

Json StreamRelay::resume_body(size_t c) const {
  Json b = s_.body;
  b.erase("n");
  b.erase("best_of");
  b["stream"] = true;
  b["return_token_ids"] = true;
  Json options = b.contains("stream_options") && b["stream_options"].is_object() ? b["stream_options"] : Json::object();
  options["include_usage"] = true;
  b["stream_options"] = options;
  // Choice c is choice c % n of prompt c / n; with seed S it samples as the
  // request with seed S + c % n (the worker's rule for n), and
  // resume_token_ids skips the draws its delivered tokens took.
  b["seed"] = static_cast<int64_t>(s_.seed + c % static_cast<size_t>(n_));
  if (const auto p = b.find("prompt"); p != b.end() && p->is_array() && !p->empty() && !(*p)[0].is_number())
    b["prompt"] = (*p)[c / static_cast<size_t>(n_)];
  if (choices_[c].prompt_ids) b["prompt_token_ids"] = *choices_[c].prompt_ids;
  b["resume_token_ids"] = choices_[c].ids;
  if (choices_[c].started) b.erase("echo");  // the client has the prompt already
  return b;
}

// Sends choice c (its delivered tokens to replay) to a worker that has not
// failed this stream.
StreamRelay::Resumed StreamRelay::start_choice(size_t c, std::string& out) {
  PromptInfo prompt;
  if (choices_[c].prompt_ids) {
    prompt.tokens = *choices_[c].prompt_ids;
    prompt.tokens.insert(prompt.tokens.end(), choices_[c].ids.begin(), choices_[c].ids.end());
  }
  prompt.salt_key = s_.prompt.salt_key;
  prompt.session = s_.prompt.session;
  const std::string body = openai::dump_json(resume_body(c));
  while (std::unique_ptr<Dispatch> d = dispatch(ctx_, prompt, s_.tried)) {
    Worker& w = d->worker();
    try {
      auto x = std::make_unique<UpstreamExchange>(w.link, upstream_request(ctx_, "POST", s_.path, body),
                                                  upstream_timeouts(ctx_));
      if (x->status() == 200) {
        s_.exchange = std::move(x);
        s_.dispatch = std::move(d);
        index_map_ = {c};
        last_byte_ = Clock::now();
        return Resumed::kStarted;
      }
      const std::string answer = x->read_all(ctx_.config.stream_idle_timeout);
      ctx_.workers.report_success(w);
      s_.tried.insert(w.url());
      if (worth_another_worker(x->status())) continue;
      // The worker refuses the resumed request: its error is the answer.
      const Json error = Json::parse(answer, nullptr, false);
      out += sse(error.is_object() ? error : Json{{"error", {{"message", answer}, {"type", "server_error"}}}});
      choices_[c].done = true;
      return Resumed::kRefused;
    } catch (const Error& e) {
      ctx_.workers.report_failure(w, e.what());
      s_.tried.insert(w.url());
    }
  }
  s_.tried.clear();  // every worker failed it once: the next try may find one back
  return Resumed::kNoWorker;
}

// The stream's usage: the worker's usage chunk, or after a resume the
// stream's whole: the prompt once, every choice's tokens. Null: none came.
Json StreamRelay::stream_usage() const {
  if (!usage_chunk_.is_object()) return nullptr;
  Json usage = usage_chunk_["usage"];
  if (!resumed_) return usage;
  int64_t completion = 0;
  for (const ChoiceState& c : choices_) completion += static_cast<int64_t>(c.ids.size());
  int64_t num_prompt = 0;  // each prompt once: its first choice's
  for (size_t c = 0; c < choices_.size(); c += static_cast<size_t>(n_))
    num_prompt += choices_[c].prompt_ids ? static_cast<int64_t>(choices_[c].prompt_ids->size()) : 0;
  if (num_prompt > 0) usage["prompt_tokens"] = num_prompt;
  usage["completion_tokens"] = completion;
  usage["total_tokens"] = usage.value("prompt_tokens", 0) + completion;
  return usage;
}

// The stream's end: its tokens charged to the client's key, the usage chunk
// if the client asked for it, and [DONE].
std::string StreamRelay::finish() {
  finished_ = true;
  std::string out;
  const Json usage = stream_usage();
  if (s_.key && usage.is_object()) s_.key->charge_tokens(usage_total(usage));
  if (client_usage_ && usage.is_object()) {
    Json u = usage_chunk_;
    u["id"] = id_.is_null() ? u["id"] : id_;
    u["created"] = created_.is_null() ? u["created"] : created_;
    u["usage"] = usage;
    out += sse(u);
  }
  return out + "data: [DONE]\n\n";
}

}  // namespace

void relay_stream(RouterContext& ctx, StreamStart start, http::Response& res) {
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.stream("text/event-stream", std::make_unique<StreamRelay>(ctx, std::move(start)));
}

}  // namespace kvlm::router
