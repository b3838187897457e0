// msgpack::Writer: the exact bytes of every type it writes, at each length
// and value boundary where the spec changes form (the expected bytes are
// written out from the spec's tables, not from another encoder).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "support/test_support.h"
#include "wire/kv_events/msgpack_writer.h"

namespace kvlm {
namespace {

template <typename F>
std::string written(F&& write) {
  msgpack::Writer w;
  write(w);
  return test::hex_bytes(w.bytes());
}

TEST(MsgpackWriter, NilAndBooleans) {
  EXPECT_EQ(written([](auto& w) { w.nil(); }), "c0");
  EXPECT_EQ(written([](auto& w) { w.boolean(false); }), "c2");
  EXPECT_EQ(written([](auto& w) { w.boolean(true); }), "c3");
}

TEST(MsgpackWriter, UnsignedIntegersTakeTheSmallestForm) {
  EXPECT_EQ(written([](auto& w) { w.uint(0); }), "00");
  EXPECT_EQ(written([](auto& w) { w.uint(127); }), "7f");
  EXPECT_EQ(written([](auto& w) { w.uint(128); }), "cc80");
  EXPECT_EQ(written([](auto& w) { w.uint(255); }), "ccff");
  EXPECT_EQ(written([](auto& w) { w.uint(256); }), "cd0100");
  EXPECT_EQ(written([](auto& w) { w.uint(65535); }), "cdffff");
  EXPECT_EQ(written([](auto& w) { w.uint(65536); }), "ce00010000");
  EXPECT_EQ(written([](auto& w) { w.uint(0xffffffffu); }), "ceffffffff");
  EXPECT_EQ(written([](auto& w) { w.uint(0x100000000ull); }), "cf0000000100000000");
  // Above 2^63: still unsigned (a reader of int64 would see it negative).
  EXPECT_EQ(written([](auto& w) { w.uint(0x8000000000000000ull); }), "cf8000000000000000");
  EXPECT_EQ(written([](auto& w) { w.uint(0xfedcba9876543210ull); }), "cffedcba9876543210");
  EXPECT_EQ(written([](auto& w) { w.uint(UINT64_MAX); }), "cfffffffffffffffff");
}

TEST(MsgpackWriter, SignedIntegers) {
  EXPECT_EQ(written([](auto& w) { w.sint(5); }), "05");  // non-negative: the unsigned forms
  EXPECT_EQ(written([](auto& w) { w.sint(200); }), "ccc8");
  EXPECT_EQ(written([](auto& w) { w.sint(-1); }), "ff");
  EXPECT_EQ(written([](auto& w) { w.sint(-32); }), "e0");
  EXPECT_EQ(written([](auto& w) { w.sint(-33); }), "d0df");
  EXPECT_EQ(written([](auto& w) { w.sint(-128); }), "d080");
  EXPECT_EQ(written([](auto& w) { w.sint(-129); }), "d1ff7f");
  EXPECT_EQ(written([](auto& w) { w.sint(-32768); }), "d18000");
  EXPECT_EQ(written([](auto& w) { w.sint(-32769); }), "d2ffff7fff");
  EXPECT_EQ(written([](auto& w) { w.sint(INT32_MIN); }), "d280000000");
  EXPECT_EQ(written([](auto& w) { w.sint(int64_t{INT32_MIN} - 1); }), "d3ffffffff7fffffff");
  EXPECT_EQ(written([](auto& w) { w.sint(INT64_MIN); }), "d38000000000000000");
}

TEST(MsgpackWriter, Float64IsBigEndianIeee) {
  EXPECT_EQ(written([](auto& w) { w.float64(1.5); }), "cb3ff8000000000000");
  EXPECT_EQ(written([](auto& w) { w.float64(-2.0); }), "cbc000000000000000");
  EXPECT_EQ(written([](auto& w) { w.float64(1700000000.25); }), "cb41d954fc40100000");
}

// The header of a str or bin of n bytes, then n bytes of content.
std::string str_head(size_t n) {
  msgpack::Writer w;
  w.str(std::string(n, 'x'));
  EXPECT_EQ(w.bytes().substr(w.bytes().size() - n), std::string(n, 'x'));
  return test::hex_bytes(w.bytes().substr(0, w.bytes().size() - n));
}

std::string bin_head(size_t n) {
  msgpack::Writer w;
  w.bin(std::string(n, '\0'));
  EXPECT_EQ(w.bytes().substr(w.bytes().size() - n), std::string(n, '\0'));
  return test::hex_bytes(w.bytes().substr(0, w.bytes().size() - n));
}

TEST(MsgpackWriter, StrLengthsAtEachBoundary) {
  EXPECT_EQ(str_head(0), "a0");
  EXPECT_EQ(str_head(31), "bf");
  EXPECT_EQ(str_head(32), "d920");
  EXPECT_EQ(str_head(255), "d9ff");
  EXPECT_EQ(str_head(256), "da0100");
  EXPECT_EQ(str_head(65535), "daffff");
  EXPECT_EQ(str_head(65536), "db00010000");
  EXPECT_EQ(written([](auto& w) { w.str("BlockStored"); }), "ab426c6f636b53746f726564");
}

TEST(MsgpackWriter, BinLengthsAtEachBoundary) {
  EXPECT_EQ(bin_head(0), "c400");  // bin has no fix form
  EXPECT_EQ(bin_head(31), "c41f");
  EXPECT_EQ(bin_head(32), "c420");
  EXPECT_EQ(bin_head(255), "c4ff");
  EXPECT_EQ(bin_head(256), "c50100");
  EXPECT_EQ(bin_head(65535), "c5ffff");
  EXPECT_EQ(bin_head(65536), "c600010000");
}

TEST(MsgpackWriter, ArrayAndMapHeaders) {
  EXPECT_EQ(written([](auto& w) { w.array(0); }), "90");
  EXPECT_EQ(written([](auto& w) { w.array(15); }), "9f");
  EXPECT_EQ(written([](auto& w) { w.array(16); }), "dc0010");  // no 8-bit form
  EXPECT_EQ(written([](auto& w) { w.array(65535); }), "dcffff");
  EXPECT_EQ(written([](auto& w) { w.array(65536); }), "dd00010000");
  EXPECT_EQ(written([](auto& w) { w.map(0); }), "80");
  EXPECT_EQ(written([](auto& w) { w.map(15); }), "8f");
  EXPECT_EQ(written([](auto& w) { w.map(16); }), "de0010");
  EXPECT_EQ(written([](auto& w) { w.map(65536); }), "df00010000");
}

TEST(MsgpackWriter, NestedValuesInOrder) {
  // {"a": [1, nil, -1]}
  EXPECT_EQ(written([](auto& w) {
              w.map(1);
              w.str("a");
              w.array(3);
              w.uint(1);
              w.nil();
              w.sint(-1);
            }),
            "81a1619301c0ff");
}

}  // namespace
}  // namespace kvlm
