// parse_json (json_text.h), the server's one way from request bytes to a
// Json value: members in the order sent, nlohmann's rule for a key given
// twice (its first place, its last value) in small objects and in those
// large enough to be hashed, and the errors a client can act on.
#include <gtest/gtest.h>

#include <string>

#include <fmt/format.h>

#include "common/error.h"
#include "wire/openai/json_text.h"

namespace kvlm::openai {
namespace {

std::string message_of(const std::string& text) {
  try {
    parse_json(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "parsed";
}

TEST(ParseJson, AKeyGivenTwiceKeepsItsFirstPlaceAndTakesItsLastValue) {
  for (int num_members : {3, 100}) {  // walked, and hashed (16 members and more)
    std::string text = "{";
    for (int i = 0; i < num_members; ++i) text += fmt::format("\"k{}\":{},", i, i);
    text += R"("k1":"again","k0":{"nested":[1,{"k0":2}]}})";
    const Json j = parse_json(text);
    ASSERT_EQ(j.size(), static_cast<size_t>(num_members)) << num_members;
    EXPECT_EQ(j.begin().key(), "k0");
    EXPECT_EQ(std::next(j.begin()).key(), "k1");
    EXPECT_EQ(j["k1"], "again");
    EXPECT_EQ(j["k0"], Json::parse(R"({"nested":[1,{"k0":2}]})"));
    EXPECT_EQ(j[fmt::format("k{}", num_members - 1)], num_members - 1);
    EXPECT_EQ(j.dump(), Json::parse(text).dump()) << "as nlohmann's own parser builds it";
  }
}

TEST(ParseJson, ValuesOfEveryType) {
  const std::string text = R"([null,true,false,-3,18446744073709551615,2.5,"s\u00e9",[],{},{"a":[{"b":{}}]}])";
  EXPECT_EQ(parse_json(text), Json::parse(text));
  EXPECT_EQ(parse_json(" 7 "), 7);
}

TEST(ParseJson, ErrorsAClientCanActOn) {
  EXPECT_NE(message_of("{not json").find("not valid JSON"), std::string::npos);
  EXPECT_NE(message_of(R"({"a":1} x)").find("not valid JSON"), std::string::npos) << "trailing bytes";
  EXPECT_NE(message_of("[1e400]").find("a number out of range"), std::string::npos);
  EXPECT_NE(message_of(std::string(65, '[') + std::string(65, ']')).find("nested deeper than 64"), std::string::npos);
  EXPECT_EQ(message_of(std::string(64, '[') + std::string(64, ']')), "parsed");
  EXPECT_NE(message_of(R"({"a":)" + std::string(100000, '[')).find("nested deeper than 64"), std::string::npos);
}

// What kvlm router peeks into: a value, or a discarded one where
// parse_json refuses (too deep included), never an exception.
TEST(ParseJson, OrDiscardedForBodiesOnlyPeekedInto) {
  EXPECT_EQ(parse_json_or_discarded(R"({"a":[1]})"), Json::parse(R"({"a":[1]})"));
  EXPECT_TRUE(parse_json_or_discarded("{not json").is_discarded());
  EXPECT_TRUE(parse_json_or_discarded(std::string(65, '[') + std::string(65, ']')).is_discarded());
}

}  // namespace
}  // namespace kvlm::openai
