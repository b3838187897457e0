// The OpenAI-compatible server over real HTTP on loopback: `kvlm serve` in a
// child process, driven with curl and with an HTTP client that can hang up.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace kvlm::server_test {

using Json = nlohmann::json;

std::string stories() { return test::shared_path("models/stories260K.gguf"); }
std::string qwen_template() { return test::shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja"); }

// POST with curl; returns {status, body}.
std::pair<int, std::string> curl_post(const std::string& url, const std::string& body,
                                      const std::vector<std::string>& headers = {}) {
  std::vector<std::string> argv = {"curl", "-sS", "-N", "-w", "\n%{http_code}", "-H", "Content-Type: application/json",
                                   "--data-binary", body};
  for (const auto& h : headers) argv.insert(argv.end(), {"-H", h});
  argv.push_back(url);
  auto r = test::run_program(argv);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const size_t nl = r.out.rfind('\n');
  return {std::stoi(r.out.substr(nl + 1)), r.out.substr(0, nl)};
}

std::pair<int, std::string> curl_get(const std::string& url) {
  auto r = test::run_program({"curl", "-sS", "-w", "\n%{http_code}", url});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const size_t nl = r.out.rfind('\n');
  return {std::stoi(r.out.substr(nl + 1)), r.out.substr(0, nl)};
}

class ServerTest : public test::ServerSuite<ServerTest> {
 public:
  static std::vector<std::string> server_args() {
    return {"-m", stories(), "--chat-template-file", qwen_template(), "-t", "1"};
  }
  static std::string url(const std::string& path) { return server_->url() + path; }
};

TEST_F(ServerTest, HealthAndModels) {
  ASSERT_GT(server_->port(), 0);
  auto [status, body] = curl_get(url("/health"));
  EXPECT_EQ(status, 200);
  std::tie(status, body) = curl_get(url("/v1/models"));
  EXPECT_EQ(status, 200);
  Json j = Json::parse(body);
  EXPECT_EQ(j["object"], "list");
  EXPECT_EQ(j["data"][0]["id"], "llama");  // general.name of stories260K
}

TEST_F(ServerTest, CompletionMatchesTheGreedyGolden) {
  auto [status, body] = curl_post(url("/v1/completions"),
                                  R"({"model":"llama","prompt":"Once upon a time","max_tokens":20,"temperature":0})");
  ASSERT_EQ(status, 200) << body;
  Json j = Json::parse(body);
  EXPECT_EQ(j["object"], "text_completion");
  const std::string text = j["choices"][0]["text"];
  // The first 20 tokens of golden/stories260K-greedy.jsonl's first prompt.
  EXPECT_EQ(text, ", there was a little girl named Lily. She loved to play outsid");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(j["usage"]["completion_tokens"], 20);
  EXPECT_EQ(j["usage"]["total_tokens"], 25);
}

TEST_F(ServerTest, StreamedDeltasConcatenateToTheWholeText) {
  const std::string req = R"({"prompt":"Lily and Tom went to the park.","max_tokens":40,"temperature":0)";
  auto [status, whole] = curl_post(url("/v1/completions"), req + "}");
  ASSERT_EQ(status, 200) << whole;
  auto [s2, stream] = curl_post(url("/v1/completions"), req + R"(,"stream":true,"stream_options":{"include_usage":true}})");
  ASSERT_EQ(s2, 200) << stream;
  auto events = test::sse_data(stream);
  ASSERT_GE(events.size(), 3u) << stream;
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text;
  std::string reason;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    Json e = Json::parse(events[i]);
    text += e["choices"][0]["text"].get<std::string>();
    if (!e["choices"][0]["finish_reason"].is_null()) reason = e["choices"][0]["finish_reason"];
  }
  Json usage = Json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 40);
  EXPECT_EQ(text, Json::parse(whole)["choices"][0]["text"].get<std::string>());
  EXPECT_EQ(reason, "length");
}

