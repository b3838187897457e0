// LoRA adapters over HTTP: `kvlm serve --lora NAME=PATH` serves each adapter
// as a model of its own beside the base (/v1/models lists it with its
// parent), every API honours it, requests of the base and of several
// adapters running at once get what each gets alone, and vLLM's
// load/unload routes add and drop adapters at run time, never one in use.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace kvlm::lora_serve_test {

using Json = nlohmann::json;

struct Answer {
  int status = 0;
  std::string body;
  Json json() const { return Json::parse(body, nullptr, false); }
};

Answer post(const test::ServerProcess& server, const std::string& path, const Json& body) {
  httplib::Client c("127.0.0.1", server.port());
  c.set_read_timeout(120);
  auto r = c.Post(path, body.dump(), "application/json");
  return r ? Answer{r->status, r->body} : Answer{};
}

Answer get(const test::ServerProcess& server, const std::string& path) {
  httplib::Client c("127.0.0.1", server.port());
  auto r = c.Get(path);
  return r ? Answer{r->status, r->body} : Answer{};
}

std::string base_model() { return test::shared_path("models/synth-tiny-F32.gguf"); }

// An adapter file made by kvlm make-lora (format gguf or peft).
std::string make_adapter(const std::string& name, const char* format, const char* seed) {
  const std::string path = test::temp_dir() + "/" + name + (std::string(format) == "gguf" ? ".gguf" : "");
  const test::CommandResult r = test::run_kvlm({"make-lora", "-m", base_model(), "-o", path, "--format", format,
                                                "--rank", "8", "--targets", "all", "--seed", seed});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return path;
}

std::string completion(const test::ServerProcess& server, const std::string& model, int max_tokens = 24) {
  const Answer a = post(server, "/v1/completions",
                        {{"model", model}, {"prompt", "Once upon a time"}, {"max_tokens", max_tokens},
                         {"temperature", 0}, {"ignore_eos", true}});
  EXPECT_EQ(a.status, 200) << model << ": " << a.body;
  return a.status == 200 ? a.json()["choices"][0]["text"].get<std::string>() : "";
}

// The adapters vLLM's lora_requests_info says running requests hold.
std::set<std::string> running_adapters(const test::ServerProcess& server) {
  const std::string text = test::metrics_text(server);
  const std::string key = "running_lora_adapters=\"";
  const size_t at = text.find(key);
  if (at == std::string::npos) return {};
  const size_t begin = at + key.size();
  std::set<std::string> names;
  std::stringstream list(text.substr(begin, text.find('"', begin) - begin));
  for (std::string name; std::getline(list, name, ',');) names.insert(name);
  return names;
}

class LoraServe : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    paths_ = new std::vector<std::string>{make_adapter("alpha", "gguf", "1"), make_adapter("beta", "peft", "2")};
    server_ = new test::ServerProcess({"-m", base_model(), "-t", "1", "--served-model-name", "tiny", "--lora",
                                       "alpha=" + (*paths_)[0], "--lora", "beta=" + (*paths_)[1],
                                       "--allow-runtime-lora", "--metrics-compat", "vllm", "--chat-template-file",
                                       test::shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja")});
  }
  static void TearDownTestSuite() {
    delete server_;
    delete paths_;
  }
  static test::ServerProcess* server_;
  static std::vector<std::string>* paths_;
};
test::ServerProcess* LoraServe::server_ = nullptr;
std::vector<std::string>* LoraServe::paths_ = nullptr;

TEST_F(LoraServe, ModelsListTheAdaptersWithTheirParent) {
  const Json models = get(*server_, "/v1/models").json();
  std::map<std::string, Json> by_id;
  for (const Json& m : models["data"]) by_id[m["id"].get<std::string>()] = m;
  ASSERT_TRUE(by_id.count("tiny") && by_id.count("alpha") && by_id.count("beta")) << models.dump();
  EXPECT_EQ(by_id["alpha"].value("parent", ""), "tiny");
  EXPECT_EQ(by_id["alpha"].value("root", ""), (*paths_)[0]);
  EXPECT_EQ(get(*server_, "/v1/models/beta").json().value("parent", ""), "tiny");
  EXPECT_EQ(post(*server_, "/v1/completions", {{"model", "gamma"}, {"prompt", "x"}}).status, 404);
}

// The answer's text of a chat (choices[0].message.content) or Messages
// (content[0].text) reply.
std::string reply_text(const Json& j) {
  if (j.contains("choices")) return j["choices"][0]["message"].value("content", "");
  return j["content"][0].value("text", "");
}

