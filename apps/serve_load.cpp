#include "apps/serve_load.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/progress.h"

namespace kvlm::apps {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// Common words; most are one token in a byte-level BPE vocabulary, so a
// prompt of P words is about P tokens there (the usage chunk tells exactly).
constexpr const char* kWords[] = {
    "the", "time", "people", "way", "day", "man", "thing", "woman", "life", "child", "world", "school",
    "state", "family", "student", "group", "country", "problem", "hand", "part", "place", "case", "week",
    "company", "system", "program", "question", "work", "government", "number", "night", "point", "home",
    "water", "room", "mother", "area", "money", "story", "fact", "month", "lot", "right", "study", "book",
    "eye", "job", "word", "business", "issue", "side", "kind", "head", "house", "service", "friend",
    "father", "power", "hour", "game", "line", "end", "member", "law", "car", "city", "name", "team"};

std::vector<std::string> split_words(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

std::string join(const std::vector<std::string>& words) {
  std::string s;
  for (const auto& w : words) s += (s.empty() ? "" : " ") + w;
  return s;
}

// "http://h:p/v1/" -> {"http://h:p", ""}; "http://h:p/api/v1" -> {"http://h:p", "/api"}.
std::pair<std::string, std::string> split_url(std::string url) {
  const size_t scheme = url.find("://");
  const size_t slash = url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
  std::string base = url.substr(0, slash), path = slash == std::string::npos ? "" : url.substr(slash);
  while (!path.empty() && path.back() == '/') path.pop_back();
  if (path.size() >= 3 && path.compare(path.size() - 3, 3, "/v1") == 0) path.resize(path.size() - 3);
  return {base, path};
}

std::unique_ptr<httplib::Client> make_client(const LoadOptions& o) {
  auto cli = std::make_unique<httplib::Client>(split_url(o.url).first);
  if (!cli->is_valid()) throw_error(ErrorCode::kInvalidArgument, "--url {}: not an http://host:port URL", o.url);
  const auto secs = static_cast<time_t>(o.timeout_s);
  cli->set_read_timeout(secs, 0);
  cli->set_write_timeout(secs, 0);
  cli->set_connection_timeout(10, 0);
  cli->set_tcp_nodelay(true);  // a request is headers then body: no Nagle wait between them
  if (!o.api_key.empty()) cli->set_bearer_token_auth(o.api_key);
  return cli;
}

// Reads SSE events as they arrive and times the chunks that carry text.
class StreamParser {
 public:
  StreamParser(RequestResult& r, Clock::time_point sent) : r_(r), sent_(sent) {}
  void feed(const char* data, size_t n) {
    buffer_.append(data, n);
    for (size_t end; (end = buffer_.find("\n\n")) != std::string::npos;) {
      std::string event = buffer_.substr(0, end);
      buffer_.erase(0, end + 2);
      event.erase(std::remove(event.begin(), event.end(), '\r'), event.end());
      if (event.rfind("data: ", 0) == 0) on_data(event.substr(6));  // ": ..." lines are comments
    }
  }
  bool done() const { return done_; }
  const std::string& error() const { return error_; }
  bool usage_seen() const { return usage_seen_; }

 private:
  void on_data(const std::string& payload) {
    if (payload == "[DONE]") {
      done_ = true;
      r_.e2e_s = std::chrono::duration<double>(Clock::now() - sent_).count();
      return;
    }
    const Json j = Json::parse(payload, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return set_error("a stream event that is not JSON: " + payload.substr(0, 80));
    if (j.contains("error")) return set_error("error in the stream: " + j["error"].dump());
    if (j.contains("usage") && j["usage"].is_object()) {
      usage_seen_ = true;
      r_.num_prompt_tokens = j["usage"].value("prompt_tokens", int64_t{0});
      r_.num_generated_tokens = j["usage"].value("completion_tokens", int64_t{0});
      const Json details = j["usage"].value("prompt_tokens_details", Json::object());
      if (details.is_object() && details.contains("cached_tokens") && details["cached_tokens"].is_number_integer())
        r_.num_cached_tokens = details["cached_tokens"].get<int64_t>();
    }
    if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) return;
    const Json& text = j["choices"][0]["text"];
    if (!text.is_string() || text.get_ref<const std::string&>().empty()) return;
    const auto now = Clock::now();
    if (r_.num_text_chunks == 0) {
      r_.ttft_s = std::chrono::duration<double>(now - sent_).count();
    } else {
      r_.itl_s.push_back(std::chrono::duration<double>(now - last_).count());
    }
    last_ = now;
    ++r_.num_text_chunks;
    r_.text += text.get_ref<const std::string&>();
  }
  void set_error(std::string e) {
    if (error_.empty()) error_ = std::move(e);
  }

  RequestResult& r_;
  const Clock::time_point sent_;
  Clock::time_point last_;
  std::string buffer_, error_;
  bool done_ = false, usage_seen_ = false;
};

RequestResult send_one(httplib::Client& cli, const LoadOptions& o, const LoadRequest& request) {
  RequestResult r;
  Json body = {{"prompt", request.prompt}, {"max_tokens", o.gen_len}, {"ignore_eos", true},
               {"temperature", 0},         {"stream", true},          {"stream_options", {{"include_usage", true}}}};
  if (!o.model.empty()) body["model"] = o.model;
  if (!request.user.empty()) body["user"] = request.user;
  httplib::Request req;
  req.method = "POST";
  req.path = split_url(o.url).second + "/v1/completions";
  req.headers = {{"Content-Type", "application/json"}, {"Accept", "text/event-stream"}};
  req.body = body.dump();
  const auto sent = Clock::now();
  StreamParser parser(r, sent);
  std::string error_body;
  int status = 0;
  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (status != 200) {
      error_body.append(data, std::min<size_t>(n, 500));
      return true;
    }
    parser.feed(data, n);
    return true;
  };
  auto res = cli.send(req);
  if (!res) {
    r.error = "transport: " + httplib::to_string(res.error());
  } else if (status != 200) {
    const Json j = Json::parse(error_body, nullptr, false);
    const std::string msg = !j.is_discarded() && j.contains("error") && j["error"].is_object()
                                ? j["error"].value("message", error_body)
                                : error_body;
    r.error = fmt::format("HTTP {}: {}", status, msg.substr(0, 200));
  } else if (!parser.error().empty()) {
    r.error = parser.error();
  } else if (!parser.done()) {
    r.error = "the stream ended without [DONE]";
  } else {
    r.ok = true;
    if (!parser.usage_seen()) r.num_generated_tokens = r.num_text_chunks;
  }
  return r;
}

}  // namespace

