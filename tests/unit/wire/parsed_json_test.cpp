// parsed_json_bytes (json_text.h), what the server reserves of --body-mem
// before it parses a body: never less than parsing really allocates, for
// the bodies that amplify most (small values in long arrays, many small
// objects and keys) and for plain ones (a long prompt), and not so much
// more that ordinary requests look expensive.
#include <gtest/gtest.h>

#include <malloc.h>

#include <fmt/format.h>

#include "wire/openai/json_text.h"

namespace kvlm::openai {
namespace {

// Under a sanitizer the heap is the sanitizer's, not glibc's: mallinfo2
// sees none of it.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kGlibcHeap = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
constexpr bool kGlibcHeap = false;
#else
constexpr bool kGlibcHeap = true;
#endif
#else
constexpr bool kGlibcHeap = true;
#endif

// Heap bytes the parsed value of `text` holds (malloc's own view).
int64_t heap_of_parse(const std::string& text) {
  const auto before = static_cast<int64_t>(mallinfo2().uordblks);
  const Json j = parse_json(text);
  return static_cast<int64_t>(mallinfo2().uordblks) - before;
}

std::string repeated(const std::string& open, const std::string& item, int n, const std::string& close) {
  std::string s = open;
  for (int i = 0; i < n; ++i) s += (i ? "," : "") + fmt::format(fmt::runtime(item), i);
  return s + close;
}

TEST(ParsedJsonBytes, AnUpperBoundOfWhatParsingAllocates) {
  if (!kGlibcHeap) GTEST_SKIP() << "the heap is a sanitizer's: mallinfo2 cannot measure the parse";
  const std::vector<std::pair<const char*, std::string>> bodies = {
      {"zeros", repeated("[", "0", 50000, "]")},
      {"short strings", repeated("[", "\"a\"", 50000, "]")},
      {"15-byte strings", repeated("[", "\"abcdefghijklmn{}\"", 25000, "]")},
      {"one-key objects", repeated("[", "{{\"k\":{}}}", 25000, "]")},
      {"wide object", repeated("{", "\"key_{}\":true", 5000, "}")},
      {"nested arrays", repeated("[", "[[[{}]]]", 20000, "]")},
      {"schema", repeated("{\"anyOf\":[", "{{\"type\":\"object\",\"properties\":{{\"f{0}\":{{\"type\":\"integer\"}}}},"
                                          "\"required\":[\"f{0}\"]}}", 5000, "]}")},
      {"prompt", "{\"prompt\":\"" + std::string(1 << 20, 'x') + "\",\"max_tokens\":4}"},
  };
  for (const auto& [name, text] : bodies) {
    const int64_t real = heap_of_parse(text), estimate = parsed_json_bytes(text);
    EXPECT_GE(estimate, real) << name;
    EXPECT_LE(estimate, 4 * real) << name;
    std::printf("%-16s text %8zu  parsed %9lld  estimate %9lld  (%.1fx the text, %.2fx the parse)\n", name, text.size(),
                static_cast<long long>(real), static_cast<long long>(estimate),
                static_cast<double>(real) / static_cast<double>(text.size()),
                static_cast<double>(estimate) / static_cast<double>(real));
  }
}

}  // namespace
}  // namespace kvlm::openai
