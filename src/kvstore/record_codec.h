// How a tier writes and reads its records, and the names it stores them
// under (docs/kv-tiers.md "Threat model"). One codec per namespace and tier
// secret; immutable, so the I/O thread, tools and tests may share a copy.
//
//   no secret       format 1 (record.h): an XXH3 checksum anyone can
//                   recompute; names are the block hashes themselves.
//   --kv-secret-file  format 2: the format-2 body (record.h) and an
//                   HMAC-SHA-256 under the mac key over every byte of it
//                   (namespace, block hash, parent, salt, tokens, payload).
//   --kv-encrypt    format 3: the same body sealed with AES-256-GCM:
//        0   4  magic "KVLR"
//        4   2  version 3
//        6   2  flags (0)
//        8  32  nonce (random per record)
//       40   8  sealed length L (the body's length)
//       48   L  the body, encrypted
//     48+L  16  GCM tag over the first 48 bytes (associated data) and L
//                   The key of each record is HMAC-SHA-256(seal key, nonce):
//                   a fresh key per record, so the 96-bit GCM nonce (fixed)
//                   never repeats under one key however many records a fleet
//                   writes, where random 96-bit nonces under one key would
//                   near their collision bound after about 2^32 records.
//
// With a secret, a reader accepts formats 2 and 3 (servers that share a
// secret share records whether or not they encrypt) and refuses format 1.
// Names: HMAC-SHA-256 of the namespace and of each block hash under the
// names key (truncated to 128 bits), so without the secret nobody can tell
// which key holds a prompt's block, or compute where a lookup will look.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "kvstore/record.h"
#include "kvstore/tier_secret.h"

namespace kvlm {

class RecordCodec {
 public:
  // Bytes a disk scan reads from the start of a file for peek().
  static constexpr size_t kPeekBytes = kRecordBodyHeaderBytes;

  explicit RecordCodec(const Hash128& ns, TierSecurity security = {});

  const Hash128& ns() const { return ns_; }
  bool authenticated() const { return security_.authenticated(); }
  bool encrypted() const { return security_.encrypt; }
  // The format this codec writes (1, 2 or 3).
  uint16_t version() const;
  // The namespace as stored (Redis key prefix, disk directory): ns itself
  // without a secret, else a keyed hash of it, so servers with different
  // secrets never share a key or a directory.
  const Hash128& tier_id() const { return tier_id_; }
  // The name block `h` is stored under: h without a secret, else keyed.
  Hash128 name(const BlockHash& h) const;

  std::string encode(const KvRecord& r) const;
  size_t encoded_bytes(size_t num_tokens, size_t num_payload_bytes) const;
  // The largest record this codec accepts for blocks of these sizes: a tier
  // reply longer than this is refused before it is read.
  size_t max_accepted_bytes(size_t num_tokens, size_t num_payload_bytes) const;
  // Verifies first (checksum, or MAC or tag), then checks structure,
  // lengths, namespace and that it is block `expected`. On kOk `out` (if
  // given) holds the record; on any other status it is not touched.
  RecordStatus decode(std::span<const std::byte> bytes, const BlockHash& expected, KvRecord* out) const;
  RecordStatus decode(std::string_view bytes, const BlockHash& expected, KvRecord* out) const {
    return decode(std::as_bytes(std::span(bytes.data(), bytes.size())), expected, out);
  }
  // For disk scans, from a file's first kPeekBytes (fewer if it is shorter)
  // and its size: whether it can be a record of this codec stored under
  // `name` (format, lengths; namespace and hash where the format shows them).
  // The MAC or tag is checked when the record is loaded.
  RecordStatus peek(std::span<const std::byte> first_bytes, uint64_t total_size, const Hash128& name) const;

  // For disk inventories (`kvlm kv verify`): verifies a record of any
  // namespace and block (format 1 by its checksum; 2 and 3 by MAC or tag,
  // with keys) and gives its header; the caller checks where it lies.
  RecordStatus verify_any(std::span<const std::byte> bytes, RecordHeader* header) const;
  // The format of a record (1, 2 or 3) from its first bytes and size, with
  // its structure checked as far as they show it; `header` is filled for
  // formats 1 and 2 (format 3 hides it). For `kvlm kv stat`.
  static RecordStatus peek_format(std::span<const std::byte> first_bytes, uint64_t total_size, uint16_t* version,
                                  RecordHeader* header);

 private:
  std::string seal(const KvRecord& r) const;
  RecordStatus open(std::span<const std::byte> bytes, std::optional<Hash128> ns, std::optional<BlockHash> expected,
                    KvRecord* out, RecordHeader* header) const;
  RecordStatus open_mac(std::span<const std::byte> bytes, std::optional<Hash128> ns,
                        std::optional<BlockHash> expected, KvRecord* out, RecordHeader* header) const;
  RecordStatus open_sealed(std::span<const std::byte> bytes, std::optional<Hash128> ns,
                           std::optional<BlockHash> expected, KvRecord* out, RecordHeader* header) const;

  Hash128 ns_;
  TierSecurity security_;
  Hash128 tier_id_;
};

}  // namespace kvlm