std::vector<std::string> make_prompts(int num_prompts, int prompt_len, int shared_prefix,
                                      const std::string& dataset_path, uint64_t seed) {
  std::vector<std::vector<std::string>> lines;  // words per non-empty line
  if (!dataset_path.empty()) {
    std::ifstream in(dataset_path);
    if (!in) throw_error(ErrorCode::kNotFound, "--dataset {}: cannot open the file", dataset_path);
    for (std::string line; std::getline(in, line);)
      if (auto w = split_words(line); !w.empty()) lines.push_back(std::move(w));
    if (lines.empty()) throw_error(ErrorCode::kInvalidArgument, "--dataset {}: the file has no words", dataset_path);
  }
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> pick(0, std::size(kWords) - 1);
  // Words from line `first` on, wrapping around the file; random without one.
  auto words_from = [&](size_t first, int count) {
    std::vector<std::string> out;
    for (size_t l = first; static_cast<int>(out.size()) < count; ++l) {
      if (lines.empty()) {
        out.push_back(kWords[pick(rng)]);
        continue;
      }
      for (const auto& w : lines[l % lines.size()])
        if (static_cast<int>(out.size()) < count) out.push_back(w);
    }
    return out;
  };
  const std::vector<std::string> prefix = words_from(0, shared_prefix);
  std::vector<std::string> prompts;
  for (int i = 0; i < num_prompts; ++i) {
    std::vector<std::string> words = prefix;
    // Past the shared lines, so the prefix is all that requests share.
    for (auto& w : words_from(i + 1 + (shared_prefix > 0), prompt_len - shared_prefix)) words.push_back(std::move(w));
    prompts.push_back(join(words));
  }
  return prompts;
}

