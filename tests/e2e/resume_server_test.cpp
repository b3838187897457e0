// The worker side of stream resumption (docs/router.md) over real HTTP: a
// stream with return_token_ids carries each chunk's token ids, and a stream
// cut after any chunk and sent again with prompt_token_ids and
// resume_token_ids goes on with exactly the chunks the uninterrupted stream
// had left — greedy and seeded sampling, completions and chat with a forced
// tool call whose text was held back at the cut.
#include <gtest/gtest.h>

#include <set>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace kvlm::resume_server_test {

using Json = nlohmann::json;

class ResumeServer : public test::ServerSuite<ResumeServer> {
 public:
  static std::vector<std::string> server_args() {
    return {"-m", test::shared_path("models/stories260K.gguf"), "--chat-template-file", test::shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja"), "-t", "1"};
  }
  // The chunks (parsed data payloads, [DONE] left out) of a streamed request.
  static std::vector<Json> stream(const std::string& path, const Json& body) {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(60);
    auto r = c.Post(path, body.dump(), "application/json");
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
    std::vector<Json> out;
    if (!r) return out;
    for (const std::string& d : test::sse_data(r->body))
      if (d != "[DONE]") out.push_back(Json::parse(d));
    return out;
  }
};

// What a client takes from chunks [from, end): the text (completions) or
// content (chat), logprob tokens, tool calls (without their fresh ids),
// finish reasons and usage. Where the chunks split the text depends on how
// fast the test reads (a slow reader gets merged events), so not that.
std::string visible(const std::vector<Json>& chunks, size_t from = 0) {
  std::string text;
  Json logprobs = Json::array(), calls = Json::array(), reasons = Json::array(), usage;
  for (size_t i = from; i < chunks.size(); ++i) {
    const Json& c = chunks[i];
    if (c.contains("usage") && !c["usage"].is_null()) {
      usage = c["usage"];
      usage.erase("prompt_tokens_details");  // cached tokens: whatever the cache held
    }
    if (c["choices"].empty()) continue;
    const Json& choice = c["choices"][0];
    if (choice.contains("text")) text += choice["text"].get<std::string>();
    if (choice.contains("delta")) {
      const Json& d = choice["delta"];
      if (d.contains("content") && d["content"].is_string()) text += d["content"].get<std::string>();
      // A call's pieces joined by index, as a client joins them.
      for (const Json& piece : d.value("tool_calls", Json::array())) {
        const size_t k = piece["index"];
        while (calls.size() <= k) calls.push_back({{"name", ""}, {"arguments", ""}});
        const Json f = piece.value("function", Json::object());
        calls[k]["name"] = calls[k]["name"].get<std::string>() + f.value("name", "");
        calls[k]["arguments"] = calls[k]["arguments"].get<std::string>() + f.value("arguments", "");
      }
    }
    if (choice.contains("logprobs") && !choice["logprobs"].is_null())
      for (const Json& t : choice["logprobs"]["tokens"]) logprobs.push_back(t);
    if (!choice["finish_reason"].is_null()) reasons.push_back(choice["finish_reason"]);
  }
  return Json{{"text", text}, {"logprob_tokens", logprobs}, {"tool_calls", calls}, {"finish", reasons},
              {"usage", usage}}.dump(1);
}

// The token ids chunks [0, n) carried.
std::vector<int32_t> ids_through(const std::vector<Json>& chunks, size_t n) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < n; ++i) {
    if (!chunks[i]["choices"].empty() && chunks[i]["choices"][0].contains("token_ids"))
      for (const Json& t : chunks[i]["choices"][0]["token_ids"]) ids.push_back(t.get<int32_t>());
  }
  return ids;
}

// Where a stream may be cut and resumed: after a chunk that carries token
// ids (the last chunk of an event; the router forwards no further) and does
// not finish the choice.
std::vector<size_t> cut_points(const std::vector<Json>& chunks) {
  std::vector<size_t> cuts;
  for (size_t i = 0; i + 1 < chunks.size(); ++i)
    if (!chunks[i]["choices"].empty() && chunks[i]["choices"][0].contains("token_ids") &&
        chunks[i]["choices"][0]["finish_reason"].is_null())  // a finished choice is never resumed
      cuts.push_back(i + 1);
  return cuts;
}

// Cuts the stream at its first, middle and last cut point and resumes each:
// the rest is the same. (How many chunks there are depends on how fast the
// test reads: a slow reader gets merged events.)
void expect_resumable(const std::string& path, const Json& body) {
  Json with_ids = body;
  with_ids["return_token_ids"] = true;
  const std::vector<Json> full = ResumeServer::stream(path, with_ids);
  const std::vector<size_t> points = cut_points(full);
  ASSERT_FALSE(points.empty()) << visible(full);
  ASSERT_TRUE(full[points[0] - 1]["choices"][0].contains("prompt_token_ids"));
  const std::set<size_t> cuts = {points.front(), points[points.size() / 2], points.back()};
  for (size_t cut : cuts) {
    Json resume = with_ids;
    resume["prompt_token_ids"] = full[points[0] - 1]["choices"][0]["prompt_token_ids"];
    resume["resume_token_ids"] = ids_through(full, cut);
    const std::vector<Json> rest = ResumeServer::stream(path, resume);
    EXPECT_EQ(visible(rest), visible(full, cut)) << "cut after chunk " << cut;
  }
}

