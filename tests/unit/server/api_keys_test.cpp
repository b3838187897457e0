// API keys: the key file's format and its errors, and the comparison's
// time, which must not depend on where a guess goes wrong.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>

#include "common/error.h"
#include "server/http/api_keys.h"

namespace kvlm {
namespace {

TEST(ApiKeyFile, ParsesKeysNamesAndLimits) {
  const auto keys = parse_api_key_file("# comment\n\nsk-a name=team-a rpm=60 tpm=1000 concurrent=2\n"
                                       "  sk-b   # no name\n",
                                       "keys.txt");
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys[0].name, "team-a");
  EXPECT_EQ(keys[0].secret, "sk-a");
  EXPECT_EQ(keys[0].limits.requests_per_minute, 60);
  EXPECT_EQ(keys[0].limits.tokens_per_minute, 1000);
  EXPECT_EQ(keys[0].limits.max_concurrent, 2);
  EXPECT_EQ(keys[1].name, "line-4");
  EXPECT_EQ(keys[1].limits.requests_per_minute, 0);
}

TEST(ApiKeyFile, ErrorsNameTheLine) {
  auto message = [](const char* text) {
    try {
      parse_api_key_file(text, "keys.txt");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message("sk-a rpm=lots\n").find("keys.txt line 1: rpm"), std::string::npos);
  EXPECT_NE(message("sk-a\nsk-b colour=red\n").find("keys.txt line 2: unknown field 'colour=red'"), std::string::npos);
  EXPECT_NE(message("sk-a name=x\nsk-b name=x\n").find("line 2: the name 'x' is used twice"), std::string::npos);
  EXPECT_NE(message("sk-a rpm=-1\n").find("non-negative"), std::string::npos);
}

// Nanoseconds per comparison of `guess` with `key`: the fastest of many
// batches (the one the machine disturbed least).
double ns_per_check(const std::string& guess, const std::string& key) {
  double best = 1e30;
  for (int batch = 0; batch < 20; ++batch) {
    const auto start = std::chrono::steady_clock::now();
    int num_equal = 0;
    for (int i = 0; i < 50; ++i) num_equal += same_secret(guess, key);
    const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() / 50;
    if (num_equal == 0) best = std::min(best, ns);
  }
  return best;
}

// A statistical test of the comparison, not of the network: with a key of
// 64 KiB, a guess wrong at its first byte and one wrong at its last take the
// same time (an early-exit comparison, memcmp's, takes a hundred times less
// for the first). Measured alternately, so a slow moment hits both.
TEST(ApiKeyCompare, TakesTheSameTimeWhereverTheGuessIsWrong) {
  const std::string key(65536, 'k');
  std::string early = key, late = key;
  early.front() = 'x';
  late.back() = 'x';
  double t_first = 1e30, t_last = 1e30;
  for (int round = 0; round < 5; ++round) {
    t_first = std::min(t_first, ns_per_check(early, key));
    t_last = std::min(t_last, ns_per_check(late, key));
  }
  EXPECT_LT(std::max(t_first, t_last) / std::min(t_first, t_last), 1.5)
      << "wrong at the first byte: " << t_first << " ns, at the last: " << t_last << " ns";
  EXPECT_TRUE(same_secret(key, key));
  EXPECT_FALSE(same_secret(key.substr(1), key)) << "a shorter guess";
  http::Request right;
  right.headers.push_back({"x-api-key", key});
  EXPECT_TRUE(presents_key(right, key));
}

}  // namespace
}  // namespace kvlm
