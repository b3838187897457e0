// `kvlm bench chunks` through the real binary on stories260K with a tiny
// workload: the JSON's shape, the full baseline against itself, and the
// share-1 rows (every chunk token recomputed) predicting exactly as the full
// prefill does. Times are measured, never asserted.
#include <gtest/gtest.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace kvlm::bench_chunks_cli_test {

// The tiny workload (4 documents, 2 requests of 2) unless `k` names another K.
test::CommandResult run_bench_chunks(std::vector<std::string> extra, const std::string& k = "2") {
  std::vector<std::string> args = {"bench", "chunks", "-m", test::shared_path("models/stories260K.gguf"), "--text",
                                   test::shared_path("text/tinystories_sample.txt"), "--docs", "4", "--k", k,
                                   "--requests", "2"};
  args.insert(args.end(), extra.begin(), extra.end());
  return test::run_kvlm(args);
}

TEST(BenchChunksCli, JsonHasEveryModeAndShareOneMatchesFull) {
  auto r = run_bench_chunks({"--shares", "0,0.3,1", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_NE(j["model"].get<std::string>().find("stories260K.gguf"), std::string::npos);
  EXPECT_EQ(j["docs"], 4);
  EXPECT_EQ(j["k"], 2);
  EXPECT_EQ(j["doc_tokens"], 128);
  EXPECT_EQ(j["requests"], 2);
  // BOS, two documents of at least 128 tokens, a tail of 16 and 32 continuation tokens.
  EXPECT_GE(j["prompt_tokens_mean"].get<double>(), 1 + 2 * 128 + 16 + 32);
  ASSERT_EQ(j["rows"].size(), 5u) << r.out;
  const char* modes[] = {"full", "prefix", "chunks", "chunks", "chunks"};
  const double shares[] = {-1, -1, 0, 0.3, 1};
  for (size_t i = 0; i < 5; ++i) {
    const auto& row = j["rows"][i];
    for (const char* key : {"mode", "share", "ttft_ms_mean", "ttft_ms_p50", "ttft_ratio_to_full", "mean_abs_dnll", "ppl",
                            "ppl_diff_pct", "reused_tokens", "recomputed_tokens"})
      ASSERT_TRUE(row.contains(key)) << key << " missing from row " << i << ": " << row.dump();
    EXPECT_EQ(row["mode"], modes[i]);
    if (shares[i] < 0) {
      EXPECT_TRUE(row["share"].is_null()) << row.dump();
    } else {
      EXPECT_EQ(row["share"].get<double>(), shares[i]);
    }
    EXPECT_GT(row["ttft_ms_mean"].get<double>(), 0) << row.dump();
    EXPECT_GT(row["ttft_ms_p50"].get<double>(), 0) << row.dump();
    EXPECT_TRUE(std::isfinite(row["ppl"].get<double>())) << row.dump();
    EXPECT_GT(row["ppl"].get<double>(), 1) << row.dump();
    EXPECT_GE(row["mean_abs_dnll"].get<double>(), 0) << row.dump();
    EXPECT_GE(row["reused_tokens"].get<int64_t>(), 0) << row.dump();
    EXPECT_GE(row["recomputed_tokens"].get<int64_t>(), 0) << row.dump();
  }
  const auto& full = j["rows"][0];
  EXPECT_EQ(full["ttft_ratio_to_full"].get<double>(), 1.0);
  EXPECT_EQ(full["mean_abs_dnll"].get<double>(), 0.0);
  EXPECT_EQ(full["ppl_diff_pct"].get<double>(), 0.0);
  EXPECT_EQ(full["reused_tokens"], 0);
  EXPECT_EQ(full["cached_tokens"], 0);  // a cache salt of its own for each request
  // Every chunk token recomputed in its context: the full prefill's predictions, bit for bit.
  EXPECT_EQ(j["rows"][4]["mean_abs_dnll"].get<double>(), 0.0) << j["rows"][4].dump();
  EXPECT_EQ(j["rows"][4]["ppl"].get<double>(), full["ppl"].get<double>());
}

TEST(BenchChunksCli, TablePrintsEveryMode) {
  auto r = run_bench_chunks({"--shares", "0.15", "--query", "text", "--continuation", "8"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* line : {"| full ", "| prefix ", "| chunks |  0.15 |", "--query text"})
    EXPECT_NE(r.out.find(line), std::string::npos) << line << " missing from:\n" << r.out;
}

TEST(BenchChunksCli, RefusesBadFlags) {
  auto r = run_bench_chunks({"--shares", "0,1.5"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--shares: '1.5'"), std::string::npos) << r.err;
  r = run_bench_chunks({}, "5");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--k 5"), std::string::npos) << r.err;
  r = run_bench_chunks({"--query", "both"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--query 'both'"), std::string::npos) << r.err;
  r = run_bench_chunks({"--no-prefix-cache"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("needs the prefix cache"), std::string::npos) << r.err;
}

}  // namespace kvlm::bench_chunks_cli_test
