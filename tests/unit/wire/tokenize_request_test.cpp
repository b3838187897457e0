// /tokenize and /detokenize bodies: parsed and validated outside the routes
// (the openai fuzz target calls the same functions).
#include <gtest/gtest.h>

#include "wire/openai/protocol.h"

namespace kvlm::openai {
namespace {

TEST(TokenizeRequest, DefaultsAndFlags) {
  auto v = parse_tokenize_request(Json::parse(R"({"content":"hi"})"));
  ASSERT_TRUE(std::holds_alternative<TokenizeRequest>(v));
  const auto& r = std::get<TokenizeRequest>(v);
  EXPECT_EQ(r.content, "hi");
  EXPECT_TRUE(r.add_special);
  EXPECT_TRUE(r.parse_special);
  EXPECT_FALSE(r.with_pieces);
  auto w = parse_tokenize_request(
      Json::parse(R"({"content":"","add_special":false,"parse_special":false,"with_pieces":true})"));
  ASSERT_TRUE(std::holds_alternative<TokenizeRequest>(w));
  EXPECT_FALSE(std::get<TokenizeRequest>(w).add_special);
  EXPECT_FALSE(std::get<TokenizeRequest>(w).parse_special);
  EXPECT_TRUE(std::get<TokenizeRequest>(w).with_pieces);
}

TEST(TokenizeRequest, BadFieldsAreNamed) {
  for (const auto& [body, param] : std::vector<std::pair<const char*, const char*>>{
           {R"([1])", "body"},
           {R"({})", "content"},
           {R"({"content":5})", "content"},
           {R"({"content":"x","add_special":1})", "add_special"},
           {R"({"content":"x","with_pieces":"yes"})", "with_pieces"}}) {
    auto v = parse_tokenize_request(Json::parse(body));
    ASSERT_TRUE(std::holds_alternative<RequestError>(v)) << body;
    EXPECT_EQ(std::get<RequestError>(v).status, 400);
    EXPECT_EQ(std::get<RequestError>(v).param, param) << body;
  }
}

TEST(DetokenizeRequest, IdsMustBeInsideTheVocabulary) {
  auto v = parse_detokenize_request(Json::parse(R"({"tokens":[0,5,9]})"), 10);
  ASSERT_TRUE(std::holds_alternative<std::vector<int32_t>>(v));
  EXPECT_EQ(std::get<std::vector<int32_t>>(v), (std::vector<int32_t>{0, 5, 9}));
  for (const char* body : {R"({"tokens":[10]})", R"({"tokens":[-1]})", R"({"tokens":[1.5]})", R"({"tokens":"1"})",
                           R"({"tokens":[18446744073709551615]})", R"({})", R"([])"}) {
    auto e = parse_detokenize_request(Json::parse(body), 10);
    ASSERT_TRUE(std::holds_alternative<RequestError>(e)) << body;
    EXPECT_EQ(std::get<RequestError>(e).param, "tokens") << body;
  }
}

}  // namespace
}  // namespace kvlm::openai