std::optional<double> tokens_per_word(const LoadOptions& options, const std::string& sample) {
  auto cli = make_client(options);
  const Json body = {{"content", sample}, {"add_special", false}};
  auto res = cli->Post(split_url(options.url).second + "/tokenize", body.dump(), "application/json");
  if (!res || res->status != 200) return std::nullopt;
  const Json j = Json::parse(res->body, nullptr, false);
  const size_t num_words = split_words(sample).size();
  if (j.is_discarded() || !j.contains("tokens") || !j["tokens"].is_array() || j["tokens"].empty() || num_words == 0)
    return std::nullopt;
  return static_cast<double>(j["tokens"].size()) / num_words;
}

std::string first_model(const LoadOptions& options) {
  auto cli = make_client(options);
  auto res = cli->Get(split_url(options.url).second + "/v1/models");
  if (!res) throw_error(ErrorCode::kUnavailable, "cannot reach {}: {}", options.url, httplib::to_string(res.error()));
  if (res->status != 200) return "";
  const Json j = Json::parse(res->body, nullptr, false);
  if (j.is_discarded() || !j.contains("data") || !j["data"].is_array() || j["data"].empty()) return "";
  return j["data"][0].value("id", "");
}

LoadResult run_load(const LoadOptions& o, RequestSource& source) {
  make_client(o);  // a bad URL fails here, not on a worker thread
  LoadResult out;
  const size_t num_requests = source.num_requests();
  out.requests.resize(num_requests);
  ProgressBar bar(o.rate > 0 ? fmt::format("{} req/s", o.rate) : fmt::format("concurrency {}", o.concurrency),
                  static_cast<int64_t>(num_requests), "requests");
  // Each slot is written by the one thread that sent it.
  const auto send = [&](httplib::Client& cli, const LoadRequest& req) {
    RequestResult r = send_one(cli, o, req);
    source.finish(req.slot, r);
    out.requests[req.slot] = std::move(r);
    bar.advance();
  };
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  if (o.rate > 0) {
    // Open loop: each request starts at its arrival time, whatever is running.
    std::mt19937_64 rng(o.seed);
    std::exponential_distribution<double> gap(o.rate);
    auto at = t0;
    for (size_t i = 0; i < num_requests; ++i) {
      std::this_thread::sleep_until(at);
      std::optional<LoadRequest> req = source.next();
      if (!req) break;
      threads.emplace_back([&, job = std::move(*req)] { send(*make_client(o), job); });
      at += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap(rng)));
    }
  } else {
    const int num_workers = static_cast<int>(std::min<size_t>(o.concurrency, num_requests));
    for (int w = 0; w < num_workers; ++w)
      threads.emplace_back([&] {
        auto cli = make_client(o);  // one keep-alive connection per worker
        while (std::optional<LoadRequest> req = source.next()) send(*cli, *req);
      });
  }
  for (auto& t : threads) t.join();
  out.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  return out;
}

namespace {

// A fixed list, sent in order; nothing waits on an earlier request.
class PromptListSource final : public RequestSource {
 public:
  explicit PromptListSource(const std::vector<std::string>& prompts) : prompts_(prompts) {}
  size_t num_requests() const override { return prompts_.size(); }
  std::optional<LoadRequest> next() override {
    const size_t i = next_++;
    if (i >= prompts_.size()) return std::nullopt;
    return LoadRequest{i, prompts_[i], ""};
  }
  void finish(size_t, const RequestResult&) override {}

 private:
  const std::vector<std::string>& prompts_;
  std::atomic<size_t> next_{0};
};

}  // namespace

LoadResult run_load(const LoadOptions& o, const std::vector<std::string>& prompts) {
  PromptListSource source(prompts);
  return run_load(o, source);
}

}  // namespace kvlm::apps
