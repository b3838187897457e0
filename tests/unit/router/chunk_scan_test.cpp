// scan_chunk reads what the relay needs of a kvlm serve chunk from its text,
// agreeing with a JSON parse; other layouts are left to the JSON path.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "router/chunk_scan.h"

namespace kvlm::router {
namespace {

using Json = nlohmann::ordered_json;

TEST(ChunkScan, ReadsIdsIndexAndFinishAndCutsTheIdFields) {
  const std::string d = R"({"id":"cmpl-1","object":"text_completion","created":5,"model":"m","choices":[{"index":2,)"
                        R"("text":"a \"finish_reason\":\"x\" b","logprobs":{"top_logprobs":[{"finish_reason":-0.5}]},)"
                        R"("finish_reason":null,"prompt_token_ids":[1,2,3],"token_ids":[40,41]}]})";
  const auto s = scan_chunk(d);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->index, 2u);
  EXPECT_TRUE(s->has_ids);
  EXPECT_EQ(s->ids, (std::vector<int32_t>{40, 41}));
  EXPECT_EQ(s->prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_FALSE(s->finished) << "neither the text nor a logprobs key is the choice's finish_reason";
  Json want = Json::parse(d);
  want["choices"][0].erase("token_ids");
  want["choices"][0].erase("prompt_token_ids");
  EXPECT_EQ(Json::parse(s->without_ids), want);
}

TEST(ChunkScan, AFinishedChunkAndOneWithoutIds) {
  auto s = scan_chunk(R"({"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop","token_ids":[]}]})");
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->finished);
  EXPECT_TRUE(s->has_ids);
  EXPECT_TRUE(s->ids.empty());
  s = scan_chunk(R"({"id":"c","choices":[{"index":1,"delta":{"tool_calls":[{"index":0}]},"finish_reason":null}]})");
  ASSERT_TRUE(s);
  EXPECT_FALSE(s->has_ids) << "a chunk in the middle of an event";
  EXPECT_EQ(s->index, 1u);
}

TEST(ChunkScan, OtherLayoutsGoToTheJsonPath) {
  EXPECT_FALSE(scan_chunk(R"({"error":{"message":"x"}})"));
  EXPECT_FALSE(scan_chunk(R"({"id":"c","choices":[],"usage":{"prompt_tokens":1}})"));
  EXPECT_FALSE(scan_chunk(R"({"id":"c","choices":[{"text":"x","index":0}]})"));
  EXPECT_FALSE(scan_chunk(R"({"id":"c","choices":[{"index":0,"token_ids":[1,x]}]})"));
}

// Where a JSON parser would read the chunk otherwise than the scan (it keeps
// the last of repeated keys), the scan steps aside: found by the fuzzer
// (tests/fuzz/router_stream_fuzz.cpp) as {"choices":[{"index":5,"index":2}]}.
TEST(ChunkScan, RepeatedKeysAndOtherNestingsGoToTheJsonPath) {
  EXPECT_FALSE(scan_chunk(R"({"choices":[{"index":5,"index":2}]})"));
  EXPECT_FALSE(scan_chunk(R"({"choices":[{"index":5,"text":"a", "index" :2,"token_ids":[1]}]})"));
  EXPECT_FALSE(scan_chunk(R"({"choices":[{"index":0,"finish_reason":"stop","finish_reason":null}]})"));
  EXPECT_FALSE(scan_chunk(R"({"choices":[{"index":1}],"choices":[{"index":2}]})"));
  EXPECT_FALSE(scan_chunk(R"({"a":[{"choices":[{"index":1,"text":"x"}]}]})"));
  EXPECT_FALSE(scan_chunk(R"({"choices":[{"index":1,"text":"x\"}]})"));  // ends inside the string
  // Keys repeated deeper down (tool-call deltas have their own index), a
  // brace inside a string, and escaped quotes are the choice's own business.
  auto s = scan_chunk(R"({"choices":[{"index":3,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\":}"}}]},)"
                      R"("text":"\"index\":9","token_ids":[7]}]})");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->index, 3u);
  EXPECT_EQ(s->ids, std::vector<int32_t>{7});
}

}  // namespace
}  // namespace kvlm::router
