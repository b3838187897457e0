// /rerank, /v1/rerank and /v1/score on a Qwen3-Reranker of random weights
// (kvlm make-model --pooling rank, fixed seed): every score equals the
// NumPy reference's (tests/e2e/numpy_reference.py --rank: its own float64
// forward pass and llama.cpp's rank head) on the prompt tokens /tokenize
// gives for the template filled by hand, and llama-server --reranking's own
// scores on the same file (tests/e2e/golden/rerank.json, recorded with
// llama.cpp, so agreement with it is checked where it is absent); ordering,
// top_n, return_documents, /v1/score's pairings, the errors, /v1/embeddings
// on a reranker, a model that is no reranker, the router.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace kvlm::rerank_test {

using Json = nlohmann::json;

const Json& golden() {
  static const Json g = [] {
    std::ifstream f(std::string(KVLM_SOURCE_DIR) + "/tests/e2e/golden/rerank.json");
    return Json::parse(f);
  }();
  return g;
}

// The golden's reranker, made once per process (make-model is deterministic).
const std::string& reranker() {
  static const std::string path = [] {
    const std::string out = test::temp_dir() + "/rerank-qwen3.gguf";
    std::vector<std::string> args = golden()["make_model"].get<std::vector<std::string>>();
    args.insert(args.end(), {"--vocab-from", test::shared_path(golden()["vocab"]), "-o", out});
    const auto r = test::run_kvlm(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return out;
  }();
  return path;
}

struct Answer {
  int status = 0;
  Json body;
};

Answer post(int port, const std::string& path, const std::string& body) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(120);
  auto r = c.Post(path, body, "application/json");
  if (!r) return {};
  return {r->status, Json::parse(r->body, nullptr, false)};
}
Answer post(int port, const std::string& path, const Json& body) { return post(port, path, body.dump()); }

class Rerank : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // F32 KV as the NumPy comparisons of model_families_test: F16 KV moves a score by ~6e-4.
    server_ = new test::ServerProcess(
        {"-m", reranker(), "-t", "1", "--kv-type", "f32", "--served-model-name", "rerank-qwen3"});
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static int port() { return server_->port(); }
  static Json rerank_body() {
    return {{"query", golden()["query"]}, {"documents", golden()["documents"]}};
  }
  static test::ServerProcess* server_;
};
test::ServerProcess* Rerank::server_ = nullptr;

// The pair's prompt as the template says, through /tokenize: not the route's code.
std::vector<int32_t> pair_tokens(int port, const std::string& query, const std::string& document) {
  std::string text = golden()["template"];
  text.replace(text.find("{query}"), 7, query);
  text.replace(text.find("{document}"), 10, document);
  const Answer a = post(port, "/tokenize", Json{{"content", text}, {"add_special", false}, {"parse_special", true}});
  EXPECT_EQ(a.status, 200) << a.body.dump();
  return a.body["tokens"].get<std::vector<int32_t>>();
}

TEST_F(Rerank, ScoresEqualTheNumpyReferenceAndTheGolden) {
  const Answer a = post(port(), "/v1/rerank", rerank_body());
  ASSERT_EQ(a.status, 200) << a.body.dump();
  EXPECT_EQ(a.body["object"], "list");
  EXPECT_EQ(a.body["model"], "rerank-qwen3");
  const Json& docs = golden()["documents"];
  ASSERT_EQ(a.body["results"].size(), docs.size());
  std::vector<double> got(docs.size(), -1);
  for (const Json& r : a.body["results"]) got[r["index"].get<size_t>()] = r["relevance_score"].get<double>();
  int64_t num_tokens = 0;
  for (size_t i = 0; i < docs.size(); ++i) {
    const std::string doc = docs[i].is_string() ? docs[i].get<std::string>() : docs[i]["text"].get<std::string>();
    const std::vector<int32_t> ids = pair_tokens(port(), golden()["query"], doc);
    num_tokens += static_cast<int64_t>(ids.size());
    const auto ref = test::run_program({"/usr/bin/python3",
                                        std::string(KVLM_SOURCE_DIR) + "/tests/e2e/numpy_reference.py", "--rank",
                                        reranker(), fmt::format("{}", fmt::join(ids, ","))});
    ASSERT_EQ(ref.exit_code, 0) << "needs Debian's python3-numpy: " << ref.err;
    const double numpy = Json::parse(ref.out)["score"];
    // float32 against float64: 2.2e-7 at most when recorded, and 1.2e-7
    // from llama.cpp's float32 (F32 KV, no flash attention); a wrong token,
    // pooled row or head moves a score by ~1e-1, F16 attention by ~6e-4.
    EXPECT_NEAR(got[i], numpy, 2e-6) << "document " << i;
    EXPECT_NEAR(got[i], golden()["scores"][i].get<double>(), 2e-6) << "document " << i << ": llama.cpp's";
  }
  EXPECT_EQ(a.body["usage"]["prompt_tokens"], num_tokens);
  EXPECT_EQ(a.body["usage"]["total_tokens"], num_tokens);
}

