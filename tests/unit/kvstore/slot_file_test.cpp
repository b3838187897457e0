// Slot files: a round trip keeps the tokens, the key and every record; any
// flipped byte, any truncation, trailing bytes, another namespace or a
// record of other tokens is refused with an Error saying so, never a crash.
#include <cstring>
#include <random>
#include <string>

#include <gtest/gtest.h>
#include <xxhash.h>

#include "common/error.h"
#include "kv/block_hash.h"
#include "kvstore/slot_file.h"

namespace kvlm {
namespace {

const Hash128 kSlotNs{0x5151, 0x7272};
constexpr int32_t kBlock = 4;

// `num_tokens` tokens and records for the first `num_records` full blocks.
SlotFile make_slot_file(int num_tokens, int num_records, uint64_t extra_key = 0x99) {
  SlotFile f;
  f.block_size = kBlock;
  f.extra_key = extra_key;
  std::mt19937 rng(static_cast<unsigned>(num_tokens));
  for (int i = 0; i < num_tokens; ++i) f.tokens.push_back(static_cast<int32_t>(rng() % 512));
  const std::vector<BlockHash> hashes = hash_full_blocks(f.tokens, kBlock, extra_key);
  for (int i = 0; i < num_records; ++i) {
    KvRecord& r = f.records.emplace_back();
    r.hash = hashes[static_cast<size_t>(i)];
    if (i > 0) r.parent = hashes[static_cast<size_t>(i - 1)];
    r.tokens.assign(f.tokens.begin() + i * kBlock, f.tokens.begin() + (i + 1) * kBlock);
    r.payload.resize(24);
    for (auto& b : r.payload) b = static_cast<std::byte>(rng());
    r.salt = extra_key;
  }
  return f;
}

// The message decode_slot_file refuses `bytes` with ("" when it accepts them).
std::string refusal(const std::string& bytes, const Hash128& ns = kSlotNs) {
  try {
    decode_slot_file(bytes, ns);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.what();
  }
  return "";
}

TEST(SlotFile, RoundTripKeepsTokensKeyAndRecords) {
  for (auto [num_tokens, num_records] : {std::pair{0, 0}, {7, 0}, {9, 1}, {12, 3}, {13, 2}}) {
    const SlotFile f = make_slot_file(num_tokens, num_records);
    const SlotFile out = decode_slot_file(encode_slot_file(kSlotNs, f), kSlotNs);
    EXPECT_EQ(out.block_size, kBlock);
    EXPECT_EQ(out.tokens, f.tokens);
    EXPECT_EQ(out.extra_key, f.extra_key);
    ASSERT_EQ(out.records.size(), f.records.size());
    for (size_t i = 0; i < f.records.size(); ++i) {
      EXPECT_EQ(out.records[i].hash, f.records[i].hash);
      EXPECT_EQ(out.records[i].parent, f.records[i].parent);
      EXPECT_EQ(out.records[i].tokens, f.records[i].tokens);
      EXPECT_EQ(out.records[i].payload, f.records[i].payload);
      EXPECT_EQ(out.records[i].salt, f.extra_key);
    }
  }
}

TEST(SlotFile, EveryFlippedByteIsRefused) {
  const std::string bytes = encode_slot_file(kSlotNs, make_slot_file(9, 2));
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ 0x10);
    EXPECT_NE(refusal(bad), "") << "byte " << i;
  }
  std::string flipped = bytes;
  flipped[100] = static_cast<char>(flipped[100] ^ 1);
  EXPECT_NE(refusal(flipped).find("corrupt"), std::string::npos) << refusal(flipped);
}

TEST(SlotFile, EveryTruncationAndTrailingBytesAreRefused) {
  const std::string bytes = encode_slot_file(kSlotNs, make_slot_file(9, 2));
  for (size_t n = 0; n < bytes.size(); ++n) EXPECT_NE(refusal(bytes.substr(0, n)), "") << n << " bytes";
  EXPECT_NE(refusal(bytes + std::string(1, '\0')), "");
}

TEST(SlotFile, AnotherNamespaceIsRefusedAsAnotherModel) {
  const std::string bytes = encode_slot_file(kSlotNs, make_slot_file(9, 2));
  const std::string why = refusal(bytes, Hash128{1, 2});
  EXPECT_NE(why.find("another model"), std::string::npos) << why;
}

// A file whose checksum is right but whose record is not the block its
// tokens chain to (the header's key changed, checksum recomputed): the
// records were hashed under another key, so none of them is that block.
TEST(SlotFile, RecordsOfAnotherChainAreRefused) {
  SlotFile f = make_slot_file(12, 2);
  f.extra_key = 0x1234;  // the records keep the chain of key 0x99
  const std::string why = refusal(encode_slot_file(kSlotNs, f));
  EXPECT_NE(why.find("KV block 0"), std::string::npos) << why;
}

// Random bytes and a header claiming huge counts never crash or allocate
// without bound.
TEST(SlotFile, HostileHeadersAreRefused) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::string junk(static_cast<size_t>(rng() % 200), '\0');
    for (char& c : junk) c = static_cast<char>(rng());
    EXPECT_NE(refusal(junk), "");
  }
}

// `bytes` with the checksum a writer would give them, so what comes after
// the checksum's check reads them.
std::string sealed(std::string bytes) {
  const uint64_t sum = XXH3_64bits(bytes.data(), bytes.size());
  bytes.append(reinterpret_cast<const char*>(&sum), sizeof(sum));
  return bytes;
}

// Every field of a well-sealed file changed in turn: counts past the bytes
// there are, more records than full blocks, unknown flags or version.
TEST(SlotFile, SealedFilesWithWrongFieldsAreRefused) {
  const std::string good = encode_slot_file(kSlotNs, make_slot_file(9, 2));
  const std::string body = good.substr(0, good.size() - 8);
  auto with = [&](size_t offset, uint32_t value) {
    std::string b = body;
    std::memcpy(b.data() + offset, &value, sizeof(value));
    return sealed(b);
  };
  EXPECT_EQ(refusal(sealed(body)), "");
  for (uint32_t tokens : {0u, 8u, 10u, 1000u, kSlotFileMaxTokens, 0xffffffffu})
    EXPECT_NE(refusal(with(28, tokens)), "") << "num_tokens " << tokens;
  for (uint32_t records : {1u, 3u, 0xffffffffu}) EXPECT_NE(refusal(with(32, records)), "") << "num_records " << records;
  for (uint32_t block : {0u, 3u, 0x80000000u}) EXPECT_NE(refusal(with(24, block)), "") << "block_size " << block;
  EXPECT_NE(refusal(with(4, 2)).find("version 2"), std::string::npos);
  EXPECT_NE(refusal(with(36, 1)), "");
  // A record's length past the end of the file.
  const size_t first_length = kSlotFileHeaderBytes + 9 * sizeof(int32_t);
  for (uint32_t length : {0u, 1u, 0xffffffffu}) EXPECT_NE(refusal(with(first_length, length)), "") << length;
}

}  // namespace
}  // namespace kvlm