TEST_F(ServerTest, ChatCompletionUsesTheTemplateAndStreams) {
  const std::string req =
      R"({"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"Tell me a story."}]}],"max_tokens":12,"temperature":0)";
  auto [status, body] = curl_post(url("/v1/chat/completions"), req + "}");
  ASSERT_EQ(status, 200) << body;
  Json j = Json::parse(body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  const std::string text = j["choices"][0]["message"]["content"];
  EXPECT_FALSE(text.empty());
  // The prompt is the Qwen template rendered and tokenized: same count as the CLI's.
  auto rendered = test::run_kvlm({"template", "-m", stories(), "--template-file", qwen_template(), "--messages",
                                  test::write_temp_file("srv-msgs.json",
                                                        R"([{"role":"system","content":"Be brief."},{"role":"user","content":"Tell me a story."}])"),
                                  "--add-generation-prompt"});
  auto ids = test::run_kvlm({"tokenize", "-m", stories(), "-f", test::write_temp_file("srv-prompt.txt", rendered.out), "--ids"});
  std::istringstream in(ids.out);
  int n = 0;
  for (int id; in >> id;) ++n;
  EXPECT_EQ(j["usage"]["prompt_tokens"], n);

  auto [s2, stream] = curl_post(url("/v1/chat/completions"), req + R"(,"stream":true})");
  ASSERT_EQ(s2, 200);
  auto events = test::sse_data(stream);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
  Json first = Json::parse(events.front());
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  std::string streamed;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const Json delta = Json::parse(events[i])["choices"][0]["delta"];
    if (delta.contains("content")) streamed += delta["content"].get<std::string>();
  }
  EXPECT_EQ(streamed, text);
}

// Greedy decoding picks the most likely token, so each chosen logprob is the
// largest of its step; the token texts spell the output; streaming carries
// the same numbers chunk by chunk.
// A chat request's prompt without generating: /apply-template's text,
// /tokenize's `messages` form and its token ids, all as the generation
// renders it (the chat completion's prompt_tokens); vLLM's `prompt` for text.
TEST_F(ServerTest, ApplyTemplateAndTokenizeMessagesRenderAsChatDoes) {
  const Json messages = Json::parse(R"([{"role":"system","content":"Be brief."},{"role":"user","content":"Tell me a story."}])");
  const Json tools = Json::parse(R"([{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}])");
  for (const Json& extra : {Json::object(), Json{{"tools", tools}}}) {
    Json chat = {{"messages", messages}, {"max_tokens", 1}};
    chat.update(extra);
    auto [status, body] = curl_post(url("/v1/chat/completions"), chat.dump());
    ASSERT_EQ(status, 200) << body;
    const int prompt_tokens = Json::parse(body)["usage"]["prompt_tokens"];
    Json asked = {{"messages", messages}};
    asked.update(extra);
    auto [t_status, t_body] = curl_post(url("/tokenize"), asked.dump());
    ASSERT_EQ(t_status, 200) << t_body;
    const Json tokenized = Json::parse(t_body);
    EXPECT_EQ(tokenized["count"], prompt_tokens) << extra;
    EXPECT_EQ(tokenized["tokens"].size(), static_cast<size_t>(prompt_tokens));
    EXPECT_GT(tokenized["max_model_len"].get<int>(), prompt_tokens);
    auto [a_status, a_body] = curl_post(url("/apply-template"), asked.dump());
    ASSERT_EQ(a_status, 200) << a_body;
    const std::string text = Json::parse(a_body)["prompt"];
    EXPECT_NE(text.find("<|im_start|>system\nBe brief."), std::string::npos) << text;
    EXPECT_TRUE(text.ends_with("<|im_start|>assistant\n")) << text;
    auto [p_status, p_body] = curl_post(url("/tokenize"), Json{{"prompt", text}}.dump());
    ASSERT_EQ(p_status, 200) << p_body;
    EXPECT_EQ(Json::parse(p_body)["tokens"], tokenized["tokens"]) << extra;
  }
  auto [bad_status, bad_body] = curl_post(url("/apply-template"), R"({"messages":[{"role":"robot","content":"x"}]})");
  EXPECT_EQ(bad_status, 400) << bad_body;
  EXPECT_EQ(Json::parse(bad_body)["error"]["param"], "messages[0].role") << bad_body;
}

