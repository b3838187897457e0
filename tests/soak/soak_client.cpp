#include "soak/soak_client.h"

#include <sys/socket.h>
#include <sys/time.h>

#include <thread>

#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "support/raw_socket.h"
#include "support/test_support.h"

namespace kvlm::soak {
namespace {

using Json = nlohmann::json;

const char* const kPrefixes[] = {
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun with her dog",
    "One day, a big red ball rolled into the garden. Tom wanted to catch it, so he ran and ran until",
    "The cat sat on the warm mat and looked at the bird in the tree. The bird sang a happy song and",
    "In a small house near the woods lived an old man who liked to bake bread for all of his friends",
};
const char* const kWords[] = {"sun", "tree", "happy", "ran", "blue", "toy", "mom", "jump", "fish", "rain",
                              "box", "sing", "cake", "park", "red", "friend", "big", "sleep", "car", "moon"};

std::string classify_error(int status, const std::string& body, Outcome& o) {
  Json j;
  try {
    j = Json::parse(body);
  } catch (const std::exception& e) {
    o.detail = fmt::format("status {} with a body that is not JSON: {}", status, body.substr(0, 200));
    return "malformed";
  }
  if (!j.contains("error") || !j["error"].contains("message") || !j["error"]["message"].is_string()) {
    o.detail = fmt::format("status {} without an OpenAI error: {}", status, body.substr(0, 200));
    return "malformed";
  }
  const std::string message = j["error"]["message"];
  if (status == 503 && j["error"]["code"] == "queue_full") return "queue_full";
  if (message.find("injected fault") != std::string::npos) return "fault";
  o.detail = fmt::format("status {}: {}", status, message);
  return fmt::format("http_{}", status);
}

Json request_json(std::mt19937& rng, bool stream, int n) {
  Json body{{"prompt", random_prompt(rng)}, {"max_tokens", 1 + static_cast<int>(rng() % 64)}, {"stream", stream}};
  if (rng() % 2) body["temperature"] = 0;
  if (rng() % 4 == 0) body["ignore_eos"] = true;
  if (n > 1) body["n"] = n;
  if (stream && rng() % 2) body["stream_options"] = {{"include_usage", true}};
  return body;
}

// Sends `request`, or a part of it, on a raw socket and hangs up at a random point.
Outcome hang_up(int port, std::mt19937& rng, const std::string& request) {
  Outcome o{"hangup", "", false};
  const int fd = test::connect_socket(port);
  if (fd < 0) return {"transport", "cannot connect", false};
  if (rng() % 3 == 0) {
    test::send_all(fd, request.substr(0, rng() % request.size()));  // the request never completes
  } else if (test::send_all(fd, request)) {
    timeval tv{10, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    size_t want = rng() % 3000;
    char buf[512];
    while (want > 0) {
      const ssize_t n = ::recv(fd, buf, std::min(want, sizeof(buf)), 0);
      if (n <= 0) break;
      want -= static_cast<size_t>(n);
    }
  }
  test::close_socket(fd);
  return o;
}

Outcome whole(int port, const Json& body, int n) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(120);
  auto r = cli.Post("/v1/completions", body.dump(), "application/json");
  Outcome o{"", "", false};
  if (!r) return {"transport", fmt::format("no answer ({}) to {}", httplib::to_string(r.error()), body.dump()), false};
  if (r->status != 200) {
    o.kind = classify_error(r->status, r->body, o);
    return o;
  }
  o.detail = check_body(r->body, n);
  o.kind = o.detail.empty() ? "ok" : "malformed";
  return o;
}

// A stream read whole, or (`cancel`) dropped after its first event.
Outcome streamed(int port, const Json& body, int n, bool cancel) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(120);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.headers = {{"Content-Type", "application/json"}};
  req.body = body.dump();
  std::string received;
  bool cancelled = false;
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    received.append(data, len);
    if (cancel && received.find("data: ") != std::string::npos) cancelled = true;
    return !cancelled;
  };
  auto r = cli.send(req);
  Outcome o{"", "", true};
  if (cancelled) return {"cancel", "", true};
  if (!r)
    return {"transport", fmt::format("no answer ({}) to {} after {} bytes", httplib::to_string(r.error()), body.dump(),
                                     received.size()),
            true};
  const std::string& text = received.empty() ? r->body : received;
  if (r->status != 200) {
    o.kind = classify_error(r->status, text, o);
    return o;
  }
  o.detail = check_stream(text, n);
  if (o.detail == "fault") return {"fault", "", true};
  o.kind = o.detail.empty() ? "ok" : "malformed";
  return o;
}

}  // namespace

