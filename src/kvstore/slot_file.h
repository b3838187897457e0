// A slot file (docs/slots.md, llama.cpp's slot save and restore):
// the token ids a server slot last ran and the KV of their leading full
// blocks, each block a tier record (record.h, format 1), so a file is read
// with the checks every tier record gets.
//
// Layout, little-endian:
//   offset  size  field
//        0     4  magic "KVLS"
//        4     2  format version (kSlotFileVersion)
//        6     2  flags (0)
//        8    16  namespace (kv_namespace.h: model, KV type, block size, KV layout)
//       24     4  block_size
//       28     4  num_tokens
//       32     4  num_records (at most num_tokens / block_size)
//       36     4  reserved (0)
//       40     8  extra_key (the key the blocks were hashed with, kv/block_hash.h)
//       48  4*nt  token ids (int32)
//        …        num_records times: 8 bytes of length, then a record of
//                 namespace `namespace`, block i of the tokens' chain
//        …     8  XXH3-64 of every byte before it
// decode_slot_file() checks the checksum first, then every field and
// length against the file's size before it trusts them, then each record
// against the block the tokens say it is: a truncated, flipped or foreign
// file is an Error, never a crash, an oversized allocation or wrong KV.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/hash.h"
#include "kvstore/record.h"

namespace kvlm {

inline constexpr uint32_t kSlotFileMagic = 0x534C564B;  // "KVLS" read as little-endian bytes
inline constexpr uint16_t kSlotFileVersion = 1;
inline constexpr size_t kSlotFileHeaderBytes = 48;
// Far past any context; bounds what a hostile count may make a reader allocate.
inline constexpr uint32_t kSlotFileMaxTokens = 1u << 24;

struct SlotFile {
  int32_t block_size = 0;
  std::vector<int32_t> tokens;
  uint64_t extra_key = 0;
  // The KV of the first records.size() full blocks of `tokens`, in order
  // (each record's salt is extra_key).
  std::vector<KvRecord> records;
};

// The file's bytes under namespace `ns`. Preconditions: the records are the
// leading blocks of the tokens' chain, within the record format's limits.
std::string encode_slot_file(const Hash128& ns, const SlotFile& file);

// The file in `bytes`, checked completely. Throws Error(kInvalidArgument)
// saying what is wrong: corrupt or truncated, another format version, a
// file of another model, KV type or block size (`expected_ns`), a record
// that is not the block of the tokens it stands for.
SlotFile decode_slot_file(std::string_view bytes, const Hash128& expected_ns);

}  // namespace kvlm