// llama.cpp's /props: the served name, the context /tokenize reports, the
// template file as given, the slots and the special tokens.
TEST_F(ServerTest, PropsDescribeTheServedModel) {
  auto [status, body] = curl_get(url("/props"));
  ASSERT_EQ(status, 200) << body;
  const Json props = Json::parse(body);
  auto [m_status, models] = curl_get(url("/v1/models"));
  ASSERT_EQ(m_status, 200) << models;
  EXPECT_EQ(props["model_alias"], Json::parse(models)["data"][0]["id"]);
  auto [t_status, tokenized] = curl_post(url("/tokenize"), R"({"messages":[{"role":"user","content":"x"}]})");
  ASSERT_EQ(t_status, 200) << tokenized;
  EXPECT_EQ(props["default_generation_settings"]["n_ctx"], Json::parse(tokenized)["max_model_len"]);
  EXPECT_EQ(props["chat_template"], test::read_file(qwen_template()));
  EXPECT_GT(props["total_slots"].get<int>(), 0);
  EXPECT_EQ(props["bos_token"], "<s>") << body.substr(0, 300);
  EXPECT_EQ(props["default_generation_settings"]["params"]["temperature"], 1.0);
}

// vLLM's render routes (what llm-d's precise prefix scorer tokenizes with):
// the prompt ids the engine runs (return_token_ids), for one completions
// prompt, a list of them (text and ids), and chat with and without tools.
TEST_F(ServerTest, RenderRoutesGiveTheEnginesPromptTokens) {
  const Json prompts = Json::array({"Once upon a time", "The cat sat", Json::array({1, 306, 414})});
  auto [r_status, r_body] = curl_post(url("/v1/completions/render"), Json{{"prompt", prompts}}.dump());
  ASSERT_EQ(r_status, 200) << r_body;
  const Json rendered = Json::parse(r_body);
  ASSERT_EQ(rendered.size(), prompts.size()) << r_body;
  auto [status, body] = curl_post(url("/v1/completions"),
                                  Json{{"prompt", prompts}, {"max_tokens", 1}, {"return_token_ids", true}}.dump());
  ASSERT_EQ(status, 200) << body;
  const Json completion = Json::parse(body);
  for (size_t i = 0; i < prompts.size(); ++i)
    EXPECT_EQ(rendered[i]["token_ids"], completion["choices"][i]["prompt_token_ids"]) << i;
  auto [one_status, one_body] = curl_post(url("/v1/completions/render"), R"({"prompt":"Once upon a time"})");
  ASSERT_EQ(one_status, 200) << one_body;
  EXPECT_EQ(Json::parse(one_body), Json::array({rendered[0]}));

  const Json messages = Json::parse(R"([{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}])");
  const Json tools = Json::parse(R"([{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}])");
  for (const Json& extra : {Json::object(), Json{{"tools", tools}}}) {
    Json chat = {{"messages", messages}};
    chat.update(extra);
    auto [c_status, c_body] = curl_post(url("/v1/chat/completions/render"), chat.dump());
    ASSERT_EQ(c_status, 200) << c_body;
    chat["max_tokens"] = 1;
    chat["return_token_ids"] = true;
    auto [g_status, g_body] = curl_post(url("/v1/chat/completions"), chat.dump());
    ASSERT_EQ(g_status, 200) << g_body;
    EXPECT_EQ(Json::parse(c_body)["token_ids"], Json::parse(g_body)["choices"][0]["prompt_token_ids"]) << extra;
  }
}

