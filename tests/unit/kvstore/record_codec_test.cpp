// Record formats 2 (MAC) and 3 (sealed) and keyed names (record_codec.h):
// round trips keep every field and the salt; any bit flipped, another
// secret, another block or another namespace is refused; a secret reader
// refuses unauthenticated records; sealed bytes hold neither the tokens nor
// the payload in clear; the key derivation is RFC 5869's HKDF.
#include <algorithm>
#include <cstring>
#include <random>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "common/error.h"
#include "kvstore/record_codec.h"

namespace kvlm {
namespace {

const Hash128 kCodecNs{0xabc, 0xdef};

KvRecord codec_record(int seed, size_t num_payload = 96) {
  KvRecord r;
  std::mt19937 rng(static_cast<uint32_t>(seed));
  for (int i = 0; i < 16; ++i) r.tokens.push_back(static_cast<int32_t>(1000 + rng() % 30000));
  r.parent = BlockHash{Hash128{rng(), rng()}};
  r.salt = 0x1234567 | 1;
  r.hash = hash_block(r.parent, r.tokens, r.salt);
  r.payload.resize(num_payload);
  for (auto& b : r.payload) b = static_cast<std::byte>(rng());
  return r;
}

TierSecurity secured(std::string_view secret, bool encrypt) { return TierSecurity{derive_tier_keys(secret), encrypt}; }

std::string hex(const TierKey& k) {
  std::string out;
  for (unsigned char c : k) out += fmt::format("{:02x}", c);
  return out;
}

std::vector<unsigned char> bytes_from_hex(std::string_view hex) {
  std::vector<unsigned char> out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<unsigned char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  return out;
}

TEST(TierSecret, DerivationIsRfc5869Hkdf) {
  // RFC 5869 test case 1 (SHA-256): the first 32 bytes of its OKM.
  const std::vector<unsigned char> ikm(22, 0x0b);
  const auto salt = bytes_from_hex("000102030405060708090a0b0c");
  const auto info = bytes_from_hex("f0f1f2f3f4f5f6f7f8f9");
  const TierKey okm = hkdf_sha256(salt, std::as_bytes(std::span(ikm)),
                                  std::string_view(reinterpret_cast<const char*>(info.data()), info.size()));
  EXPECT_EQ(hex(okm), "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf");
  const TierKeys a = derive_tier_keys("a secret of at least sixteen bytes");
  const TierKeys b = derive_tier_keys("a secret of at least sixteen bytes");
  const TierKeys c = derive_tier_keys("a secret of at least sixteen byteS");
  EXPECT_EQ(a.mac, b.mac);
  EXPECT_NE(a.mac, a.names);
  EXPECT_NE(a.names, a.seal);
  EXPECT_NE(a.mac, c.mac);
}

TEST(TierSecret, ShortOrMissingSecretFilesAreRefused) {
  EXPECT_THROW(read_tier_secret("/nonexistent/secret", "--kv-secret-file"), Error);
  const std::string dir = ::testing::TempDir();
  const std::string short_path = dir + "/short-secret";
  FILE* f = std::fopen(short_path.c_str(), "w");
  std::fputs("tooshort\n", f);
  std::fclose(f);
  EXPECT_THROW(read_tier_secret(short_path, "--kv-secret-file"), Error);
  const std::string ok_path = dir + "/ok-secret";
  f = std::fopen(ok_path.c_str(), "w");
  std::fputs("0123456789abcdef0123456789abcdef\n", f);
  std::fclose(f);
  EXPECT_EQ(read_tier_secret(ok_path, "--kv-secret-file"), "0123456789abcdef0123456789abcdef");
}

TEST(RecordCodec, EveryFormatRoundTripsWithItsSalt) {
  for (int mode = 0; mode < 3; ++mode) {
    const RecordCodec codec(kCodecNs, mode == 0 ? TierSecurity{} : secured("secret number one!", mode == 2));
    EXPECT_EQ(codec.version(), mode + 1);
    KvRecord r = codec_record(mode);
    const std::string bytes = codec.encode(r);
    EXPECT_EQ(bytes.size(), codec.encoded_bytes(16, 96));
    EXPECT_LE(bytes.size(), codec.max_accepted_bytes(16, 96));
    KvRecord out;
    ASSERT_EQ(codec.decode(bytes, r.hash, &out), RecordStatus::kOk) << mode;
    EXPECT_EQ(out.tokens, r.tokens);
    EXPECT_EQ(out.payload, r.payload);
    EXPECT_EQ(out.parent, r.parent);
    EXPECT_EQ(out.salt, mode == 0 ? 0u : r.salt);  // format 1 keeps no salt
    std::byte first[RecordCodec::kPeekBytes];
    std::memcpy(first, bytes.data(), sizeof(first));
    EXPECT_EQ(codec.peek(first, bytes.size(), codec.name(r.hash)), RecordStatus::kOk);
    EXPECT_NE(codec.peek(first, bytes.size() + 1, codec.name(r.hash)), RecordStatus::kOk);
  }
}

TEST(RecordCodec, EveryBitFlipFailsTheMacOrTag) {
  for (bool encrypt : {false, true}) {
    const RecordCodec codec(kCodecNs, secured("secret number one!", encrypt));
    const KvRecord r = codec_record(3, 32);
    const std::string bytes = codec.encode(r);
    for (size_t i = 0; i < bytes.size(); ++i) {
      std::string bad = bytes;
      bad[i] = static_cast<char>(bad[i] ^ (1 << (i % 8)));
      KvRecord out;
      EXPECT_NE(codec.decode(bad, r.hash, &out), RecordStatus::kOk) << "byte " << i;
      EXPECT_TRUE(out.tokens.empty());
    }
    for (size_t n = 0; n < bytes.size(); n += 7) EXPECT_NE(codec.decode(bytes.substr(0, n), r.hash, nullptr), RecordStatus::kOk);
  }
}

TEST(RecordCodec, AnotherSecretBlockOrNamespaceIsRefused) {
  const KvRecord r = codec_record(4);
  for (bool encrypt : {false, true}) {
    const RecordCodec mine(kCodecNs, secured("secret number one!", encrypt));
    const RecordCodec theirs(kCodecNs, secured("secret number two!", encrypt));
    const RecordCodec other_ns(Hash128{1, 2}, secured("secret number one!", encrypt));
    EXPECT_EQ(mine.decode(theirs.encode(r), r.hash, nullptr), RecordStatus::kBadMac);
    EXPECT_EQ(mine.decode(other_ns.encode(r), r.hash, nullptr), RecordStatus::kWrongNamespace);
    EXPECT_EQ(mine.decode(mine.encode(r), codec_record(5).hash, nullptr), RecordStatus::kWrongHash);
    // Without the secret a writer can only make format 1, which a secret reader refuses.
    EXPECT_EQ(mine.decode(encode_record(kCodecNs, r), r.hash, nullptr), RecordStatus::kUnauthenticated);
    EXPECT_NE(mine.name(r.hash), theirs.name(r.hash));
    EXPECT_NE(mine.name(r.hash), r.hash.value);
    EXPECT_NE(mine.tier_id(), theirs.tier_id());
    EXPECT_NE(mine.tier_id(), kCodecNs);
  }
  // MAC-only and sealing servers with one secret share names and records.
  const RecordCodec mac(kCodecNs, secured("secret number one!", false));
  const RecordCodec sealed(kCodecNs, secured("secret number one!", true));
  EXPECT_EQ(mac.name(r.hash), sealed.name(r.hash));
  EXPECT_EQ(mac.decode(sealed.encode(r), r.hash, nullptr), RecordStatus::kOk);
  EXPECT_EQ(sealed.decode(mac.encode(r), r.hash, nullptr), RecordStatus::kOk);
  // A reader without a secret refuses what it cannot check.
  EXPECT_NE(RecordCodec(kCodecNs).decode(mac.encode(r), r.hash, nullptr), RecordStatus::kOk);
}

bool contains(const std::string& haystack, const void* needle, size_t n) {
  return std::search(haystack.begin(), haystack.end(), static_cast<const char*>(needle),
                     static_cast<const char*>(needle) + n) != haystack.end();
}

TEST(RecordCodec, SealedRecordsHideTokensPayloadAndHashes) {
  const RecordCodec codec(kCodecNs, secured("secret number one!", true));
  const KvRecord r = codec_record(6, 256);
  const std::string a = codec.encode(r), b = codec.encode(r);
  EXPECT_NE(a, b) << "a fresh nonce per record";
  for (size_t i = 0; i + 4 <= r.tokens.size(); ++i) EXPECT_FALSE(contains(a, &r.tokens[i], 8)) << "tokens " << i;
  EXPECT_FALSE(contains(a, r.payload.data() + 100, 16));
  EXPECT_FALSE(contains(a, &r.hash.value, sizeof(r.hash.value)));
  EXPECT_FALSE(contains(a, &kCodecNs, sizeof(kCodecNs)));
  // The MAC-only format keeps them readable (it authenticates, not hides).
  const RecordCodec mac(kCodecNs, secured("secret number one!", false));
  EXPECT_TRUE(contains(mac.encode(r), r.tokens.data(), 16));
}

}  // namespace
}  // namespace kvlm
