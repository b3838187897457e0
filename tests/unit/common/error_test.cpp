#include <gtest/gtest.h>

#include "common/error.h"
#include "common/hash.h"
#include "common/mapped_file.h"
#include "support/test_support.h"

namespace kvlm {
namespace {

TEST(Error, CarriesCodeAndMessage) {
  try {
    throw_error(ErrorCode::kNotFound, "no such file: {}", "x.gguf");
    FAIL() << "throw_error returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_STREQ(e.what(), "no such file: x.gguf");
    EXPECT_EQ(error_code_name(e.code()), "not_found");
  }
}

TEST(MappedFile, MissingFileIsNotFound) {
  try {
    MappedFile::open("/nonexistent/kvlm/file.gguf");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/kvlm/file.gguf"), std::string::npos);
  }
}

TEST(MappedFile, MapsRealModelBytes) {
  auto f = MappedFile::open(test::shared_path("models/stories260K.gguf"));
  ASSERT_EQ(f->size(), 1185376u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(f->data()), 4), "GGUF");
}

TEST(Hash128, ChainsSeed) {
  int tokens[3] = {1, 2, 3};
  Hash128 a = hash128(tokens, sizeof(tokens));
  Hash128 b = hash128(tokens, sizeof(tokens), a);
  Hash128 c = hash128(tokens, sizeof(tokens), Hash128{1, 0});
  EXPECT_NE(a, b);
  EXPECT_NE(b, c);
  EXPECT_EQ(a, hash128(tokens, sizeof(tokens)));
}

}  // namespace
}  // namespace kvlm
