// kvlm serve with several models (-m NAME=PATH, --models-dir) and sleep:
// a worker process per model, started on its first request, unloaded for
// room or when idle, every answer equal to that model served alone.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include <sys/socket.h>

#include "router_fleet.h"
#include "support/raw_socket.h"
#include "support/test_support.h"

namespace kvlm::serve_models_test {

using test::Json;
using Clock = std::chrono::steady_clock;

std::string stories() { return test::shared_path("models/stories260K.gguf"); }
std::string tiny() { return test::shared_path("models/synth-tiny-F32.gguf"); }

Json completion(const std::string& model, int i) {
  static const char* prompts[] = {"Once upon a time", "The little dog", "She looked at the sky and", "Tom had a"};
  return {{"model", model}, {"prompt", prompts[i % 4]}, {"max_tokens", 12}, {"temperature", 0}};
}

// The state GET /v1/models gives a model ("" when it is not listed).
std::string model_state(int port, const std::string& name) {
  const Json list = test::http_get(port, "/v1/models").json();
  for (const Json& m : list.value("data", Json::array()))
    if (m.value("id", "") == name) return m["status"].value("value", "");
  return "";
}

bool wait_for_state(int port, const std::string& name, const std::string& state, int seconds = 20) {
  const auto deadline = Clock::now() + std::chrono::seconds(seconds);
  while (Clock::now() < deadline) {
    if (model_state(port, name) == state) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// A process's children, whichever of its threads started them.
std::vector<int> child_pids(int pid) {
  std::vector<int> out;
  for (const auto& task : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task")) {
    std::ifstream children(task.path() / "children");
    for (int child; children >> child;) out.push_back(child);
  }
  return out;
}

// The resident memory of a process and all of its descendants.
int64_t tree_resident_bytes(int pid) {
  int64_t total = 0;
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);)
    if (line.starts_with("VmRSS:")) total += std::stoll(line.substr(6)) * 1024;
  for (const int child : child_pids(pid)) total += tree_resident_bytes(child);
  return total;
}

// The README's invariant, through the front's merged metrics: every loaded
// model's worker holds no KV block once its requests have ended.
void expect_pools_whole(const test::ServerProcess& front, const std::vector<std::string>& models) {
  for (const std::string& model : models) {
    const std::string series = "kvlm_kv_blocks_used{model_name=\"" + model + "\"}";
    double used = -1;
    for (int i = 0; i < 250 && (used = test::metric_sample(test::metrics_text(front), series)) != 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(used, 0) << model << "'s worker still holds KV blocks (-1: its metrics are missing)";
  }
}

// The answer of each model served alone, for the prompts of completion().
class ServeModels : public ::testing::Test {
 public:
  static void SetUpTestSuite() {
    alone_ = new std::map<std::string, std::vector<Json>>;
    for (const auto& [name, path] : {std::pair{"stories", stories()}, std::pair{"tiny", tiny()}}) {
      test::ServerProcess server({"-m", path, "--served-model-name", name, "-t", "1"});
      for (int i = 0; i < 4; ++i)
        (*alone_)[name].push_back(test::visible_answer(test::http_post(server.port(), "/v1/completions",
                                                                       completion(name, i)).json()));
    }
  }
  static void TearDownTestSuite() { delete alone_; }
  static std::map<std::string, std::vector<Json>>* alone_;
};
std::map<std::string, std::vector<Json>>* ServeModels::alone_ = nullptr;

TEST_F(ServeModels, AlternatingRequestsEqualEachModelServedAlone) {
  test::ServerProcess front({"-m", "stories=" + stories(), "-m", "tiny=" + tiny(), "-t", "1"});
  // Listed before any loads, none loaded.
  EXPECT_EQ(model_state(front.port(), "stories"), "unloaded");
  EXPECT_EQ(model_state(front.port(), "tiny"), "unloaded");
  std::vector<std::future<std::pair<int, Json>>> answers;
  for (int i = 0; i < 32; ++i) {
    if (i >= 8) answers[i - 8].wait();  // 8 at a time
    const std::string model = i % 2 ? "tiny" : "stories";
    answers.push_back(std::async(std::launch::async, [&front, model, i] {
      const test::HttpAnswer a = test::http_post(front.port(), "/v1/completions", completion(model, i / 2));
      return std::pair{a.status, a.json()};
    }));
  }
  for (int i = 0; i < 32; ++i) {
    const auto [status, answer] = answers[i].get();
    const std::string model = i % 2 ? "tiny" : "stories";
    ASSERT_EQ(status, 200) << answer.dump();
    EXPECT_EQ(test::visible_answer(answer), (*alone_)[model][(i / 2) % 4]) << "request " << i;
  }
  EXPECT_EQ(model_state(front.port(), "stories"), "loaded");
  EXPECT_EQ(model_state(front.port(), "tiny"), "loaded");
  // The model named decides where /tokenize goes too.
  const Json ids = test::http_post(front.port(), "/tokenize", {{"model", "tiny"}, {"content", "hello"}}).json();
  EXPECT_TRUE(ids.contains("tokens")) << ids.dump();
  expect_pools_whole(front, {"stories", "tiny"});
}

TEST_F(ServeModels, UnloadGivesTheMemoryBackAndTheNextRequestLoadsAgain) {
  test::ServerProcess front({"-m", "stories=" + stories(), "-m", "tiny=" + tiny(), "-t", "1"});
  const int64_t before = tree_resident_bytes(front.pid());
  ASSERT_EQ(test::http_post(front.port(), "/models/load", {{"model", "tiny"}}).status, 200);
  EXPECT_EQ(model_state(front.port(), "tiny"), "loaded");
  const int64_t loaded = tree_resident_bytes(front.pid());
  EXPECT_GT(loaded, before + (4 << 20)) << "a loaded model's worker holds its weights and KV pool";
  ASSERT_EQ(test::http_post(front.port(), "/models/unload", {{"model", "tiny"}}).status, 200);
  EXPECT_EQ(model_state(front.port(), "tiny"), "unloaded");
  const int64_t after = tree_resident_bytes(front.pid());
  EXPECT_LE(std::abs(after - before), before / 20) << "before " << before << ", loaded " << loaded << ", after "
                                                   << after;
  const test::HttpAnswer again = test::http_post(front.port(), "/v1/completions", completion("tiny", 1));
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(test::visible_answer(again.json()), (*alone_)["tiny"][1]);
  const double loads = test::metric_sample(test::metrics_text(front), "kvlm_model_loads_total{model_name=\"tiny\"}");
  EXPECT_EQ(loads, 2);
}

TEST_F(ServeModels, ModelsMaxUnloadsTheLeastRecentlyUsedIdleModel) {
  test::ServerProcess front({"-m", "stories=" + stories(), "-m", "tiny=" + tiny(), "--models-max", "1", "-t", "1"});
  for (int round = 0; round < 2; ++round) {
    for (const std::string model : {"stories", "tiny"}) {
      const test::HttpAnswer a = test::http_post(front.port(), "/v1/completions", completion(model, round));
      ASSERT_EQ(a.status, 200) << a.body;
      EXPECT_EQ(test::visible_answer(a.json()), (*alone_)[model][round]);
      EXPECT_EQ(model_state(front.port(), model), "loaded");
      EXPECT_EQ(model_state(front.port(), model == "tiny" ? "stories" : "tiny"), "unloaded");
      expect_pools_whole(front, {model});
    }
  }
}

TEST_F(ServeModels, UnknownModelsAre404AndABusyModelIsNotUnloaded) {
  test::ServerProcess front({"-m", "stories=" + stories(), "-m", "tiny=" + tiny(), "-t", "1"});
  const test::HttpAnswer unknown = test::http_post(front.port(), "/v1/completions", completion("nope", 0));
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(unknown.json()["error"].value("code", ""), "model_not_found") << unknown.body;
  EXPECT_EQ(test::http_post(front.port(), "/models/load", {{"model", "nope"}}).status, 404);
  EXPECT_EQ(test::http_post(front.port(), "/models/unload", Json::object()).status, 400);
  // No model named: the first one listed.
  const test::HttpAnswer plain =
      test::http_post(front.port(), "/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 12},
                                                        {"temperature", 0}});
  ASSERT_EQ(plain.status, 200) << plain.body;
  EXPECT_EQ(plain.json()["choices"][0]["text"], (*alone_)["stories"][0]["choices"][0]["text"]);
  // A stream in flight keeps its model loaded: unload and sleep are 409.
  Json body = completion("stories", 2);
  body["max_tokens"] = 2000;
  body["stream"] = true;
  const int fd = test::connect_socket(front.port());
  ASSERT_TRUE(test::send_all(fd, test::raw_post("/v1/completions", body.dump())));
  char first[64];
  ASSERT_GT(::recv(fd, first, sizeof first, 0), 0);  // the stream has begun
  const test::HttpAnswer busy = test::http_post(front.port(), "/models/unload", {{"model", "stories"}});
  EXPECT_EQ(busy.status, 409) << busy.body;
  EXPECT_EQ(test::http_post(front.port(), "/sleep", Json::object()).status, 409);
  EXPECT_EQ(model_state(front.port(), "stories"), "loaded");
  test::close_socket(fd);
  expect_pools_whole(front, {"stories"});  // the hung-up stream's blocks too
}

TEST_F(ServeModels, SleepGivesEveryModelsMemoryBackUntilTheNextRequest) {
  test::ServerProcess front({"-m", "stories=" + stories(), "-m", "tiny=" + tiny(), "-t", "1"});
  ASSERT_EQ(test::http_post(front.port(), "/v1/completions", completion("stories", 0)).status, 200);
  ASSERT_EQ(test::http_post(front.port(), "/v1/completions", completion("tiny", 0)).status, 200);
  EXPECT_EQ(test::http_get(front.port(), "/is_sleeping").json()["is_sleeping"], false);
  ASSERT_EQ(test::http_post(front.port(), "/sleep", Json::object()).status, 200);
  EXPECT_EQ(test::http_get(front.port(), "/is_sleeping").json()["is_sleeping"], true);
  EXPECT_EQ(model_state(front.port(), "stories"), "sleeping");
  EXPECT_EQ(test::metric_sample(test::metrics_text(front), "kvlm_model_loaded{model_name=\"tiny\"}"), 0);
  // The next request wakes its model.
  const test::HttpAnswer a = test::http_post(front.port(), "/v1/completions", completion("tiny", 3));
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(test::visible_answer(a.json()), (*alone_)["tiny"][3]);
  EXPECT_EQ(test::http_get(front.port(), "/is_sleeping").json()["is_sleeping"], false);
  ASSERT_EQ(test::http_post(front.port(), "/wake_up", Json::object()).status, 200);
  EXPECT_EQ(model_state(front.port(), "stories"), "loaded");
  expect_pools_whole(front, {"stories", "tiny"});
}

TEST_F(ServeModels, OneModelSleepsWhenIdleAndWakesOnItsNextRequest) {
  test::ServerProcess front({"-m", stories(), "--served-model-name", "stories", "--sleep-idle-seconds", "1", "-t", "1"});
  ASSERT_EQ(test::http_post(front.port(), "/v1/completions", completion("stories", 1)).status, 200);
  ASSERT_TRUE(wait_for_state(front.port(), "stories", "sleeping")) << model_state(front.port(), "stories");
  const test::HttpAnswer a = test::http_post(front.port(), "/v1/completions", completion("stories", 2));
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(test::visible_answer(a.json()), (*alone_)["stories"][2]);
}

TEST_F(ServeModels, ModelsDirListsEveryModelAndMetricsCarryTheModelLabel) {
  const std::string dir = test::temp_dir() + "/models_dir";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(tiny(), dir + "/tiny.gguf", std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(stories(), dir + "/stories.gguf", std::filesystem::copy_options::overwrite_existing);
  test::ServerProcess front({"--models-dir", dir, "-t", "1"});
  const Json list = test::http_get(front.port(), "/v1/models").json();
  ASSERT_EQ(list["data"].size(), 2u) << list.dump();
  EXPECT_EQ(list["data"][0]["id"], "stories");  // sorted by name
  EXPECT_EQ(list["data"][1]["id"], "tiny");
  ASSERT_EQ(test::http_post(front.port(), "/v1/completions", completion("tiny", 2)).status, 200);
  const std::string text = test::metrics_text(front);
  EXPECT_EQ(test::metric_sample(text, "kvlm_model_loaded{model_name=\"tiny\"}"), 1);
  EXPECT_EQ(test::metric_sample(text, "kvlm_model_loaded{model_name=\"stories\"}"), 0);
  EXPECT_GT(test::metric_sample(text, "kvlm_model_memory_bytes{model_name=\"tiny\"}"), 0);
  EXPECT_NE(text.find("kvlm_kv_blocks_capacity{model_name=\"tiny\"}"), std::string::npos) << "the worker's own metrics";
  if (!test::have_program("promtool")) return;
  const std::string path = test::write_temp_file("models_metrics.txt", text);
  const test::CommandResult r = test::run_program({"sh", "-c", "promtool check metrics < \"$0\" 2>&1", path});
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out, "") << "promtool's findings:\n" << r.out;
}

TEST_F(ServeModels, AWorkerThatDiesIsStartedAgainByTheNextRequest) {
  test::ServerProcess front({"-m", "stories=" + stories(), "-m", "tiny=" + tiny(), "-t", "1"});
  ASSERT_EQ(test::http_post(front.port(), "/v1/completions", completion("tiny", 0)).status, 200);
  const std::vector<int> children = child_pids(front.pid());
  ASSERT_EQ(children.size(), 1u);
  ::kill(children[0], SIGKILL);
  ASSERT_TRUE(wait_for_state(front.port(), "tiny", "failed"));
  const test::HttpAnswer a = test::http_post(front.port(), "/v1/completions", completion("tiny", 1));
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(test::visible_answer(a.json()), (*alone_)["tiny"][1]);
}

}  // namespace kvlm::serve_models_test