TEST_F(ServerTest, LogprobsDescribeTheChosenTokens) {
  const std::string req = R"({"prompt":"Once upon a time","max_tokens":12,"temperature":0,"logprobs":3)";
  auto [status, body] = curl_post(url("/v1/completions"), req + "}");
  ASSERT_EQ(status, 200) << body;
  const Json choice = Json::parse(body)["choices"][0];
  const Json& lp = choice["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 12u) << body;
  std::string spelled;
  for (size_t i = 0; i < 12; ++i) {
    EXPECT_EQ(lp["text_offset"][i], spelled.size());
    spelled += lp["tokens"][i].get<std::string>();
    const float chosen = lp["token_logprobs"][i];
    EXPECT_LE(chosen, 0.f);
    ASSERT_GE(lp["top_logprobs"][i].size(), 2u);
    ASSERT_LE(lp["top_logprobs"][i].size(), 3u);
    for (const auto& [tok, v] : lp["top_logprobs"][i].items()) EXPECT_LE(v.get<float>(), chosen) << tok;
  }
  EXPECT_EQ(spelled, choice["text"]);

  auto [s2, stream] = curl_post(url("/v1/completions"), req + R"(,"stream":true})");
  ASSERT_EQ(s2, 200);
  Json streamed_logprobs = Json::array(), streamed_offsets = Json::array();
  for (const std::string& e : test::sse_data(stream)) {
    if (e == "[DONE]") break;
    const Json c = Json::parse(e)["choices"][0];
    if (c["logprobs"].is_null()) continue;
    for (const auto& v : c["logprobs"]["token_logprobs"]) streamed_logprobs.push_back(v);
    for (const auto& v : c["logprobs"]["text_offset"]) streamed_offsets.push_back(v);
  }
  EXPECT_EQ(streamed_logprobs, lp["token_logprobs"]);
  EXPECT_EQ(streamed_offsets, lp["text_offset"]);

  // Chat: logprobs.content, one entry per completion token, top_logprobs on request.
  auto [s3, chat] = curl_post(url("/v1/chat/completions"),
                              R"({"messages":[{"role":"user","content":"Tell me a story."}],"max_tokens":6,"temperature":0,)"
                              R"("ignore_eos":true,"logprobs":true,"top_logprobs":2})");
  ASSERT_EQ(s3, 200) << chat;
  const Json cj = Json::parse(chat);
  const Json& content = cj["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), cj["usage"]["completion_tokens"].get<size_t>()) << chat;
  std::string joined;
  for (const Json& c : content) {
    ASSERT_EQ(c["top_logprobs"].size(), 2u);
    EXPECT_EQ(c["top_logprobs"][0]["logprob"], c["logprob"]);  // greedy: the chosen one is the top one
    std::string bytes;
    for (const Json& b : c["bytes"]) bytes += static_cast<char>(b.get<int>());
    joined += bytes;
  }
  EXPECT_EQ(joined, cj["choices"][0]["message"]["content"]);
  // Without logprobs the field is null.
  EXPECT_TRUE(Json::parse(curl_post(url("/v1/completions"), R"({"prompt":"Once","max_tokens":2})").second)["choices"][0]["logprobs"].is_null());
}

// echo with logprobs, as evaluation harnesses score text: the prompt comes
// back with each token's log-probability, the first one null, and the numbers
// are kvlm logits' log_softmax.
TEST_F(ServerTest, EchoReturnsThePromptsLogprobs) {
  const std::vector<int> ids = {1, 403, 407, 261, 378, 261, 403};
  auto [status, body] = curl_post(url("/v1/completions"),
                                  Json{{"prompt", ids}, {"max_tokens", 1}, {"temperature", 0}, {"logprobs", 1}, {"echo", true}}.dump());
  ASSERT_EQ(status, 200) << body;
  const Json choice = Json::parse(body)["choices"][0];
  const Json& lp = choice["logprobs"];
  ASSERT_EQ(lp["token_logprobs"].size(), ids.size() + 1) << body;
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  std::string tokens;
  for (const auto& id : ids) tokens += (tokens.empty() ? "" : ",") + std::to_string(id);
  auto logits = test::run_kvlm({"logits", "-m", stories(), "--tokens", tokens});
  ASSERT_EQ(logits.exit_code, 0) << logits.err;
  const Json rows = Json::parse(logits.out)["logits"];
  for (size_t i = 1; i < ids.size(); ++i) {
    // log_softmax of the row after token i - 1, at token i.
    double max = -1e30, sum = 0;
    for (const auto& v : rows[i - 1]) max = std::max(max, v.get<double>());
    for (const auto& v : rows[i - 1]) sum += std::exp(v.get<double>() - max);
    const double want = rows[i - 1][ids[i]].get<double>() - max - std::log(sum);
    EXPECT_NEAR(lp["token_logprobs"][i].get<double>(), want, 1e-4) << i;
  }
  // The text starts with the prompt's text; without logprobs echo still works.
  auto [s2, plain] = curl_post(url("/v1/completions"), R"({"prompt":"Once upon a time","max_tokens":3,"echo":true})");
  ASSERT_EQ(s2, 200) << plain;
  EXPECT_EQ(Json::parse(plain)["choices"][0]["text"].get<std::string>().rfind("Once upon a time", 0), 0u) << plain;
  EXPECT_TRUE(Json::parse(plain)["choices"][0]["logprobs"].is_null());
}

TEST_F(ServerTest, BadRequestsGetOpenAiErrors) {
  struct Case {
    std::string path, body;
    int status;
    std::string param, fragment;
  };
  const std::vector<Case> cases = {
      {"/v1/completions", "{not json", 400, "", "not valid JSON"},
      {"/v1/completions", R"({"max_tokens":5})", 400, "prompt", "'prompt' is required"},
      {"/v1/completions", R"({"prompt":"x","n":0})", 400, "n", "between 1 and 16"},
      {"/v1/completions", R"({"prompt":"x","n":17})", 400, "n", "between 1 and 16"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}],"n":17})", 400, "n", "between 1 and 16"},
      {"/v1/completions", R"({"prompt":"x","n":3,"best_of":2})", 400, "best_of", "at least 'n'"},
      {"/v1/completions", R"({"prompt":"x","best_of":2,"stream":true})", 400, "best_of", "stream"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}],"best_of":2})", 400, "best_of", ""},
      {"/v1/completions", R"({"prompt":"x","temperature":9})", 400, "temperature", "between 0 and 2"},
      {"/v1/completions", R"({"prompt":"x","max_tokens":100000})", 400, "max_tokens", "maximum context length is 2048"},
      {"/v1/completions", R"({"prompt":[1, 99999]})", 400, "", "outside the vocabulary"},
      {"/v1/chat/completions", R"({"messages":[]})", 400, "messages", "non-empty array"},
      {"/v1/chat/completions", R"({"messages":[{"content":"hi"}]})", 400, "messages[0].role", "must be a string"},
      {"/v1/nothing", "{}", 404, "", "no route POST /v1/nothing"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.body);
    auto [status, body] = curl_post(url(c.path), c.body);
    EXPECT_EQ(status, c.status) << body;
    Json j = Json::parse(body);
    ASSERT_TRUE(j.contains("error")) << body;
    EXPECT_NE(j["error"]["message"].get<std::string>().find(c.fragment), std::string::npos) << body;
    if (!c.param.empty()) {
      EXPECT_EQ(j["error"]["param"], c.param) << body;
    }
  }
  // A prompt longer than the context.
  std::string long_prompt;
  for (int i = 0; i < 700; ++i) long_prompt += "Once upon a time ";
  auto [status, body] = curl_post(url("/v1/completions"), Json{{"prompt", long_prompt}}.dump());
  EXPECT_EQ(status, 400) << body;
  EXPECT_NE(body.find("maximum context length is 2048"), std::string::npos) << body;
}

