#include "kvstore/record.h"

#include <cstring>

#include <fmt/format.h>
#include <xxhash.h>

#include "common/assert.h"

namespace kvlm {
namespace {

// Fixed-width little-endian fields. kvlm builds only for little-endian hosts
// (x86-64, aarch64), so a memcpy is the encoding; the helpers keep the offsets
// in one place.
template <typename T>
void put(std::string& out, size_t offset, T v) {
  std::memcpy(out.data() + offset, &v, sizeof(v));
}
template <typename T>
T get(const std::byte* p, size_t offset) {
  T v;
  std::memcpy(&v, p + offset, sizeof(v));
  return v;
}
void put_hash(std::string& out, size_t offset, const Hash128& h) {
  put(out, offset, h.lo);
  put(out, offset + 8, h.hi);
}
Hash128 get_hash(const std::byte* p, size_t offset) {
  return Hash128{get<uint64_t>(p, offset), get<uint64_t>(p, offset + 8)};
}

constexpr size_t kOffVersion = 4, kOffFlags = 6, kOffNs = 8, kOffHash = 24, kOffParent = 40,
                 kOffNumTokens = 56, kOffReserved = 60, kOffPayloadLen = 64, kOffSalt = 72;
constexpr uint16_t kFlagHasParent = 1;

// What tells format 1 from a format 2/3 body: its version, header size and
// the bytes after the payload.
struct Layout {
  uint16_t version;
  size_t header_bytes;
  size_t trailer_bytes;
};
constexpr Layout kFormat1{kRecordVersion, kRecordHeaderBytes, kRecordChecksumBytes};
constexpr Layout kBody{kRecordVersionMac, kRecordBodyHeaderBytes, 0};

size_t layout_bytes(const Layout& l, uint64_t num_tokens, uint64_t num_payload_bytes) {
  return l.header_bytes + num_tokens * sizeof(int32_t) + num_payload_bytes + l.trailer_bytes;
}

// The header (first l.header_bytes of `p`) of a record that is `total_size`
// bytes long: every field checked before a length is trusted.
RecordStatus parse_header(std::span<const std::byte> first, uint64_t total_size, const Layout& l,
                          RecordHeader* header) {
  const std::byte* p = first.data();
  if (first.size() < l.header_bytes || total_size < l.header_bytes + l.trailer_bytes) return RecordStatus::kTruncated;
  if (get<uint32_t>(p, 0) != kRecordMagic) return RecordStatus::kBadMagic;
  if (get<uint16_t>(p, kOffVersion) != l.version) return RecordStatus::kBadVersion;
  const uint16_t flags = get<uint16_t>(p, kOffFlags);
  if ((flags & ~kFlagHasParent) != 0 || get<uint32_t>(p, kOffReserved) != 0) return RecordStatus::kBadFlags;
  const bool has_parent = (flags & kFlagHasParent) != 0;
  const Hash128 parent = get_hash(p, kOffParent);
  // The parent field of a first block must be zero: every byte has one meaning.
  if (!has_parent && parent != Hash128{}) return RecordStatus::kBadFlags;
  const uint32_t num_tokens = get<uint32_t>(p, kOffNumTokens);
  const uint64_t payload_len = get<uint64_t>(p, kOffPayloadLen);
  if (num_tokens > kRecordMaxTokens || payload_len > kRecordMaxPayloadBytes) return RecordStatus::kTooLarge;
  // Both lengths are bounded above, so this sum cannot overflow.
  const size_t total = layout_bytes(l, num_tokens, payload_len);
  if (total_size < total) return RecordStatus::kTruncated;
  if (total_size > total) return RecordStatus::kBadLength;
  header->ns = get_hash(p, kOffNs);
  header->hash = BlockHash{get_hash(p, kOffHash)};
  header->parent = has_parent ? std::optional<BlockHash>(BlockHash{parent}) : std::nullopt;
  header->num_tokens = num_tokens;
  header->payload_bytes = payload_len;
  header->salt = l.header_bytes > kOffSalt ? get<uint64_t>(p, kOffSalt) : 0;
  return RecordStatus::kOk;
}

// Writes header, tokens and payload of `r` at `at` in `out` (sized by the caller).
void put_record(std::string& out, size_t at, const Layout& l, const Hash128& ns, const KvRecord& r) {
  KVLM_ASSERT(r.tokens.size() <= kRecordMaxTokens && r.payload.size() <= kRecordMaxPayloadBytes,
              "record past the format's limits");
  put(out, at, kRecordMagic);
  put(out, at + kOffVersion, l.version);
  put(out, at + kOffFlags, static_cast<uint16_t>(r.parent ? kFlagHasParent : 0));
  put_hash(out, at + kOffNs, ns);
  put_hash(out, at + kOffHash, r.hash.value);
  put_hash(out, at + kOffParent, r.parent ? r.parent->value : Hash128{});
  put(out, at + kOffNumTokens, static_cast<uint32_t>(r.tokens.size()));
  put(out, at + kOffReserved, uint32_t{0});
  put(out, at + kOffPayloadLen, static_cast<uint64_t>(r.payload.size()));
  if (l.header_bytes > kOffSalt) put(out, at + kOffSalt, r.salt);
  at += l.header_bytes;
  if (!r.tokens.empty()) std::memcpy(out.data() + at, r.tokens.data(), r.tokens.size() * sizeof(int32_t));
  at += r.tokens.size() * sizeof(int32_t);
  if (!r.payload.empty()) std::memcpy(out.data() + at, r.payload.data(), r.payload.size());
}

// The tokens and payload after a parsed header, into `out`.
void take_record(const std::byte* p, const Layout& l, const RecordHeader& h, KvRecord* out) {
  out->hash = h.hash;
  out->parent = h.parent;
  out->salt = h.salt;
  out->tokens.resize(h.num_tokens);
  if (h.num_tokens > 0) std::memcpy(out->tokens.data(), p + l.header_bytes, h.num_tokens * sizeof(int32_t));
  const std::byte* payload = p + l.header_bytes + h.num_tokens * sizeof(int32_t);
  out->payload.assign(payload, payload + h.payload_bytes);
}

}  // namespace

std::string_view record_status_name(RecordStatus s) {
  switch (s) {
    case RecordStatus::kOk: return "ok";
    case RecordStatus::kTruncated: return "truncated";
    case RecordStatus::kBadMagic: return "bad magic";
    case RecordStatus::kBadVersion: return "unknown format version";
    case RecordStatus::kBadFlags: return "bad flags";
    case RecordStatus::kTooLarge: return "lengths past the limits";
    case RecordStatus::kBadLength: return "trailing bytes";
    case RecordStatus::kBadChecksum: return "checksum mismatch";
    case RecordStatus::kWrongNamespace: return "another namespace";
    case RecordStatus::kWrongHash: return "another block";
    case RecordStatus::kBadMac: return "MAC does not verify";
    case RecordStatus::kUnauthenticated: return "unauthenticated (written without the tier secret)";
  }
  return "?";
}

size_t encoded_record_bytes(size_t num_tokens, size_t num_payload_bytes) {
  return layout_bytes(kFormat1, num_tokens, num_payload_bytes);
}

size_t encoded_record_body_bytes(size_t num_tokens, size_t num_payload_bytes) {
  return layout_bytes(kBody, num_tokens, num_payload_bytes);
}

std::string encode_record(const Hash128& ns, const KvRecord& r) {
  std::string out(encoded_record_bytes(r.tokens.size(), r.payload.size()), '\0');
  put_record(out, 0, kFormat1, ns, r);
  const size_t body = out.size() - kRecordChecksumBytes;
  put(out, body, static_cast<uint64_t>(XXH3_64bits(out.data(), body)));
  return out;
}

std::string encode_record_body(const Hash128& ns, const KvRecord& r, size_t room_before, size_t room_after) {
  std::string out(room_before + encoded_record_body_bytes(r.tokens.size(), r.payload.size()) + room_after, '\0');
  put_record(out, room_before, kBody, ns, r);
  return out;
}

RecordStatus peek_record_header(std::span<const std::byte> first_bytes, uint64_t total_size,
                                RecordHeader* header) {
  return parse_header(first_bytes, total_size, kFormat1, header);
}

RecordStatus peek_record_body(std::span<const std::byte> first_bytes, uint64_t total_size, RecordHeader* header) {
  return parse_header(first_bytes, total_size, kBody, header);
}

RecordStatus decode_record(std::span<const std::byte> bytes, std::optional<Hash128> expected_ns,
                           std::optional<BlockHash> expected_hash, KvRecord* out, RecordHeader* header) {
  RecordHeader h;
  RecordStatus s = parse_header(bytes, bytes.size(), kFormat1, &h);
  if (s != RecordStatus::kOk) return s;
  const std::byte* p = bytes.data();
  const size_t body = bytes.size() - kRecordChecksumBytes;
  if (get<uint64_t>(p, body) != XXH3_64bits(p, body)) return RecordStatus::kBadChecksum;
  if (expected_ns && h.ns != *expected_ns) return RecordStatus::kWrongNamespace;
  if (expected_hash && h.hash != *expected_hash) return RecordStatus::kWrongHash;
  if (out != nullptr) take_record(p, kFormat1, h, out);
  if (header != nullptr) *header = h;
  return RecordStatus::kOk;
}

RecordStatus decode_record_body(std::span<const std::byte> body, std::optional<Hash128> expected_ns,
                                std::optional<BlockHash> expected_hash, KvRecord* out, RecordHeader* header) {
  RecordHeader h;
  RecordStatus s = parse_header(body, body.size(), kBody, &h);
  if (s != RecordStatus::kOk) return s;
  if (expected_ns && h.ns != *expected_ns) return RecordStatus::kWrongNamespace;
  if (expected_hash && h.hash != *expected_hash) return RecordStatus::kWrongHash;
  if (out != nullptr) take_record(body.data(), kBody, h, out);
  if (header != nullptr) *header = h;
  return RecordStatus::kOk;
}

std::string hash_hex(const Hash128& h) { return fmt::format("{:016x}{:016x}", h.hi, h.lo); }

std::optional<Hash128> parse_hash_hex(std::string_view hex) {
  if (hex.size() != 32) return std::nullopt;
  uint64_t words[2] = {0, 0};
  for (size_t i = 0; i < 32; ++i) {
    const char c = hex[i];
    uint64_t d;
    if (c >= '0' && c <= '9') d = static_cast<uint64_t>(c - '0');
    else if (c >= 'a' && c <= 'f') d = static_cast<uint64_t>(c - 'a' + 10);
    else return std::nullopt;
    words[i / 16] = (words[i / 16] << 4) | d;
  }
  return Hash128{words[1], words[0]};
}

}  // namespace kvlm
