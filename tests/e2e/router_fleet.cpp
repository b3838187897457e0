#include "e2e/router_fleet.h"

#include <sys/wait.h>

#include <algorithm>
#include <csignal>
#include <thread>

#include <gtest/gtest.h>
#include <httplib.h>

namespace kvlm::test {

std::string Fleet::model() { return shared_path("models/stories260K.gguf"); }
std::string Fleet::chat_template() { return shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja"); }

std::vector<std::string> Fleet::worker_argv(size_t i) const {
  std::vector<std::string> a = {"-m", model(), "-t", "1", "--kv-events", "--chat-template-file", chat_template()};
  if (i < ports_.size()) a.insert(a.end(), {"--port", std::to_string(ports_[i])});
  a.insert(a.end(), options_.worker_args.begin(), options_.worker_args.end());
  return a;
}

Fleet::Fleet(FleetOptions options) : options_(std::move(options)) {
  for (int i = 0; i < options_.num_workers; ++i) {
    workers_.push_back(std::make_unique<ServerProcess>(worker_argv(ports_.size())));
    ports_.push_back(workers_.back()->port());
  }
  if (options_.start_router) start_router();
}

Fleet::~Fleet() {
  router_.reset();
  workers_.clear();
}

std::string Fleet::worker_list() const {
  std::string list;
  for (size_t i = 0; i < ports_.size(); ++i) list += (i ? "," : "") + worker_url(i);
  return list;
}

void Fleet::start_router(const std::vector<std::string>& extra) {
  std::vector<std::string> a = {"-m", model(), "--chat-template-file", chat_template(), "--workers", worker_list()};
  a.insert(a.end(), options_.router_args.begin(), options_.router_args.end());
  a.insert(a.end(), extra.begin(), extra.end());
  router_.reset();
  router_ = std::make_unique<ServerProcess>(a, "router");
  wait_ready();
}

void Fleet::wait_ready() {
  // Every worker checked up and its KV events flowing, so a test's first
  // request is routed as every later one (bounded: a failure shows later).
  // A router on HTTPS or behind a key is the test's own business.
  const auto& args = options_.router_args;
  for (const char* flag : {"--ssl-cert-file", "--api-key", "--metrics-key"})
    if (std::find(args.begin(), args.end(), flag) != args.end()) return;
  for (int i = 0; i < 500; ++i) {
    const HttpAnswer a = http_get(router_->port(), "/v1/status");
    const Json status = a.status == 200 ? a.json() : Json();
    size_t num_ready = 0;
    if (status.is_object())
      for (const Json& w : status["workers"])
        if (w["state"] == "up" && w["kv_events"] == true && w["kv_blocks_total"].get<int64_t>() > 0) ++num_ready;
    if (num_ready == ports_.size() || a.status == 401) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void Fleet::kill_worker(size_t i) {
  workers_[i]->send_signal(SIGKILL);
  workers_[i]->wait();
}

void Fleet::restart_worker(size_t i) {
  workers_[i].reset();
  workers_[i] = std::make_unique<ServerProcess>(worker_argv(i));
}

HttpAnswer http_post(int port, const std::string& path, const Json& body, int timeout_s) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(timeout_s);
  auto r = c.Post(path, body.dump(), "application/json");
  return r ? HttpAnswer{r->status, r->body} : HttpAnswer{};
}

HttpAnswer http_get(int port, const std::string& path) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(30);
  auto r = c.Get(path);
  return r ? HttpAnswer{r->status, r->body} : HttpAnswer{};
}

std::vector<Json> http_stream(int port, const std::string& path, const Json& body, int* status) {
  const HttpAnswer a = http_post(port, path, body);
  if (status) *status = a.status;
  std::vector<Json> out;
  if (a.status != 200) return out;
  for (const std::string& d : sse_data(a.body)) {
    if (d == "[DONE]") continue;
    Json j = Json::parse(d, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << "not JSON: " << d;
    out.push_back(j);
  }
  return out;
}

namespace {

Json without_call_ids(Json calls) {
  for (Json& c : calls) c.erase("id");
  return calls;
}

Json visible_usage(Json usage) {
  if (usage.is_object()) usage.erase("prompt_tokens_details");  // what the cache held
  return usage;
}

}  // namespace

Json visible_answer(const Json& response) {
  if (!response.is_object()) return response;
  Json out = response;
  out.erase("id");
  out.erase("created");
  if (out.contains("usage")) out["usage"] = visible_usage(out["usage"]);
  if (out.contains("choices"))
    for (Json& c : out["choices"])
      if (c.contains("message") && c["message"].contains("tool_calls"))
        c["message"]["tool_calls"] = without_call_ids(c["message"]["tool_calls"]);
  return out;
}

namespace {

// A tool-call delta added to the calls so far: its name and arguments
// joined by index, as a client joins them (where the pieces split depends on
// how fast the stream is read: a slow reader gets merged events).
void add_call_piece(Json& calls, const Json& piece) {
  const size_t k = piece.value("index", 0);
  while (calls.size() <= k) calls.push_back({{"index", calls.size()}, {"name", ""}, {"arguments", ""}});
  Json& call = calls[k];
  const Json f = piece.value("function", Json::object());
  call["name"] = call["name"].get<std::string>() + f.value("name", "");
  call["arguments"] = call["arguments"].get<std::string>() + f.value("arguments", "");
  if (piece.contains("type")) call["type"] = piece["type"];
}

}  // namespace

Json visible_stream(const std::vector<Json>& chunks) {
  Json choices = Json::object(), usage, errors = Json::array();
  for (const Json& c : chunks) {
    if (c.contains("error")) errors.push_back(c["error"]);
    if (c.contains("usage") && !c["usage"].is_null()) usage = visible_usage(c["usage"]);
    if (!c.contains("choices")) continue;
    for (const Json& ch : c["choices"]) {
      Json& v = choices[std::to_string(ch.value("index", 0))];
      if (v.is_null()) v = {{"text", ""}, {"logprob_tokens", Json::array()}, {"tool_calls", Json::array()}};
      if (ch.contains("text")) v["text"] = v["text"].get<std::string>() + ch["text"].get<std::string>();
      if (ch.contains("delta")) {
        const Json& d = ch["delta"];
        if (d.contains("content") && d["content"].is_string())
          v["text"] = v["text"].get<std::string>() + d["content"].get<std::string>();
        if (d.contains("tool_calls"))
          for (const Json& t : without_call_ids(d["tool_calls"])) add_call_piece(v["tool_calls"], t);
        if (d.contains("role")) v["role"] = d["role"];
      }
      if (ch.contains("logprobs") && ch["logprobs"].is_object()) {
        const Json& lp = ch["logprobs"];
        const Json& tokens = lp.contains("tokens") ? lp["tokens"] : lp.value("content", Json::array());
        for (const Json& t : tokens) v["logprob_tokens"].push_back(t.is_object() ? t["token"] : t);
      }
      if (!ch["finish_reason"].is_null()) v["finish_reason"] = ch["finish_reason"];
    }
  }
  return {{"choices", choices}, {"usage", usage}, {"errors", errors}};
}

}  // namespace kvlm::test