void Tally::add(const Outcome& o) {
  std::lock_guard lock(mu);
  by_kind[o.kind]++;
  if (o.streamed) ++num_streamed;
  const bool expected = o.kind == "ok" || o.kind == "hangup" || o.kind == "cancel" || o.kind == "queue_full" ||
                        o.kind == "fault";
  if (!expected && samples.size() < 10) samples.push_back(o.kind + ": " + o.detail);
}

int64_t Tally::count(const std::string& kind) const {
  std::lock_guard lock(mu);
  auto it = by_kind.find(kind);
  return it == by_kind.end() ? 0 : it->second;
}

int64_t Tally::total() const {
  std::lock_guard lock(mu);
  int64_t n = 0;
  for (const auto& [k, v] : by_kind) n += v;
  return n;
}

std::string Tally::summary() const {
  std::lock_guard lock(mu);
  std::string out;
  for (const auto& [k, v] : by_kind) out += fmt::format("{}{} {}", out.empty() ? "" : ", ", k, v);
  return out + fmt::format(" ({} streamed)", num_streamed);
}

std::vector<std::string> Tally::unexpected_samples() const {
  std::lock_guard lock(mu);
  return samples;
}

std::string random_prompt(std::mt19937& rng) {
  std::string p;
  if (rng() % 2) p = kPrefixes[rng() % std::size(kPrefixes)];
  for (int i = 0, n = 1 + static_cast<int>(rng() % 12); i < n; ++i) {
    if (!p.empty()) p += ' ';
    p += kWords[rng() % std::size(kWords)];
  }
  return p;
}

Outcome run_one(int port, std::mt19937& rng) {
  const bool stream = rng() % 2;
  const int n = !stream && rng() % 10 == 0 ? 2 : 1;
  const Json body = request_json(rng, stream, n);
  if (rng() % 5 == 0) return hang_up(port, rng, test::raw_post("/v1/completions", body.dump()));
  Outcome o = !stream ? whole(port, body, n) : streamed(port, body, n, /*cancel=*/rng() % 10 == 0);
  // A client refused for the queue waits its Retry-After (1 s) before its
  // next request, as SDKs do on a 503; one that retried at once would only
  // measure refusals (the transport no longer queues clients for a thread).
  if (o.kind == "queue_full") std::this_thread::sleep_for(std::chrono::milliseconds(1000 + rng() % 200));
  return o;
}

std::string check_body(const std::string& body, int num_choices) {
  try {
    const Json j = Json::parse(body);
    if (!j.contains("choices") || !j["choices"].is_array() || static_cast<int>(j["choices"].size()) != num_choices)
      return "choices missing or of the wrong size: " + body.substr(0, 200);
    for (const Json& c : j["choices"]) {
      if (!c["text"].is_string()) return "a choice without text";
      if (c["finish_reason"] != "stop" && c["finish_reason"] != "length") return "finish_reason " + c["finish_reason"].dump();
    }
    if (!j.contains("usage") || !j["usage"]["completion_tokens"].is_number()) return "no usage";
  } catch (const std::exception& e) {
    return fmt::format("not JSON ({}): {}", e.what(), body.substr(0, 200));
  }
  return "";
}

std::string check_stream(const std::string& body, int num_choices) {
  const std::vector<std::string> events = test::sse_data(body);
  if (events.empty() || events.back() != "[DONE]") return "the stream does not end with [DONE]: " + body.substr(0, 200);
  std::vector<int> finished(static_cast<size_t>(num_choices), 0);
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    Json j;
    try {
      j = Json::parse(events[i]);
    } catch (const std::exception& e) {
      return "an event that is not JSON: " + events[i].substr(0, 200);
    }
    if (j.contains("error")) {
      const std::string m = j["error"].value("message", "");
      return m.find("injected fault") != std::string::npos ? "fault" : "error event: " + m;
    }
    if (!j.contains("choices") || !j["choices"].is_array()) return "an event without choices";
    for (const Json& c : j["choices"]) {
      const int index = c.value("index", -1);
      if (index < 0 || index >= num_choices) return "choice index out of range";
      if (!c["finish_reason"].is_null()) finished[static_cast<size_t>(index)]++;
    }
  }
  for (int f : finished)
    if (f != 1) return fmt::format("a choice finished {} times", f);
  return "";
}

}  // namespace kvlm::soak