TEST_F(ResumeServer, EveryChunkCarriesItsTokenIds) {
  const Json body = {{"prompt", "Once upon a time"}, {"max_tokens", 24}, {"temperature", 0}, {"stream", true},
                     {"return_token_ids", true}};
  const std::vector<Json> chunks = stream("/v1/completions", body);
  httplib::Client c("127.0.0.1", server_->port());
  Json whole = body;
  whole.erase("stream");
  auto r = c.Post("/v1/completions", whole.dump(), "application/json");
  ASSERT_TRUE(r && r->status == 200);
  const Json choice = Json::parse(r->body)["choices"][0];
  EXPECT_EQ(Json(ids_through(chunks, chunks.size())), choice["token_ids"]);
  EXPECT_EQ(chunks[cut_points(chunks)[0] - 1]["choices"][0]["prompt_token_ids"], choice["prompt_token_ids"]);
  EXPECT_EQ(choice["token_ids"].size(), 24u);
}

TEST_F(ResumeServer, GreedyCompletionGoesOnAfterAnyChunk) {
  expect_resumable("/v1/completions",
                   {{"prompt", "Once upon a time"}, {"max_tokens", 40}, {"temperature", 0}, {"stream", true},
                    {"stream_options", {{"include_usage", true}}}, {"logprobs", 2}});
}

TEST_F(ResumeServer, SeededSamplingGoesOnAsIfUninterrupted) {
  expect_resumable("/v1/completions",
                   {{"prompt", "The dog"}, {"max_tokens", 40}, {"temperature", 1.0}, {"seed", 77}, {"stream", true},
                    {"ignore_eos", true}, {"stop", {"zzz"}}});
}

TEST_F(ResumeServer, AForcedToolCallHeldBackAtTheCutComesOutWhole) {
  const Json tools = Json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Lima"]}},
                     "required": ["city"], "additionalProperties": false}}}])");
  const Json body = {{"messages", Json::array({Json{{"role", "user"}, {"content", "Weather in Paris?"}}})},
                     {"tools", tools}, {"tool_choice", "required"}, {"parallel_tool_calls", false},
                     {"temperature", 0.7}, {"seed", 5}, {"max_tokens", 200}, {"stream", true}};
  // The call's arguments stream in pieces: the cuts fall before, inside and
  // at the end of them, and the resumed stream sends the rest.
  expect_resumable("/v1/chat/completions", body);
}

TEST_F(ResumeServer, AStreamCutAtMaxTokensJustFinishes) {
  Json body = {{"prompt", "Once upon a time"}, {"max_tokens", 6}, {"temperature", 0}, {"stream", true},
               {"return_token_ids", true}, {"stream_options", {{"include_usage", true}}}};
  const std::vector<Json> full = stream("/v1/completions", body);
  body["prompt_token_ids"] = full[cut_points(full)[0] - 1]["choices"][0]["prompt_token_ids"];
  body["resume_token_ids"] = ids_through(full, full.size());
  const std::vector<Json> rest = stream("/v1/completions", body);
  ASSERT_EQ(rest.size(), 2u);
  EXPECT_EQ(rest[0]["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(rest[1]["usage"]["completion_tokens"], 6);
  EXPECT_EQ(rest[1]["usage"]["prompt_tokens"], full.back()["usage"]["prompt_tokens"]);
}

TEST_F(ResumeServer, ResumeFieldsAreValidated) {
  httplib::Client c("127.0.0.1", server_->port());
  auto status = [&](const Json& body) {
    auto r = c.Post("/v1/completions", body.dump(), "application/json");
    return r ? r->status : -1;
  };
  EXPECT_EQ(status({{"prompt", "a"}, {"resume_token_ids", {5}}}), 400);  // not a stream
  EXPECT_EQ(status({{"prompt", "a"}, {"resume_token_ids", {5}}, {"stream", true}, {"n", 2}}), 400);
  EXPECT_EQ(status({{"prompt", "a"}, {"resume_token_ids", {5}}, {"stream", true}, {"echo", true}}), 400);
  EXPECT_EQ(status({{"prompt", "a"}, {"resume_token_ids", {"x"}}, {"stream", true}}), 400);
  EXPECT_EQ(status({{"prompt", "a"}, {"prompt_token_ids", Json::array()}}), 400);
  // Output the request could not have produced (the end token) is a 400 too.
  EXPECT_EQ(status({{"prompt", "a"}, {"resume_token_ids", {2}}, {"stream", true}}), 400);
}

}  // namespace kvlm::resume_server_test
