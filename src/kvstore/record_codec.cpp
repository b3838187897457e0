#include "kvstore/record_codec.h"

#include <cstring>
#include <memory>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "common/assert.h"

namespace kvlm {
namespace {

constexpr size_t kMacBytes = 32;
constexpr size_t kSealHeaderBytes = 48, kNonceBytes = 32, kTagBytes = 16;
constexpr size_t kOffNonce = 8, kOffSealedLen = 40;

std::span<const std::byte> bytes_of(const void* p, size_t n) {
  return std::span(static_cast<const std::byte*>(p), n);
}

// The first 128 bits of HMAC-SHA-256(key, label || a || b).
Hash128 keyed_hash(const TierKey& key, std::string_view label, const Hash128& a, const Hash128& b) {
  std::string in(label);
  for (uint64_t w : {a.lo, a.hi, b.lo, b.hi}) in.append(reinterpret_cast<const char*>(&w), sizeof(w));
  const Sha256 mac = hmac_sha256(key, bytes_of(in.data(), in.size()));
  Hash128 out;
  std::memcpy(&out.lo, mac.data(), 8);
  std::memcpy(&out.hi, mac.data() + 8, 8);
  return out;
}

// The key of the record whose nonce is `nonce` (see the header).
Sha256 record_key(const TierKey& seal, const unsigned char* nonce) {
  return hmac_sha256(seal, bytes_of(nonce, kNonceBytes));
}

struct CipherCtxFree {
  void operator()(EVP_CIPHER_CTX* c) const { EVP_CIPHER_CTX_free(c); }
};
using CipherCtx = std::unique_ptr<EVP_CIPHER_CTX, CipherCtxFree>;

// AES-256-GCM over `data` in place, with `aad`; encrypt writes `tag`, decrypt
// checks it. False when OpenSSL fails or (decrypt) the tag does not verify.
bool gcm(bool encrypt, const Sha256& key, std::span<const unsigned char> aad, unsigned char* data, size_t n,
         unsigned char* tag) {
  static const unsigned char kZeroIv[12] = {};  // each key seals one record
  CipherCtx c(EVP_CIPHER_CTX_new());
  int len = 0;
  bool ok = c && EVP_CipherInit_ex(c.get(), EVP_aes_256_gcm(), nullptr, key.data(), kZeroIv, encrypt ? 1 : 0) == 1 &&
            EVP_CipherUpdate(c.get(), nullptr, &len, aad.data(), static_cast<int>(aad.size())) == 1;
  // Lengths are bounded by the record limits (about 1 GiB), which fit an int.
  ok = ok && EVP_CipherUpdate(c.get(), data, &len, data, static_cast<int>(n)) == 1;
  if (ok && !encrypt) ok = EVP_CIPHER_CTX_ctrl(c.get(), EVP_CTRL_GCM_SET_TAG, kTagBytes, tag) == 1;
  ok = ok && EVP_CipherFinal_ex(c.get(), data + n, &len) == 1;
  if (ok && encrypt) ok = EVP_CIPHER_CTX_ctrl(c.get(), EVP_CTRL_GCM_GET_TAG, kTagBytes, tag) == 1;
  return ok;
}

template <typename T>
T read_le(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

}  // namespace

RecordCodec::RecordCodec(const Hash128& ns, TierSecurity security)
    : ns_(ns), security_(std::move(security)), tier_id_(ns) {
  KVLM_ASSERT(!security_.encrypt || security_.keys, "--kv-encrypt needs a tier secret");
  if (security_.keys) tier_id_ = keyed_hash(security_.keys->names, "kvlm namespace", ns, Hash128{});
}

uint16_t RecordCodec::version() const {
  if (!security_.keys) return kRecordVersion;
  return security_.encrypt ? kRecordVersionSealed : kRecordVersionMac;
}

Hash128 RecordCodec::name(const BlockHash& h) const {
  if (!security_.keys) return h.value;
  return keyed_hash(security_.keys->names, "kvlm block", tier_id_, h.value);
}

size_t RecordCodec::encoded_bytes(size_t num_tokens, size_t num_payload_bytes) const {
  switch (version()) {
    case kRecordVersion: return encoded_record_bytes(num_tokens, num_payload_bytes);
    case kRecordVersionMac: return encoded_record_body_bytes(num_tokens, num_payload_bytes) + kMacBytes;
    default: return kSealHeaderBytes + encoded_record_body_bytes(num_tokens, num_payload_bytes) + kTagBytes;
  }
}

size_t RecordCodec::max_accepted_bytes(size_t num_tokens, size_t num_payload_bytes) const {
  if (!security_.keys) return encoded_record_bytes(num_tokens, num_payload_bytes);
  const size_t body = encoded_record_body_bytes(num_tokens, num_payload_bytes);
  return std::max(body + kMacBytes, kSealHeaderBytes + body + kTagBytes);
}

std::string RecordCodec::encode(const KvRecord& r) const {
  if (!security_.keys) return encode_record(ns_, r);
  if (security_.encrypt) return seal(r);
  std::string out = encode_record_body(ns_, r, 0, kMacBytes);
  const size_t body = out.size() - kMacBytes;
  const Sha256 mac = hmac_sha256(security_.keys->mac, bytes_of(out.data(), body));
  std::memcpy(out.data() + body, mac.data(), kMacBytes);
  return out;
}

std::string RecordCodec::seal(const KvRecord& r) const {
  std::string out = encode_record_body(ns_, r, kSealHeaderBytes, kTagBytes);
  const uint64_t body = out.size() - kSealHeaderBytes - kTagBytes;
  auto* u = reinterpret_cast<unsigned char*>(out.data());
  std::memcpy(u, &kRecordMagic, 4);
  std::memcpy(u + 4, &kRecordVersionSealed, 2);
  KVLM_ASSERT(RAND_bytes(u + kOffNonce, kNonceBytes) == 1, "no random bytes from OpenSSL for a record nonce");
  std::memcpy(u + kOffSealedLen, &body, sizeof(body));
  const bool ok = gcm(true, record_key(security_.keys->seal, u + kOffNonce), std::span(u, kSealHeaderBytes),
                      u + kSealHeaderBytes, body, u + kSealHeaderBytes + body);
  KVLM_ASSERT(ok, "AES-256-GCM failed (OpenSSL)");
  return out;
}

RecordStatus RecordCodec::decode(std::span<const std::byte> bytes, const BlockHash& expected, KvRecord* out) const {
  return open(bytes, ns_, expected, out, nullptr);
}

RecordStatus RecordCodec::verify_any(std::span<const std::byte> bytes, RecordHeader* header) const {
  if (bytes.size() >= 6 && read_le<uint16_t>(bytes.data() + 4) == kRecordVersion)
    return decode_record(bytes, std::nullopt, std::nullopt, nullptr, header);
  return open(bytes, std::nullopt, std::nullopt, nullptr, header);
}

RecordStatus RecordCodec::open(std::span<const std::byte> bytes, std::optional<Hash128> ns,
                               std::optional<BlockHash> expected, KvRecord* out, RecordHeader* header) const {
  if (!security_.keys) return decode_record(bytes, ns, expected, out, header);
  if (bytes.size() < 8 || read_le<uint32_t>(bytes.data()) != kRecordMagic) return RecordStatus::kBadMagic;
  switch (read_le<uint16_t>(bytes.data() + 4)) {
    case kRecordVersion: return RecordStatus::kUnauthenticated;
    case kRecordVersionMac: return open_mac(bytes, ns, expected, out, header);
    case kRecordVersionSealed: return open_sealed(bytes, ns, expected, out, header);
    default: return RecordStatus::kBadVersion;
  }
}

RecordStatus RecordCodec::open_mac(std::span<const std::byte> bytes, std::optional<Hash128> ns,
                                   std::optional<BlockHash> expected, KvRecord* out, RecordHeader* header) const {
  if (bytes.size() < kRecordBodyHeaderBytes + kMacBytes) return RecordStatus::kTruncated;
  const size_t body = bytes.size() - kMacBytes;
  const Sha256 mac = hmac_sha256(security_.keys->mac, bytes.subspan(0, body));
  // Nothing of the record is read before its MAC verifies.
  if (CRYPTO_memcmp(mac.data(), bytes.data() + body, kMacBytes) != 0) return RecordStatus::kBadMac;
  return decode_record_body(bytes.subspan(0, body), ns, expected, out, header);
}

RecordStatus RecordCodec::open_sealed(std::span<const std::byte> bytes, std::optional<Hash128> ns,
                                      std::optional<BlockHash> expected, KvRecord* out, RecordHeader* header) const {
  if (bytes.size() < kSealHeaderBytes + kRecordBodyHeaderBytes + kTagBytes) return RecordStatus::kTruncated;
  const uint64_t body = read_le<uint64_t>(bytes.data() + kOffSealedLen);
  if (read_le<uint16_t>(bytes.data() + 6) != 0) return RecordStatus::kBadFlags;
  if (body != bytes.size() - kSealHeaderBytes - kTagBytes) return RecordStatus::kBadLength;
  std::string plain(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  auto* u = reinterpret_cast<unsigned char*>(plain.data());
  if (!gcm(false, record_key(security_.keys->seal, u + kOffNonce), std::span(u, kSealHeaderBytes),
           u + kSealHeaderBytes, body, u + kSealHeaderBytes + body))
    return RecordStatus::kBadMac;
  return decode_record_body(std::as_bytes(std::span(plain)).subspan(kSealHeaderBytes, body), ns, expected, out,
                            header);
}

RecordStatus RecordCodec::peek_format(std::span<const std::byte> first, uint64_t total_size, uint16_t* version,
                                      RecordHeader* header) {
  if (first.size() < 8 || read_le<uint32_t>(first.data()) != kRecordMagic) return RecordStatus::kBadMagic;
  *version = read_le<uint16_t>(first.data() + 4);
  switch (*version) {
    case kRecordVersion: return peek_record_header(first, total_size, header);
    case kRecordVersionMac:
      if (total_size < kMacBytes) return RecordStatus::kTruncated;
      return peek_record_body(first, total_size - kMacBytes, header);
    case kRecordVersionSealed: {
      if (first.size() < kSealHeaderBytes || total_size < kSealHeaderBytes + kRecordBodyHeaderBytes + kTagBytes)
        return RecordStatus::kTruncated;
      if (read_le<uint16_t>(first.data() + 6) != 0) return RecordStatus::kBadFlags;
      const uint64_t body = read_le<uint64_t>(first.data() + kOffSealedLen);
      return body == total_size - kSealHeaderBytes - kTagBytes ? RecordStatus::kOk : RecordStatus::kBadLength;
    }
    default: return RecordStatus::kBadVersion;
  }
}

RecordStatus RecordCodec::peek(std::span<const std::byte> first, uint64_t total_size, const Hash128& name) const {
  uint16_t version = 0;
  RecordHeader h;
  const RecordStatus s = peek_format(first, total_size, &version, &h);
  if (s != RecordStatus::kOk) return s;
  if (version != kRecordVersion && !security_.keys) return RecordStatus::kBadVersion;
  if (version == kRecordVersion && security_.keys) return RecordStatus::kUnauthenticated;
  if (version == kRecordVersionSealed) return RecordStatus::kOk;  // the tag is checked at load
  if (h.ns != ns_) return RecordStatus::kWrongNamespace;
  return this->name(h.hash) == name ? RecordStatus::kOk : RecordStatus::kWrongHash;
}

}  // namespace kvlm
