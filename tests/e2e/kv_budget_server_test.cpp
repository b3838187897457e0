// KV budgets through `kvlm serve` and `kvlm run`: the server's --kv-* flags
// are the default, a request's kv_* fields override them, the output equals
// the CLI's under the same budget, --kv-shift runs past the trained context,
// metrics count the evicted tokens, and bad values are 400s naming the field.
#include <gtest/gtest.h>

#include <regex>
#include <sstream>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace kvlm::kv_budget_server_test {

using Json = nlohmann::json;

class KvBudgetServer : public test::ServerSuite<KvBudgetServer> {
 public:
  static std::vector<std::string> server_args() {
    return {"-m", test::shared_path("models/stories260K.gguf"), "-t", "1", "--kv-budget", "48", "--kv-policy", "sinks", "--max-model-len", "512"};
  }
  static std::pair<int, Json> post(const Json& body) {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(60);
    auto r = c.Post("/v1/completions", body.dump(), "application/json");
    if (!r) return {0, Json()};
    return {r->status, Json::parse(r->body)};
  }
  static double metric(const std::string& series) { return test::server_metric(*server_, series); }
  // `kvlm run` with the same prompt, greedy, under the given budget flags.
  static std::string cli_text(int max_tokens, const std::vector<std::string>& kv_flags) {
    std::vector<std::string> args = {"run", "-m", test::shared_path("models/stories260K.gguf"), "-p", "Once upon a time",
                                     "-n", std::to_string(max_tokens), "--temp", "0", "--ignore-eos", "-t", "1"};
    args.insert(args.end(), kv_flags.begin(), kv_flags.end());
    test::CommandResult r = test::run_kvlm(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out.substr(0, r.out.size() - 1);  // run ends the text with a newline
  }
  static Json greedy(int max_tokens) {
    return {{"prompt", "Once upon a time"}, {"max_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true}};
  }
};

TEST_F(KvBudgetServer, ServerDefaultAppliesAndEqualsTheCli) {
  const double before = metric(R"(kvlm_kv_evicted_tokens_total{model_name="llama",policy="sinks"})");
  auto [status, body] = post(greedy(150));
  ASSERT_EQ(status, 200) << body.dump();
  EXPECT_EQ(body["choices"][0]["text"].get<std::string>(), cli_text(150, {"--kv-budget", "48", "--kv-policy", "sinks"}));
  EXPECT_NE(body["choices"][0]["text"].get<std::string>(), cli_text(150, {}));
  const double after = metric(R"(kvlm_kv_evicted_tokens_total{model_name="llama",policy="sinks"})");
  EXPECT_GE(after - before, 96) << "154 tokens under a budget of 48 drop at least 6 blocks";
}

TEST_F(KvBudgetServer, RequestFieldsOverrideTheDefault) {
  Json h2o = greedy(120);
  h2o["kv_budget"] = 32;
  h2o["kv_policy"] = "h2o";
  auto [status, body] = post(h2o);
  ASSERT_EQ(status, 200) << body.dump();
  EXPECT_EQ(body["choices"][0]["text"].get<std::string>(), cli_text(120, {"--kv-budget", "32", "--kv-policy", "h2o"}));
  EXPECT_GT(metric(R"(kvlm_kv_evicted_tokens_total{model_name="llama",policy="h2o"})"), 0);

  Json unbounded = greedy(120);
  unbounded["kv_budget"] = 0;
  auto [status2, body2] = post(unbounded);
  ASSERT_EQ(status2, 200) << body2.dump();
  EXPECT_EQ(body2["choices"][0]["text"].get<std::string>(), cli_text(120, {}));
}

TEST_F(KvBudgetServer, ShiftRunsPastTheTrainedContext) {
  Json long_run = greedy(700);  // stories260K was trained on 512 tokens (the server runs with --max-model-len 512)
  auto [refused, err] = post(long_run);
  EXPECT_EQ(refused, 400) << err.dump();
  long_run["kv_shift"] = true;
  auto [status, body] = post(long_run);
  ASSERT_EQ(status, 200) << body.dump();
  EXPECT_EQ(body["usage"]["completion_tokens"].get<int>(), 700);
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
}

TEST_F(KvBudgetServer, BadValuesAreFourHundredsNamingTheField) {
  for (const auto& [key, value] : std::vector<std::pair<std::string, Json>>{
           {"kv_policy", "lfu"}, {"kv_policy", 3}, {"kv_budget", -1}, {"kv_budget", "64"}, {"kv_shift", "yes"},
           {"kv_sinks", 1.5}}) {
    Json body = greedy(4);
    body[key] = value;
    auto [status, resp] = post(body);
    EXPECT_EQ(status, 400) << key << "=" << value.dump() << ": " << resp.dump();
    EXPECT_EQ(resp["error"]["param"], key) << resp.dump();
  }
  Json tiny = greedy(4);
  tiny["kv_budget"] = 8;  // less than two blocks
  auto [status, resp] = post(tiny);
  EXPECT_EQ(status, 400) << resp.dump();
  EXPECT_NE(resp["error"]["message"].get<std::string>().find("kv_budget"), std::string::npos) << resp.dump();
}

TEST(KvBudgetCli, GptTwoRefusesTheShiftClearly) {
  test::CommandResult r = test::run_kvlm({"run", "-m", test::shared_path("models/synth-gpt2-F16.gguf"), "-p", "Hello",
                                          "-n", "4", "--kv-budget", "32", "--kv-shift"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("learned positions"), std::string::npos) << r.err;
}

// Perplexity through the engine: a budget larger than the chunk changes
// nothing, a small one costs quality; bench kv tabulates every policy.
TEST(KvBudgetCli, PerplexityUnderABudget) {
  const std::vector<std::string> base = {"perplexity", "-m", test::shared_path("models/stories260K.gguf"), "-f",
                                         test::shared_path("text/tinystories_sample.txt"), "-c", "256", "--chunks", "4"};
  auto ppl = [&](const std::vector<std::string>& extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    test::CommandResult r = test::run_kvlm(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out.rfind("PPL = ", 0), 0u) << r.out;
    return std::stod(r.out.substr(6));
  };
  const double full = ppl({});
  EXPECT_DOUBLE_EQ(ppl({"--kv-budget", "1024"}), full);
  EXPECT_GT(ppl({"--kv-budget", "32", "--kv-policy", "window"}), full);
}

TEST(KvBudgetCli, BenchKvTabulatesEveryPolicyAndPlots) {
  const std::string png = test::temp_dir() + "/kv.png";
  test::CommandResult r = test::run_kvlm({"bench", "kv", "-m", test::shared_path("models/stories260K.gguf"), "-f",
                                          test::shared_path("text/tinystories_sample.txt"), "-c", "128", "--chunks",
                                          "2", "--budgets", "32,64", "--policies", "all", "--json", "--plot", png});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);
  ASSERT_EQ(j["rows"].size(), 1u + 8u * 2u);
  EXPECT_EQ(j["rows"][0]["policy"], "full");
  EXPECT_EQ(j["rows"][0]["peak_resident_tokens"], 128);
  for (size_t i = 1; i < j["rows"].size(); ++i) {
    const Json& row = j["rows"][i];
    EXPECT_EQ(row["peak_resident_tokens"].get<int>(), row["budget"].get<int>() + 16) << row.dump();
    EXPECT_GT(row["perplexity"].get<double>(), 1.0) << row.dump();
  }
  const std::string bytes = test::read_file(png);
  ASSERT_GT(bytes.size(), 1000u);
  EXPECT_EQ(bytes.substr(1, 3), "PNG");
}

// The memory frontier: several KV types in one run, each with its full cache
// and its policies, every row's predictions measured against the first
// type's full cache. synth-tiny's head size (32) takes every type; a row's
// bytes follow its type's row size (per 32 dimensions: F16 64 bytes, Q8_0
// 34, Q4_0 18), and rounding moves the predictions in that order.
TEST(KvBudgetCli, BenchKvCrossesKvTypesIntoOneFrontier) {
  const std::string png = test::temp_dir() + "/frontier.png";
  test::CommandResult r = test::run_kvlm({"bench", "kv", "-m", test::shared_path("models/synth-tiny-Q8_0.gguf"), "-f",
                                          test::shared_path("text/tinystories_sample.txt"), "-c", "128", "--chunks",
                                          "2", "--budgets", "32", "--policies", "window", "--kv-type", "f16,q8_0,q4_0",
                                          "--json", "--plot", png});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json rows = Json::parse(r.out)["rows"];
  ASSERT_EQ(rows.size(), 6u);
  const char* types[] = {"f16", "q8_0", "q4_0"};
  for (size_t t = 0; t < 3; ++t) {
    EXPECT_EQ(rows[2 * t]["kv_type"], types[t]);
    EXPECT_EQ(rows[2 * t]["policy"], "full");
    EXPECT_EQ(rows[2 * t + 1]["policy"], "window");
    // The window moves predictions more than the type's rounding alone.
    EXPECT_GT(rows[2 * t + 1]["mean_abs_delta_nll"].get<double>(), rows[2 * t]["mean_abs_delta_nll"].get<double>());
  }
  const double f16_bytes = rows[0]["kv_bytes_per_seq"].get<double>();
  EXPECT_DOUBLE_EQ(rows[2]["kv_bytes_per_seq"].get<double>(), f16_bytes * 34 / 64);
  EXPECT_DOUBLE_EQ(rows[4]["kv_bytes_per_seq"].get<double>(), f16_bytes * 18 / 64);
  EXPECT_EQ(rows[0]["mean_abs_delta_nll"].get<double>(), 0.0);
  EXPECT_GT(rows[2]["mean_abs_delta_nll"].get<double>(), 0.0);
  EXPECT_GT(rows[4]["mean_abs_delta_nll"].get<double>(), rows[2]["mean_abs_delta_nll"].get<double>());
  const std::string bytes = test::read_file(png);
  ASSERT_GT(bytes.size(), 1000u);
  EXPECT_EQ(bytes.substr(1, 3), "PNG");
}

// Per-head against shared selection: by the oracle's signal, a finer
// granularity keeps at least as much future attention as any coarser one
// (each group's choice is its best, and a coarser group's set is one of the
// finer group's options), and every figure is a fraction of the mass.
TEST(KvBudgetCli, HeadAnalysisFinerOracleSelectionsLoseLess) {
  test::CommandResult r = test::run_kvlm({"bench", "kv", "-m", test::shared_path("models/stories260K.gguf"), "-f",
                                          test::shared_path("text/tinystories_sample.txt"), "-c", "256", "--chunks",
                                          "1", "--budgets", "32,64", "--policies", "window", "--head-analysis", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_NE(r.err.find("(next 32 queries; "), std::string::npos) << r.err;
  ASSERT_NE(r.err.find("5 layers x 4 KV heads"), std::string::npos) << r.err;
  for (const char* budget : {"32", "64"}) {
    std::smatch m;
    std::string pattern = std::string("\\n +") + budget;
    for (int i = 0; i < 8; ++i) pattern += " +([0-9.]+)%";
    ASSERT_TRUE(std::regex_search(r.err, m, std::regex(pattern))) << r.err;
    double lost[8];
    for (int i = 0; i < 8; ++i) lost[i] = std::stod(m[i + 1].str());
    EXPECT_LE(lost[1], lost[0]) << r.err;  // per head <= shared
    EXPECT_LE(lost[2], lost[0]) << r.err;  // per layer <= shared
    EXPECT_LE(lost[3], lost[1]) << r.err;  // per layer and head <= per head
    EXPECT_LE(lost[3], lost[2]) << r.err;  // ... <= per layer
    EXPECT_GT(lost[0], 0.0) << r.err;
    for (double x : lost) EXPECT_LT(x, 100.0) << r.err;
  }
}

// StreamingLLM's claim on stories260K (trained on 512 tokens): with a budget
// of 256 and the shift, 4,096 sampled tokens stay as fluent as the first 512
// (the model's perplexity on its own output does not climb).
TEST(KvBudgetCli, ShiftedGenerationStaysFluentFarPastTheContext) {
  test::CommandResult r = test::run_kvlm({"run", "-m", test::shared_path("models/stories260K.gguf"), "-p",
                                          "Once upon a time", "-n", "4096", "--temp", "0.8", "--seed", "1",
                                          "--ignore-eos", "--kv-budget", "256", "--kv-shift", "--self-ppl", "512"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string key = "self-perplexity per 512 tokens: ";
  const size_t at = r.err.find(key);
  ASSERT_NE(at, std::string::npos) << r.err;
  std::istringstream in(r.err.substr(at + key.size(), r.err.find('\n', at) - at - key.size()));
  std::vector<double> ppl;
  for (double x; in >> x;) ppl.push_back(x);
  ASSERT_EQ(ppl.size(), 8u) << r.err;
  for (double x : ppl) EXPECT_LT(x, 1.5 * ppl[0]) << r.err;
}

}  // namespace kvlm::kv_budget_server_test
