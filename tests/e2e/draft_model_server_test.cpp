// Speculative decoding with a draft model through the real binaries:
// `kvlm serve --draft-model` (synth-tiny F32 target, its Q4_0 quantization as
// the draft) answers greedy requests with the text `kvlm run` gives without
// speculation, /metrics shows accepted proposals and no draft state once the
// requests end, and the flags' misuse is refused with a message naming the
// fix.
#include <gtest/gtest.h>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace kvlm::draft_model_server_test {

using Json = nlohmann::json;

const char* const kTarget = "models/synth-tiny-F32.gguf";
const char* const kDraft = "models/synth-tiny-Q4_0.gguf";

TEST(DraftModelServer, GreedyOutputEqualsNoSpeculationAndProposalsAreAccepted) {
  test::ServerProcess server({"-m", test::shared_path(kTarget), "--draft-model", test::shared_path(kDraft), "-t", "1",
                              "--spec-tokens", "4", "-v"});
  ASSERT_NE(server.port(), 0);
  httplib::Client c("127.0.0.1", server.port());
  c.set_read_timeout(60);
  for (const char* prompt : {"Once upon a time", "The cat sat on the mat and"}) {
    const Json body = {{"prompt", prompt}, {"max_tokens", 40}, {"temperature", 0}, {"ignore_eos", true}};
    auto r = c.Post("/v1/completions", body.dump(), "application/json");
    ASSERT_TRUE(r) << "no answer";
    ASSERT_EQ(r->status, 200) << r->body;
    const std::string text = Json::parse(r->body)["choices"][0]["text"].get<std::string>();
    const test::CommandResult off = test::run_kvlm({"run", "-m", test::shared_path(kTarget), "-p", prompt, "-n", "40",
                                                    "--temp", "0", "--ignore-eos", "-t", "1"});
    ASSERT_EQ(off.exit_code, 0) << off.err;
    EXPECT_EQ(text, off.out.substr(0, off.out.size() - 1)) << "prompt '" << prompt << "'";  // run adds a newline
  }
  EXPECT_GT(test::server_metric(server, "kvlm_spec_accepted_tokens_total"), 0);
  EXPECT_GT(test::server_metric(server, "kvlm_spec_propose_seconds_total"), 0);
  EXPECT_EQ(test::server_metric(server, "kvlm_spec_draft_sequences"), 0) << "draft KV kept after the requests ended";
  const test::CommandResult stopped = server.stop();
  EXPECT_NE(stopped.err.find("draft model"), std::string::npos) << "no log line of the draft's KV:\n" << stopped.err;
}

TEST(DraftModelServer, MisuseIsRefusedWithTheFix) {
  const std::vector<std::string> run = {"run", "-m", test::shared_path(kTarget), "-p", "Hi", "-n", "2", "-t", "1"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = run;
    args.insert(args.end(), extra.begin(), extra.end());
    return test::run_kvlm(args);
  };
  test::CommandResult r = with({"--speculate", "draft"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--draft-model"), std::string::npos) << r.err;
  r = with({"--speculate", "ngram", "--draft-model", test::shared_path(kDraft)});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--speculate draft"), std::string::npos) << r.err;
  r = with({"--draft-model", test::shared_path("models/llama-2-tiny-random.gguf")});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("vocabularies differ"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("llama-2-tiny-random.gguf"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("synth-tiny-F32.gguf"), std::string::npos) << r.err;
  r = with({"--draft-model", test::shared_path(kDraft)});
  EXPECT_EQ(r.exit_code, 0) << "--draft-model alone means --speculate draft: " << r.err;
}

}  // namespace kvlm::draft_model_server_test