TEST_F(ServerTest, ConcurrentRequestsEqualSequentialOnes) {
  std::vector<std::string> prompts = {"Once upon a time", "The little dog was sad because", "Sara had a red ball. She",
                                      "One day, a boy named Tim found a shiny", "Lily and Tom went to the park."};
  auto body_for = [](const std::string& p) { return Json{{"prompt", p}, {"max_tokens", 48}, {"temperature", 0}}.dump(); };
  std::vector<std::string> sequential;
  for (const auto& p : prompts) sequential.push_back(curl_post(url("/v1/completions"), body_for(p)).second);
  std::vector<std::string> parallel(prompts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < prompts.size(); ++i)
    threads.emplace_back([&, i] { parallel[i] = curl_post(url("/v1/completions"), body_for(prompts[i])).second; });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < prompts.size(); ++i)
    EXPECT_EQ(Json::parse(parallel[i])["choices"][0]["text"], Json::parse(sequential[i])["choices"][0]["text"]);
}

TEST_F(ServerTest, ClientThatHangsUpReleasesItsBlocks) {
  // Hang up after 3 chunks of the stream.
  EXPECT_GE(test::stream_then_hang_up(
                *server_, "/v1/completions",
                R"({"prompt":"Once upon a time","max_tokens":1500,"ignore_eos":true,"temperature":0,"stream":true})", 3),
            3);
  // The request must end (aborted) and give every block back.
  std::string text;
  for (int i = 0; i < 500; ++i) {
    text = curl_get(url("/metrics")).second;
    if (test::metric_sample(text, "kvlm_requests_running") == 0 && test::metric_sample(text, "kvlm_kv_blocks_used") == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(test::metric_sample(text, "kvlm_requests_running"), 0) << text;
  EXPECT_EQ(test::metric_sample(text, "kvlm_kv_blocks_used"), 0) << text;
  EXPECT_GE(test::metric_sample(text, "kvlm_requests_finished_total{model_name=\"llama\",finished_reason=\"abort\"}"), 1) << text;
  // And the server still serves.
  auto [status, body] = curl_post(url("/v1/completions"), R"({"prompt":"Once","max_tokens":3})");
  EXPECT_EQ(status, 200) << body;
}

TEST_F(ServerTest, MetricsCountWhatHappened) {
  curl_post(url("/v1/completions"), R"({"prompt":"Once upon a time","max_tokens":8,"temperature":0})");
  auto [status, text] = curl_get(url("/metrics"));
  ASSERT_EQ(status, 200);
  EXPECT_GT(test::metric_sample(text, "kvlm_generation_tokens_total"), 0) << text;
  EXPECT_GT(test::metric_sample(text, "kvlm_prompt_tokens_total"), 0);
  EXPECT_GT(test::metric_sample(text, "kvlm_kv_blocks_capacity"), 0);
  for (const char* phase : {"schedule", "forward", "sample", "postprocess"})
    EXPECT_GT(test::metric_sample(text, std::string("kvlm_engine_step_seconds_total{model_name=\"llama\",phase=\"") +
                                            phase + "\"}"), 0) << phase << "\n" << text;
  EXPECT_NE(text.find("# TYPE kvlm_time_to_first_token_seconds histogram"), std::string::npos);
  EXPECT_NE(text.find("kvlm_time_to_first_token_seconds_bucket{model_name=\"llama\",le=\"+Inf\"}"), std::string::npos);
  // Repeating a prompt hits the prefix cache (16-token blocks: a 40-token prompt has 2 full blocks).
  const std::string p = Json{{"prompt", "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day"},
                             {"max_tokens", 2}}.dump();
  curl_post(url("/v1/completions"), p);
  auto [s2, again] = curl_post(url("/v1/completions"), p);
  EXPECT_GE(Json::parse(again)["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 16) << again;
  text = curl_get(url("/metrics")).second;
  EXPECT_GT(test::metric_sample(text, "kvlm_prefix_cache_hits_total"), 0);
}

// A non-streaming client that gives up before its answer: nothing is written
// until the end, so the server must notice the closed connection itself. The
// request asks for 8 choices of 500 tokens from the F32 model: a fast core
// makes about 3,000 tokens/s of one stream of it (a Zen 5, 2026-12-01), so the
// 4,000 tokens take far longer than the client's 100 ms, and running the
// request to its end would show in the token counter.
TEST(ServerHangUp, NonStreamingClientThatGivesUpCancelsItsRequest) {
  test::ServerProcess server({"-m", test::shared_path("models/synth-tiny-F32.gguf"), "-t", "1"});
  ASSERT_GT(server.port(), 0);
  httplib::Client cli("127.0.0.1", server.port());
  cli.set_read_timeout(0, 100 * 1000);  // 100 ms, then the client closes the connection
  auto res = cli.Post("/v1/completions",
                      R"({"prompt":"Once upon a time","max_tokens":500,"n":8,"ignore_eos":true})",
                      "application/json");
  EXPECT_FALSE(res) << "the request should have outlived the client's patience";
  // On a slow machine the server may not even have read the request yet: wait
  // for the request to end, not for an idle engine.
  const std::string aborted = "kvlm_requests_finished_total{model_name=\"synth-tiny\",finished_reason=\"abort\"}";
  const std::string completed = "kvlm_requests_finished_total{model_name=\"synth-tiny\",finished_reason=\"length\"}";
  std::string text;
  for (int i = 0; i < 1000; ++i) {
    text = curl_get(server.url() + "/metrics").second;
    if ((test::metric_sample(text, aborted) >= 1 || test::metric_sample(text, completed) >= 1) && test::metric_sample(text, "kvlm_kv_blocks_used") == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(test::metric_sample(text, "kvlm_kv_blocks_used"), 0) << text;
  EXPECT_GE(test::metric_sample(text, aborted), 1) << text;
  EXPECT_LT(test::metric_sample(text, "kvlm_generation_tokens_total"), 8 * 500) << text;
  // The server goes on serving, non-streaming requests included. (ignore_eos:
  // the seed is random, and an early end of text would cut the count short.)
  auto [status, body] =
      curl_post(server.url() + "/v1/completions", R"({"prompt":"Once","max_tokens":3,"ignore_eos":true})");
  EXPECT_EQ(status, 200) << body;
  EXPECT_EQ(Json::parse(body)["usage"]["completion_tokens"], 3);
}

TEST(ServerAuth, ApiKeyIsRequiredOnTheApi) {
  test::ServerProcess server({"-m", stories(), "--api-key", "sekret", "-t", "1"});
  ASSERT_GT(server.port(), 0);
  auto [status, body] = curl_post(server.url() + "/v1/completions", R"({"prompt":"Once","max_tokens":2})");
  EXPECT_EQ(status, 401) << body;
  EXPECT_EQ(Json::parse(body)["error"]["code"], "invalid_api_key");
  std::tie(status, body) =
      curl_post(server.url() + "/v1/completions", R"({"prompt":"Once","max_tokens":2})", {"Authorization: Bearer sekret"});
  EXPECT_EQ(status, 200) << body;
  EXPECT_EQ(curl_get(server.url() + "/health").first, 200);  // health stays open
  // Without a template, chat is a clear 400.
  std::tie(status, body) = curl_post(server.url() + "/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}]})",
                                     {"Authorization: Bearer sekret"});
  EXPECT_EQ(status, 400);
  EXPECT_NE(body.find("no chat template"), std::string::npos) << body;
  auto stopped = server.stop();
  EXPECT_EQ(stopped.exit_code, 0) << stopped.err;
}

TEST(ServerStartup, BadTemplateFileAndBusyPortAreClearErrors) {
  auto r = test::run_kvlm({"serve", "-m", stories(), "--chat-template-file", test::write_temp_file("bad.jinja", "{% if %}")});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("template syntax error"), std::string::npos) << r.err;
  test::ServerProcess first({"-m", stories(), "-t", "1"});
  ASSERT_GT(first.port(), 0);
  r = test::run_kvlm({"serve", "-m", stories(), "--port", std::to_string(first.port())});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("cannot listen on 127.0.0.1:" + std::to_string(first.port())), std::string::npos) << r.err;
}

}  // namespace kvlm::server_test
