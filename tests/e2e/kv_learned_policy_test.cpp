// The oracle bounds every KV policy, and the learned policy's round trip:
// kvlm kv train-policy writes a file that bench kv and perplexity load, and a
// file for another model or version is refused (docs/kv-budgets.md).
#include <gtest/gtest.h>

#include <map>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace kvlm::kv_learned_policy_test {

using Json = nlohmann::json;

std::vector<std::string> bench_kv_args(const std::string& policies, const std::string& budgets) {
  return {"bench", "kv", "-m", test::shared_path("models/stories260K.gguf"), "-f",
          test::shared_path("text/tinystories_sample.txt"), "-c", "512", "--chunks", "4", "--budgets", budgets,
          "--policies", policies, "--json", "-t", "2"};
}

// The oracle is the bound: at every budget no fixed policy beats it.
TEST(KvOracle, IsAtLeastAsGoodAsEveryPolicyAtEveryBudget) {
  test::CommandResult r = test::run_kvlm(bench_kv_args("all,oracle", "32,64,128"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);
  std::map<int, double> oracle;
  for (const Json& row : j["rows"])
    if (row["policy"] == "oracle") oracle[row["budget"].get<int>()] = row["perplexity"].get<double>();
  ASSERT_EQ(oracle.size(), 3u) << r.out;
  int num_compared = 0;
  for (const Json& row : j["rows"]) {
    if (row["policy"] == "oracle" || row["policy"] == "full") continue;
    EXPECT_LE(oracle.at(row["budget"].get<int>()), row["perplexity"].get<double>()) << row.dump();
    ++num_compared;
  }
  EXPECT_EQ(num_compared, 8 * 3);
}

TEST(KvOracle, IsRefusedOnline) {
  test::CommandResult r = test::run_kvlm({"run", "-m", test::shared_path("models/stories260K.gguf"), "-p", "Once",
                                          "-n", "4", "--kv-budget", "32", "--kv-policy", "oracle"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("first pass"), std::string::npos) << r.err;
}

TEST(KvLearnedPolicy, TrainsLoadsAndRefusesAnotherModelsFile) {
  const std::string path = test::temp_dir() + "/policy.json";
  test::CommandResult r = test::run_kvlm({"kv", "train-policy", "-m", test::shared_path("models/stories260K.gguf"),
                                          "-f", test::shared_path("text/tinystories_sample.txt"), "-o", path, "-c",
                                          "256", "--chunks", "5", "--budgets", "32", "--epochs", "2", "-t", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json file = Json::parse(test::read_file(path));
  EXPECT_EQ(file["format"], "kvlm-kv-policy");
  EXPECT_EQ(file["version"], 1);
  EXPECT_NE(file["model"].get<std::string>().find("vocab 512"), std::string::npos) << file["model"];
  EXPECT_EQ(file["features"].size(), 11u);

  r = test::run_kvlm(bench_kv_args("learned:" + path, "32"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);
  ASSERT_EQ(j["rows"].size(), 2u);
  EXPECT_EQ(j["rows"][1]["policy"], "learned:policy");
  EXPECT_EQ(j["rows"][1]["peak_resident_tokens"], 48);

  // A server started with the file runs it per request under its name, and
  // refuses names it did not load and the oracle.
  {
    const std::vector<std::string> flags = {"--kv-budget", "32", "--kv-policy", "learned:" + path};
    test::ServerProcess server({"-m", test::shared_path("models/stories260K.gguf"), "-t", "1", "--max-model-len", "512",
                                "--kv-budget", "32"});
    test::ServerProcess learned_server({"-m", test::shared_path("models/stories260K.gguf"), "-t", "1",
                                        "--max-model-len", "512", "--kv-budget", "32", "--kv-policy", "learned:" + path});
    auto post = [](const test::ServerProcess& s, const std::string& policy) {
      httplib::Client c("127.0.0.1", s.port());
      c.set_read_timeout(60);
      const Json body = {{"prompt", "Once upon a time"}, {"max_tokens", 120},   {"temperature", 0},
                         {"ignore_eos", true},           {"kv_policy", policy}};
      auto r = c.Post("/v1/completions", body.dump(), "application/json");
      return r ? std::pair{r->status, Json::parse(r->body)} : std::pair{0, Json()};
    };
    auto [status, body] = post(learned_server, "learned:policy");
    ASSERT_EQ(status, 200) << body.dump();
    r = test::run_kvlm({"run", "-m", test::shared_path("models/stories260K.gguf"), "-p", "Once upon a time", "-n",
                        "120", "--temp", "0", "--ignore-eos", "-t", "1", "--kv-budget", "32", "--kv-policy",
                        "learned:" + path});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(body["choices"][0]["text"].get<std::string>() + "\n", r.out);
    EXPECT_EQ(post(learned_server, "learned:other").first, 400);
    EXPECT_EQ(post(server, "learned:policy").first, 400);  // this one was started without it
    EXPECT_EQ(post(server, "oracle").first, 400);
  }

  Json other = file;
  other["model"] = "llama 'another' vocab 32000 dim 4096 layers 32 heads 32/8";
  const std::string other_path = test::write_temp_file("other-policy.json", other.dump());
  r = test::run_kvlm({"perplexity", "-m", test::shared_path("models/stories260K.gguf"), "-f",
                      test::shared_path("text/tinystories_sample.txt"), "--chunks", "1", "--kv-budget", "32",
                      "--kv-policy", "learned:" + other_path});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("was trained for llama 'another'"), std::string::npos) << r.err;
  Json old = file;
  old["version"] = 2;
  r = test::run_kvlm(bench_kv_args("learned:" + test::write_temp_file("v2.json", old.dump()), "32"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("version 2"), std::string::npos) << r.err;
}

}  // namespace kvlm::kv_learned_policy_test
