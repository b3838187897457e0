// `kvlm bench` through the real binary: the JSON reports carry every key the
// issues and the README promise (speeds are measured, never asserted).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace kvlm::bench_cli_test {

TEST(BenchCli, BatchReportsThroughputLatencyAndCache) {
  auto r = test::run_kvlm({"bench", "batch", "-m", test::shared_path("models/stories260K.gguf"), "--requests", "6",
                           "--concurrency", "3", "--prompt-len", "40", "--gen-len", "8", "--shared-prefix", "32",
                           "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"requests", "concurrency", "prompt_tokens_per_s", "generated_tokens_per_s", "ttft_ms",
                          "itl_ms", "prefix_hit_rate", "peak_kv_blocks", "preemptions", "step_profile"})
    EXPECT_TRUE(j.contains(key)) << key << " missing from " << r.out;
  for (const char* key : {"ttft_ms", "itl_ms"})
    for (const char* stat : {"mean", "p50", "p99", "max"}) EXPECT_TRUE(j[key].contains(stat)) << key << "." << stat;
  EXPECT_EQ(j["requests"], 6);
  EXPECT_GT(j["generated_tokens_per_s"].get<double>(), 0);
  // 32 shared tokens = 2 full blocks; requests after the first hit them.
  EXPECT_GT(j["prefix_hit_rate"].get<double>(), 0.0);
  EXPECT_GT(j["peak_kv_blocks"].get<int>(), 0);
  EXPECT_GT(j["step_profile"]["forward_s"].get<double>(), 0);
  EXPECT_GT(j["step_profile"]["outside_forward_fraction"].get<double>(), 0);
  EXPECT_LT(j["step_profile"]["outside_forward_fraction"].get<double>(), 1);
}

TEST(BenchCli, ModelReportsPromptAndGenerationSpeed) {
  auto r = test::run_kvlm({"bench", "model", "-m", test::shared_path("models/stories260K.gguf"), "-p", "32", "-n",
                           "8", "-r", "1", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["pp"]["tokens_per_s"].get<double>(), 0);
  EXPECT_GT(j["tg"]["tokens_per_s"].get<double>(), 0);
  EXPECT_EQ(j["params"], 292800);  // every tensor element of stories260K.gguf
  r = test::run_kvlm({"bench", "nothing"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("unknown benchmark 'nothing'"), std::string::npos) << r.err;
}

// The bandwidth probe and the decode limit derived from it; --depth N runs pp
// and tg after N tokens of context, which the evaluator reports back.
TEST(BenchCli, ModelReportsBandwidthLimitAndDepth) {
  auto bench = [](const char* depth) {
    auto r = test::run_kvlm({"bench", "model", "-m", test::shared_path("models/stories260K.gguf"), "-p", "16", "-n",
                             "8", "-r", "1", "--depth", depth, "--json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json::object();
  };
  auto flat = bench("0"), deep = bench("100");
  for (const auto* j : {&flat, &deep}) {
    for (const char* key : {"weight_bytes", "read_bandwidth_gb_s", "tg_fraction_of_limit", "tg_limit_tokens_per_s",
                            "kv_bytes_per_token", "depth"})
      ASSERT_TRUE(j->contains(key)) << key << " missing from " << j->dump();
    EXPECT_EQ((*j)["weight_bytes"], 1171200);  // every tensor's bytes (F32 model)
    EXPECT_EQ((*j)["decode_weight_bytes"].get<double>(), 1171200.0);  // dense: a token reads them all
    EXPECT_GT((*j)["read_bandwidth_gb_s"].get<double>(), 0.1);
    EXPECT_LT((*j)["read_bandwidth_gb_s"].get<double>(), 10000.0);
    const double limit = (*j)["read_bandwidth_gb_s"].get<double>() * 1e9 /
                         ((*j)["weight_bytes"].get<double>() + (*j)["kv_bytes_per_token"].get<double>());
    EXPECT_NEAR((*j)["tg_limit_tokens_per_s"].get<double>(), limit, limit * 1e-9);
    EXPECT_NEAR((*j)["tg_fraction_of_limit"].get<double>(), (*j)["tg"]["tokens_per_s"].get<double>() / limit, 1e-9);
  }
  EXPECT_EQ(flat["depth"], 0);
  EXPECT_EQ(deep["depth"], 100);
  // Context the runs ended with, read back from the evaluator after each run.
  EXPECT_EQ(flat["tg"]["context_end"], 8);
  EXPECT_EQ(flat["pp"]["context_end"], 16);
  EXPECT_EQ(deep["tg"]["context_end"], 108);
  EXPECT_EQ(deep["pp"]["context_end"], 116);
  // Mean tg context 4.5 vs 104.5 tokens: 5 layers x 4 KV heads x 8 dims x 2 (K, V) x 2 bytes each.
  EXPECT_DOUBLE_EQ(flat["kv_bytes_per_token"].get<double>(), 640 * 4.5);
  EXPECT_DOUBLE_EQ(deep["kv_bytes_per_token"].get<double>(), 640 * 104.5);

  auto r = test::run_kvlm({"bench", "model", "-m", test::shared_path("models/stories260K.gguf"), "--depth", "-1"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--depth"), std::string::npos) << r.err;
}

// --sweep gives one run per concurrency; --plot writes the chart (gnuplot).
TEST(BenchCli, BatchSweepsAndBothPlot) {
  const std::string batch_png = test::temp_dir() + "/bench-batch.png";
  auto r = test::run_kvlm({"bench", "batch", "-m", test::shared_path("models/stories260K.gguf"), "--requests", "4",
                           "--sweep", "1,2", "--prompt-len", "16", "--gen-len", "4", "--plot", batch_png, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["runs"].size(), 2u) << r.out;
  EXPECT_EQ(j["runs"][0]["concurrency"], 1);
  EXPECT_EQ(j["runs"][1]["concurrency"], 2);
  for (const auto& run : j["runs"]) EXPECT_GT(run["requests_per_s"].get<double>(), 0);
  EXPECT_EQ(test::read_file(batch_png).substr(1, 3), "PNG");
  const std::string model_png = test::temp_dir() + "/bench-model.png";
  r = test::run_kvlm({"bench", "model", "-m", test::shared_path("models/stories260K.gguf"), "-p", "16", "-n", "4",
                      "-r", "1", "--plot", model_png});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(test::read_file(model_png).substr(1, 3), "PNG");
}

}  // namespace kvlm::bench_cli_test