TEST_F(Rerank, BestFirstTopNAndReturnDocuments) {
  const Answer all = post(port(), "/rerank", rerank_body());
  ASSERT_EQ(all.status, 200) << all.body.dump();
  const Json& results = all.body["results"];
  for (size_t i = 1; i < results.size(); ++i)
    EXPECT_GE(results[i - 1]["relevance_score"].get<double>(), results[i]["relevance_score"].get<double>());
  EXPECT_FALSE(results[0].contains("document")) << "llama-server returns none unless asked";
  Json body = rerank_body();
  body["top_n"] = 2;
  body["return_documents"] = true;
  const Answer top = post(port(), "/v1/rerank", body);
  ASSERT_EQ(top.status, 200) << top.body.dump();
  ASSERT_EQ(top.body["results"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(top.body["results"][i]["index"], results[i]["index"]);
    EXPECT_EQ(top.body["results"][i]["relevance_score"], results[i]["relevance_score"]) << "the same bits";
    const Json& d = golden()["documents"][results[i]["index"].get<size_t>()];
    EXPECT_EQ(top.body["results"][i]["document"]["text"], d.is_string() ? d : d["text"]);
  }
  EXPECT_EQ(top.body["usage"], all.body["usage"]) << "top_n cuts the answer, not the work";
}

TEST_F(Rerank, ScorePairsOneToOneOneToManyAndManyToMany) {
  const std::string q = golden()["query"];
  const Json texts = {"first text", "a second text", "the third"};
  const Answer many = post(port(), "/v1/score", Json{{"text_1", q}, {"text_2", texts}});
  ASSERT_EQ(many.status, 200) << many.body.dump();
  EXPECT_EQ(many.body["object"], "list");
  EXPECT_EQ(many.body["id"].get<std::string>().rfind("score", 0), 0u);
  EXPECT_TRUE(many.body["created"].is_number_integer());
  EXPECT_EQ(many.body["model"], "rerank-qwen3");
  ASSERT_EQ(many.body["data"].size(), 3u);
  const Answer ranked = post(port(), "/v1/rerank", Json{{"query", q}, {"documents", texts}});
  ASSERT_EQ(ranked.status, 200);
  for (size_t i = 0; i < 3; ++i) {
    const Json& d = many.body["data"][i];
    EXPECT_EQ(d["index"], i);
    EXPECT_EQ(d["object"], "score");
    for (const Json& r : ranked.body["results"])
      if (r["index"] == i) {
        EXPECT_EQ(d["score"], r["relevance_score"]) << "pair order, the same scores";
      }
  }
  const Answer one = post(port(), "/v1/score", Json{{"text_1", q}, {"text_2", "a second text"}});
  ASSERT_EQ(one.status, 200);
  ASSERT_EQ(one.body["data"].size(), 1u);
  EXPECT_EQ(one.body["data"][0]["score"], many.body["data"][1]["score"]);
  // N:N pairs item by item: the second pair here is (q, "a second text").
  const Answer pairs =
      post(port(), "/v1/score", Json{{"text_1", {"other", q}}, {"text_2", {"the third", "a second text"}}});
  ASSERT_EQ(pairs.status, 200) << pairs.body.dump();
  EXPECT_EQ(pairs.body["data"][1]["score"], many.body["data"][1]["score"]);
  EXPECT_NE(pairs.body["data"][0]["score"], many.body["data"][2]["score"]) << "another query scores otherwise";
  EXPECT_EQ(pairs.body["usage"]["completion_tokens"], 0);
}

TEST_F(Rerank, BadRequestsGet400OnTheirField) {
  struct Case {
    std::string path, body, param;
  };
  const std::vector<Case> cases = {
      {"/v1/rerank", R"({"query": "q", "documents": [)", ""},
      {"/v1/rerank", R"({"query": "q", "documents": []})", "documents"},
      {"/v1/rerank", R"({"documents": ["a"]})", "query"},
      {"/v1/rerank", R"({"query": "q", "documents": [3]})", "documents[0]"},
      {"/v1/rerank", R"({"query": "q", "documents": ["a"], "top_n": 0})", "top_n"},
      {"/v1/score", R"({"text_1": ["a", "b"], "text_2": ["c", "d", "e"]})", "text_2"},
      {"/v1/score", R"({"text_1": "a", "text_2": []})", "text_2"},
  };
  for (const Case& c : cases) {
    const Answer a = post(port(), c.path, c.body);
    EXPECT_EQ(a.status, 400) << c.body;
    if (!c.param.empty()) {
      EXPECT_EQ(a.body["error"]["param"], c.param) << c.body << " " << a.body.dump();
    }
  }
  EXPECT_EQ(post(port(), "/v1/rerank", Json{{"model", "other"}, {"query", "q"}, {"documents", {"a"}}}).status, 404);
}

TEST_F(Rerank, EmbeddingsPointToTheRerankRoutes) {
  const Answer a = post(port(), "/v1/embeddings", Json{{"input", "a cat"}});
  EXPECT_EQ(a.status, 400) << a.body.dump();
  EXPECT_EQ(a.body["error"]["param"], "model");
  EXPECT_NE(a.body["error"]["message"].get<std::string>().find("POST /v1/rerank"), std::string::npos)
      << a.body.dump();
}

TEST(RerankNotAReranker, Answers400OnModel) {
  test::ServerProcess server({"-m", test::shared_path("models/stories260K.gguf"), "-t", "1"});
  for (const auto& [path, body] : {std::pair<std::string, Json>{"/v1/rerank", {{"query", "q"}, {"documents", {"a"}}}},
                                   {"/v1/score", {{"text_1", "q"}, {"text_2", "a"}}}}) {
    const Answer a = post(server.port(), path, body);
    EXPECT_EQ(a.status, 400) << path;
    EXPECT_EQ(a.body["error"]["param"], "model");
    EXPECT_NE(a.body["error"]["message"].get<std::string>().find("not a reranker"), std::string::npos)
        << a.body.dump();
  }
}

TEST(RerankRouter, ProxiesTheWorkersAnswer) {
  test::ServerProcess worker({"-m", reranker(), "-t", "1"});
  test::ServerProcess router({"-m", reranker(), "--workers", worker.url()}, "router");
  const Json body = {{"query", "q"}, {"documents", {"a", "b"}}};
  const Answer direct = post(worker.port(), "/v1/rerank", body);
  ASSERT_EQ(direct.status, 200);
  Answer routed;
  // Until the router's health check has seen the worker up.
  for (int i = 0; i < 100 && routed.status != 200; ++i) {
    routed = post(router.port(), "/v1/rerank", body);
    if (routed.status != 200) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(routed.status, 200) << routed.body.dump();
  EXPECT_EQ(routed.body["results"], direct.body["results"]);
  const Answer score = post(router.port(), "/v1/score", Json{{"text_1", "q"}, {"text_2", "a"}});
  EXPECT_EQ(score.status, 200);
}

}  // namespace kvlm::rerank_test
