#include "kvstore/slot_file.h"

#include <algorithm>
#include <cstring>
#include <span>

#include <fmt/format.h>
#include <xxhash.h>

#include "common/assert.h"
#include "common/error.h"
#include "kv/block_hash.h"

namespace kvlm {
namespace {

constexpr size_t kOffVersion = 4, kOffFlags = 6, kOffNs = 8, kOffBlockSize = 24, kOffNumTokens = 28,
                 kOffNumRecords = 32, kOffReserved = 36, kOffExtraKey = 40;
constexpr size_t kChecksumBytes = 8;
constexpr size_t kLengthBytes = 8;

// Fixed-width little-endian fields (kvlm builds for little-endian hosts only,
// as record.cpp says), appended or read at an offset.
template <typename T>
void append(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(v));
}
template <typename T>
T get(std::string_view bytes, size_t offset) {
  T v;
  std::memcpy(&v, bytes.data() + offset, sizeof(v));
  return v;
}

[[noreturn]] void refuse(std::string_view why) {
  throw_error(ErrorCode::kInvalidArgument, "slot file: {}", why);
}

// The header's counts, checked against the bytes that follow them.
struct Header {
  int32_t block_size = 0;
  uint32_t num_tokens = 0;
  uint32_t num_records = 0;
  uint64_t extra_key = 0;
};

Header read_header(std::string_view bytes, const Hash128& expected_ns) {
  if (get<uint32_t>(bytes, 0) != kSlotFileMagic) refuse("not a kvlm slot file (bad magic)");
  const uint16_t version = get<uint16_t>(bytes, kOffVersion);
  if (version != kSlotFileVersion)
    refuse(fmt::format("format version {}; this server reads version {}", version, kSlotFileVersion));
  if (get<uint16_t>(bytes, kOffFlags) != 0 || get<uint32_t>(bytes, kOffReserved) != 0) refuse("unknown flags");
  const Hash128 ns{get<uint64_t>(bytes, kOffNs), get<uint64_t>(bytes, kOffNs + 8)};
  if (ns != expected_ns)
    refuse("saved by a server of another model, KV type (--kv-type) or block size (--block-size); it cannot be "
           "restored here");
  Header h;
  h.block_size = get<int32_t>(bytes, kOffBlockSize);
  h.num_tokens = get<uint32_t>(bytes, kOffNumTokens);
  h.num_records = get<uint32_t>(bytes, kOffNumRecords);
  h.extra_key = get<uint64_t>(bytes, kOffExtraKey);
  if (h.block_size < 1 || h.num_tokens > kSlotFileMaxTokens) refuse("lengths past the limits");
  if (h.num_records > h.num_tokens / static_cast<uint32_t>(h.block_size))
    refuse("more KV blocks than its tokens fill");
  return h;
}

// Record i at `at`: its length, then a record that is exactly block i of
// the tokens' chain (`hash`, `tokens`). Advances `at` past it.
KvRecord read_record(std::string_view bytes, size_t& at, size_t i, const Hash128& ns, const BlockHash& hash,
                     std::span<const int32_t> tokens, uint64_t extra_key) {
  if (bytes.size() - at < kLengthBytes) refuse("truncated");
  const uint64_t length = get<uint64_t>(bytes, at);
  at += kLengthBytes;
  if (length > bytes.size() - at) refuse("truncated");
  KvRecord r;
  const RecordStatus s = decode_record(bytes.substr(at, length), ns, hash, &r);
  if (s != RecordStatus::kOk) refuse(fmt::format("KV block {}: {}", i, record_status_name(s)));
  if (!std::equal(r.tokens.begin(), r.tokens.end(), tokens.begin(), tokens.end()))
    refuse(fmt::format("KV block {} holds other tokens than the file's", i));
  r.salt = extra_key;
  at += length;
  return r;
}

}  // namespace

std::string encode_slot_file(const Hash128& ns, const SlotFile& file) {
  KVLM_ASSERT(file.tokens.size() <= kSlotFileMaxTokens && file.block_size > 0, "slot file past its limits");
  KVLM_ASSERT(file.records.size() <= file.tokens.size() / static_cast<size_t>(file.block_size),
              "more records than full blocks");
  std::string out;
  append(out, kSlotFileMagic);
  append(out, kSlotFileVersion);
  append(out, uint16_t{0});
  append(out, ns.lo);
  append(out, ns.hi);
  append(out, file.block_size);
  append(out, static_cast<uint32_t>(file.tokens.size()));
  append(out, static_cast<uint32_t>(file.records.size()));
  append(out, uint32_t{0});
  append(out, file.extra_key);
  if (!file.tokens.empty())
    out.append(reinterpret_cast<const char*>(file.tokens.data()), file.tokens.size() * sizeof(int32_t));
  for (const KvRecord& r : file.records) {
    const std::string record = encode_record(ns, r);
    append(out, static_cast<uint64_t>(record.size()));
    out += record;
  }
  append(out, static_cast<uint64_t>(XXH3_64bits(out.data(), out.size())));
  return out;
}

SlotFile decode_slot_file(std::string_view bytes, const Hash128& expected_ns) {
  if (bytes.size() < kSlotFileHeaderBytes + kChecksumBytes) refuse("truncated");
  const size_t body = bytes.size() - kChecksumBytes;
  // The checksum first: a flipped byte anywhere reads as corruption, not as
  // whatever the field it landed in would then say.
  if (get<uint64_t>(bytes, body) != XXH3_64bits(bytes.data(), body))
    refuse("checksum mismatch (the file is corrupt or truncated)");
  const std::string_view content = bytes.substr(0, body);
  const Header h = read_header(content, expected_ns);
  SlotFile file;
  file.block_size = h.block_size;
  file.extra_key = h.extra_key;
  const size_t tokens_bytes = size_t{h.num_tokens} * sizeof(int32_t);
  if (content.size() - kSlotFileHeaderBytes < tokens_bytes) refuse("truncated");
  file.tokens.resize(h.num_tokens);
  if (tokens_bytes > 0)  // an empty vector's data() may be null, which memcpy must not get
    std::memcpy(file.tokens.data(), content.data() + kSlotFileHeaderBytes, tokens_bytes);
  size_t at = kSlotFileHeaderBytes + tokens_bytes;
  const std::span<const int32_t> tokens(file.tokens);
  const std::vector<BlockHash> hashes =
      hash_full_blocks(tokens.first(size_t{h.num_records} * h.block_size), h.block_size, h.extra_key);
  for (size_t i = 0; i < h.num_records; ++i)
    file.records.push_back(read_record(content, at, i, expected_ns, hashes[i],
                                       tokens.subspan(i * h.block_size, h.block_size), h.extra_key));
  if (at != content.size()) refuse("trailing bytes after its last KV block");
  return file;
}

}  // namespace kvlm
