// API keys: the key file's format and its errors, loading that fails closed
// (no way of asking for keys yields none), and the comparison's time, which
// must not depend on where a guess goes wrong.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>

#include "common/error.h"
#include "support/test_support.h"
#include "wire/http/api_keys.h"

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

// The message of the Error load_api_keys throws, or "loaded N keys".
std::string load_message(const std::vector<std::string>& keys, const std::string& file) {
  try {
    return "loaded " + std::to_string(load_api_keys(keys, file).size()) + " keys";
  } catch (const Error& e) {
    return e.what();
  }
}

// Every way of asking for keys that yields none fails, naming the flag or
// file: an empty key set turns authentication off.
TEST(ApiKeyLoad, FailsClosed) {
  EXPECT_EQ(load_message({}, ""), "loaded 0 keys") << "no key flag: no keys, as asked";
  EXPECT_EQ(load_message({"sk-a", "sk-b"}, ""), "loaded 2 keys");
  EXPECT_NE(load_message({""}, "").find("--api-key \"\""), std::string::npos);
  EXPECT_NE(load_message({"sk-a", ""}, "").find("--api-key \"\""), std::string::npos) << "one empty among others";
  for (const char* text : {"", "\n\n", "# only a comment\n   \n\t# another\n"}) {
    const std::string file = test::write_temp_file("no-keys.txt", text);
    EXPECT_NE(load_message({}, file).find(file + ": holds no key"), std::string::npos) << "'" << text << "'";
    EXPECT_NE(load_message({"sk-a"}, file).find("holds no key"), std::string::npos) << "beside a key flag too";
  }
  EXPECT_NE(load_message({}, "/nonexistent/keys.txt").find("--api-key-file /nonexistent/keys.txt: cannot read it"),
            std::string::npos);
  EXPECT_NE(load_message({}, test::temp_dir()).find("is a folder"), std::string::npos);
  const std::string bad = test::write_temp_file("bad-keys.txt", "sk-a tpm=many\n");
  EXPECT_NE(load_message({}, bad).find(bad + " line 1: tpm"), std::string::npos);
}

// A reload that brings no key keeps the ring checking its keys; a ring
// that never had keys may stay without.
TEST(ApiKeyring, ReplaceNeverTurnsCheckingOff) {
  ApiKeyring ring(std::vector<ApiKey>{{"team-a", "sk-a", {}}});
  EXPECT_THROW(ring.replace({}), Error);
  EXPECT_TRUE(ring.enabled());
  EXPECT_NE(ring.metrics_text().find("key=\"team-a\""), std::string::npos);
  ring.replace(std::vector<ApiKey>{{"team-b", "sk-b", {}}});
  EXPECT_TRUE(ring.enabled());
  ApiKeyring open_ring(std::vector<ApiKey>{});
  EXPECT_FALSE(open_ring.enabled());
  open_ring.replace({});
  EXPECT_FALSE(open_ring.enabled());
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
