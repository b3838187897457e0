// The bytes of one KV block as the tiers keep it (docs/ARCHITECTURE.md "Tiers"): a
// self-describing, checked record, so nothing a tier hands back reaches a
// pool block unless it is exactly the block that was asked for.
//
// Format 1 (no tier secret), little-endian:
//   offset  size  field
//        0     4  magic "KVLR"
//        4     2  format version (kRecordVersion)
//        6     2  flags (bit 0: has a parent hash; other bits must be 0)
//        8    16  namespace fingerprint (kv_namespace.h)
//       24    16  block hash (the chained hash, kv/block_hash.h)
//       40    16  parent hash (zero when the block is the first of its chain)
//       56     4  num_tokens
//       60     4  reserved (0)
//       64     8  payload length in bytes
//       72  4*nt  token ids (int32)
//        …     p  payload (the block's K/V bytes, runner/kv_storage.h read_block)
//        …     8  XXH3-64 of every byte before it
// decode_record() checks every field against the exact size of the buffer
// before it trusts a length, so any input (truncated, bit-flipped, hostile)
// gives a status, never a crash or an oversized allocation.
//
// The body of formats 2 and 3 (with a tier secret, record_codec.h) is the
// same header with version 2 and the request's salt after it:
//       72     8  salt (the request's cache_salt key, kv/block_hash.h; 0: none)
//       80  4*nt  token ids, then the payload
// Format 2 follows it with an HMAC-SHA-256 instead of the checksum; format 3
// encrypts it whole. The codec adds and checks those; this file lays out
// the bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/hash.h"
#include "kv/block_hash.h"

namespace kvlm {

inline constexpr uint32_t kRecordMagic = 0x524C564B;  // "KVLR" read as little-endian bytes
inline constexpr uint16_t kRecordVersion = 1;
inline constexpr uint16_t kRecordVersionMac = 2;
inline constexpr uint16_t kRecordVersionSealed = 3;
inline constexpr size_t kRecordHeaderBytes = 72;
inline constexpr size_t kRecordBodyHeaderBytes = 80;  // formats 2 and 3: the header and the salt
inline constexpr size_t kRecordChecksumBytes = 8;
// Bounds a decoder accepts (a block has block_size tokens; 1 GiB of KV per
// block is far past any real model), so a hostile length cannot make it
// allocate or read without limit.
inline constexpr uint32_t kRecordMaxTokens = 1u << 16;
inline constexpr uint64_t kRecordMaxPayloadBytes = 1ull << 30;

// One full KV block: its chained hash, its parent's, its tokens and its bytes.
struct KvRecord {
  BlockHash hash;
  std::optional<BlockHash> parent;  // nullopt for the first block of a chain
  std::vector<int32_t> tokens;      // [block_size]
  std::vector<std::byte> payload;   // [bytes per block] as KvStorage::read_block writes them
  uint64_t salt = 0;                // the request's cache_salt key; kept by formats 2 and 3 only
};

// Why a decode failed. Every reason is a miss for the caller; the store that
// read the bytes counts it and (disk) removes the record.
enum class RecordStatus {
  kOk,
  kTruncated,         // fewer bytes than the header or its lengths say
  kBadMagic,
  kBadVersion,
  kBadFlags,          // unknown flag bits or reserved bytes not zero
  kTooLarge,          // num_tokens or payload length past the limits above
  kBadLength,         // the buffer is longer than the record
  kBadChecksum,
  kWrongNamespace,
  kWrongHash,         // not the block that was asked for
  kBadMac,            // format 2's MAC or format 3's AEAD tag does not verify under this secret
  kUnauthenticated,   // a format 1 record where a tier secret is set: anyone could have written it
};
std::string_view record_status_name(RecordStatus s);

// Encodes `r` under namespace `ns`. Precondition: sizes within the limits.
std::string encode_record(const Hash128& ns, const KvRecord& r);
// Size encode_record's result will have.
size_t encoded_record_bytes(size_t num_tokens, size_t num_payload_bytes);

// Only the header fields, for tools that list records (kvlm kv stat).
struct RecordHeader {
  Hash128 ns;
  BlockHash hash;
  std::optional<BlockHash> parent;
  uint32_t num_tokens = 0;
  uint64_t payload_bytes = 0;
  uint64_t salt = 0;  // formats 2 and 3
};

// Checks `bytes` completely (structure, lengths, checksum) and that it is
// block `expected_hash` of namespace `expected_ns` (either may be nullopt to
// accept any). On kOk, `out` (if given) holds the record and `header` (if
// given) its header; on any other status neither is touched.
RecordStatus decode_record(std::span<const std::byte> bytes, std::optional<Hash128> expected_ns,
                           std::optional<BlockHash> expected_hash, KvRecord* out,
                           RecordHeader* header = nullptr);
inline RecordStatus decode_record(std::string_view bytes, std::optional<Hash128> expected_ns,
                                  std::optional<BlockHash> expected_hash, KvRecord* out,
                                  RecordHeader* header = nullptr) {
  return decode_record(std::as_bytes(std::span<const char>(bytes.data(), bytes.size())), expected_ns,
                       expected_hash, out, header);
}

// Checks only the fixed header (the first kRecordHeaderBytes of a record)
// against the record's total size: magic, version, flags, limits, lengths.
// Lets a scan of many files refuse truncated or foreign ones without reading
// their payloads; the checksum is checked when the record is loaded.
RecordStatus peek_record_header(std::span<const std::byte> first_bytes, uint64_t total_size,
                                RecordHeader* header);

// The body of formats 2 and 3 (layout above), with `room_before` and
// `room_after` zero bytes around it for the codec's header and trailer.
std::string encode_record_body(const Hash128& ns, const KvRecord& r, size_t room_before, size_t room_after);
size_t encoded_record_body_bytes(size_t num_tokens, size_t num_payload_bytes);
// decode_record for a body: structure, lengths (exactly body.size()),
// namespace and hash; no checksum (the codec verified a MAC or tag first).
RecordStatus decode_record_body(std::span<const std::byte> body, std::optional<Hash128> expected_ns,
                                std::optional<BlockHash> expected_hash, KvRecord* out,
                                RecordHeader* header = nullptr);
// peek_record_header for a body of `total_size` bytes.
RecordStatus peek_record_body(std::span<const std::byte> first_bytes, uint64_t total_size, RecordHeader* header);

// 32 lowercase hex digits, hi word first (file names, Redis keys).
std::string hash_hex(const Hash128& h);
std::optional<Hash128> parse_hash_hex(std::string_view hex);

}  // namespace kvlm
