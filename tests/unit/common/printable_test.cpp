#include "common/printable.h"

#include <gtest/gtest.h>

#include <string>

namespace kvlm {
namespace {

TEST(Printable, EscapesEverythingButPrintableAscii) {
  EXPECT_EQ(printable("blk.0.attn_k.weight"), "blk.0.attn_k.weight");
  EXPECT_EQ(printable(std::string("a\0b", 3)), "a\\x00b");  // the rest survives an embedded NUL
  EXPECT_EQ(printable("\xff\xc5\x1b[31m\n"), "\\xff\\xc5\\x1b[31m\\x0a");
  EXPECT_EQ(printable("back\\slash"), "back\\\\slash");
}

TEST(Printable, CutsLongText) {
  EXPECT_EQ(printable(std::string(10, 'x'), 4), "xxxx...");
  EXPECT_EQ(printable(std::string(300, 'y')).size(), 256u + 3u);
}

}  // namespace
}  // namespace kvlm
