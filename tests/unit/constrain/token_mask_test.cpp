// Token masks on a toy vocabulary: the trie walk against a brute-force check
// of every token, end tokens only where the grammar is complete, and special
// tokens never allowed.
#include <gtest/gtest.h>

#include "common/error.h"

#include "constrain/constraint.h"
#include "constrain/matcher.h"
#include "constrain/token_mask.h"

namespace kvlm::constrain {
namespace {

const std::vector<std::string> kPieces = {"<eos>", "{", "}", "\"", "\"a", "a", "ab", "b\"", ":", "1", "12", "1}",
                                          "<ctl>", " ", "{\"", "true", "tr", ","};

TokenIndex toy_index() {
  std::vector<bool> usable(kPieces.size(), true);
  usable[12] = false;  // a control token
  return TokenIndex(kPieces, usable, {0});
}

// What the mask must be: every usable token whose bytes the matcher takes.
std::vector<uint8_t> brute_force(const Matcher& m) {
  std::vector<uint8_t> out(kPieces.size(), 0);
  for (size_t i = 1; i < kPieces.size(); ++i) {
    if (i == 12) continue;
    Matcher copy = m;
    out[i] = copy.advance(kPieces[i]) ? 1 : 0;
  }
  out[0] = m.accepting() ? 1 : 0;
  return out;
}

TEST(TokenMask, MatchesBruteForceAlongAGeneration) {
  auto p = json_schema_program(Json::parse(R"({"type":"object","properties":{"ab":{"type":"integer"},
      "b":{"type":"boolean"}},"required":["ab"],"additionalProperties":false})"));
  const TokenIndex index = toy_index();
  Matcher m(p);
  std::vector<uint8_t> allowed;
  for (const char* token : {"{\"", "a", "b\"", ":", "12", "1}"}) {
    const int32_t n = index.fill_mask(m, allowed);
    EXPECT_EQ(allowed, brute_force(m)) << "before " << token;
    EXPECT_EQ(n, std::count(allowed.begin(), allowed.end(), 1));
    const auto id = std::find(kPieces.begin(), kPieces.end(), token) - kPieces.begin();
    EXPECT_EQ(allowed[id], 1) << token;
    ASSERT_TRUE(m.advance(token));
  }
  EXPECT_TRUE(m.complete());
  index.fill_mask(m, allowed);
  EXPECT_EQ(allowed, std::vector<uint8_t>({1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}));
}

TEST(TokenMask, EndTokenOnlyWhereComplete) {
  auto p = regex_program("1+");
  const TokenIndex index = toy_index();
  Matcher m(p);
  std::vector<uint8_t> allowed;
  index.fill_mask(m, allowed);
  EXPECT_EQ(allowed[0], 0);
  EXPECT_EQ(allowed[9], 1);
  EXPECT_EQ(allowed[10], 0);  // "12"
  ASSERT_TRUE(m.advance("1"));
  index.fill_mask(m, allowed);
  EXPECT_EQ(allowed[0], 1);  // complete, and more 1s may follow
  EXPECT_EQ(allowed[9], 1);
  EXPECT_FALSE(m.complete());
}

TEST(TokenMask, ControlTokensNeverAllowed) {
  auto p = regex_program("(<ctl>|x)");
  const TokenIndex index = toy_index();
  Matcher m(p);
  std::vector<uint8_t> allowed;
  EXPECT_EQ(index.fill_mask(m, allowed), 0);  // "<ctl>" is the control token's text, not its bytes to use
}

}  // namespace
}  // namespace kvlm::constrain