TEST_F(LoraServe, EveryApiHonoursTheAdapter) {
  const std::string alpha = completion(*server_, "alpha");
  EXPECT_NE(alpha, completion(*server_, "tiny"));
  EXPECT_NE(completion(*server_, "beta"), alpha);
  const Json chat = {{"messages", {{{"role", "user"}, {"content", "Hello"}}}}, {"max_tokens", 12}, {"temperature", 0}};
  for (const char* path : {"/v1/chat/completions", "/v1/messages"}) {
    Json base_body = chat, alpha_body = chat;
    base_body["model"] = "tiny";
    alpha_body["model"] = "alpha";
    const Answer b = post(*server_, path, base_body), a = post(*server_, path, alpha_body);
    ASSERT_EQ(a.status, 200) << path << ": " << a.body;
    ASSERT_EQ(b.status, 200) << path << ": " << b.body;
    EXPECT_EQ(a.json().value("model", ""), "alpha") << path;
    EXPECT_NE(reply_text(a.json()), reply_text(b.json())) << path;
  }
  // Structured output under an adapter: the grammar holds its tokens.
  Json constrained = chat;
  constrained["model"] = "alpha";
  constrained["guided_choice"] = {"sunny day", "rainy night"};
  const Answer c = post(*server_, "/v1/chat/completions", constrained);
  ASSERT_EQ(c.status, 200) << c.body;
  const std::string choice = reply_text(c.json());
  EXPECT_TRUE(choice == "sunny day" || choice == "rainy night") << c.body;
  const Answer r = post(*server_, "/v1/responses", {{"model", "alpha"}, {"input", "Hello"}, {"max_output_tokens", 8}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json().value("model", ""), "alpha");
  const Answer e_alpha = post(*server_, "/v1/embeddings", {{"model", "alpha"}, {"input", "Hello there"}});
  const Answer e_base = post(*server_, "/v1/embeddings", {{"model", "tiny"}, {"input", "Hello there"}});
  ASSERT_EQ(e_alpha.status, 200) << e_alpha.body;
  EXPECT_NE(e_alpha.json()["data"][0]["embedding"], e_base.json()["data"][0]["embedding"]);
  EXPECT_GE(test::server_metric(*server_, "kvlm_lora_requests_total{model_name=\"tiny\",adapter=\"alpha\"}"), 4);
  EXPECT_NE(test::metrics_text(*server_).find("vllm:lora_requests_info{max_lora=\"8\""), std::string::npos);
}

TEST_F(LoraServe, AnIdleAdapterIsNotRunning) {
  completion(*server_, "alpha");
  // The answer lets go of the adapter once it is written: a moment later.
  std::set<std::string> running = running_adapters(*server_);
  for (int i = 0; i < 500 && !running.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    running = running_adapters(*server_);
  }
  EXPECT_TRUE(running.empty()) << *running.begin();
}

TEST_F(LoraServe, ConcurrentRequestsOfSeveralAdaptersGetWhatEachGetsAlone) {
  const std::vector<std::string> models = {"tiny", "alpha", "beta", "alpha", "tiny", "beta"};
  std::vector<std::string> alone;
  for (const std::string& m : models) alone.push_back(completion(*server_, m, 32));
  std::vector<std::future<std::string>> together;
  for (const std::string& m : models)
    together.push_back(std::async(std::launch::async, [&, m] { return completion(*server_, m, 32); }));
  for (size_t i = 0; i < models.size(); ++i) EXPECT_EQ(together[i].get(), alone[i]) << models[i];
}

TEST_F(LoraServe, AdaptersLoadAndUnloadAtRunTimeButNotWhileInUse) {
  const std::string path = make_adapter("gamma", "gguf", "3");
  EXPECT_EQ(post(*server_, "/v1/load_lora_adapter", {{"lora_name", "gamma"}, {"lora_path", path}}).status, 200);
  EXPECT_EQ(post(*server_, "/v1/load_lora_adapter", {{"lora_name", "gamma"}, {"lora_path", path}}).status, 400);
  EXPECT_EQ(post(*server_, "/v1/load_lora_adapter", {{"lora_name", "delta"}, {"lora_path", "/nonexistent"}}).status,
            404);
  EXPECT_NE(completion(*server_, "gamma"), completion(*server_, "tiny"));
  // A long request holds gamma: unloading is refused until it is over.
  auto running = std::async(std::launch::async, [&] { return completion(*server_, "gamma", 400); });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!running_adapters(*server_).count("gamma") && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_EQ(post(*server_, "/v1/unload_lora_adapter", {{"lora_name", "gamma"}}).status, 409);
  EXPECT_FALSE(running.get().empty());
  // The answer lets go of the adapter once it is written: a moment later.
  int status = 0;
  while ((status = post(*server_, "/v1/unload_lora_adapter", {{"lora_name", "gamma"}}).status) == 409 &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(status, 200);
  EXPECT_EQ(post(*server_, "/v1/completions", {{"model", "gamma"}, {"prompt", "x"}}).status, 404);
  EXPECT_EQ(post(*server_, "/v1/unload_lora_adapter", {{"lora_name", "gamma"}}).status, 404);
}

TEST(LoraServeOff, RunTimeLoadingIsRefusedWithoutTheFlag) {
  test::ServerProcess server({"-m", base_model(), "-t", "1"});
  const Answer a = post(server, "/v1/load_lora_adapter", {{"lora_name", "x"}, {"lora_path", "/tmp/x"}});
  EXPECT_EQ(a.status, 403);
  EXPECT_NE(a.body.find("--allow-runtime-lora"), std::string::npos) << a.body;
}

}  // namespace kvlm::lora_serve_test
