// libFuzzer target: tier records and the other bytes a tier or a user hands
// kvstore/ (record headers, hash file names, Redis URLs, Redis replies, slot
// files).
// Any input must give a status or a kvlm::Error, never a crash, a sanitizer
// report or a record that decodes after re-encoding differently; the reply
// parser must never hold more than its limits allow.
//
//   scripts/fuzz.sh 60                     (builds and runs every target)
//   build-fuzz/fuzz/kvlm_fuzz_record CORPUS_DIR
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <xxhash.h>

#include "common/error.h"
#include "kvstore/record.h"
#include "kvstore/record_codec.h"
#include "kvstore/redis_cluster.h"
#include "kvstore/resp.h"
#include "kvstore/slot_file.h"

namespace {

using namespace kvlm;

// Formats 2 and 3 under a fixed secret: every input fails the MAC or tag,
// which is what a reader without the writer's secret sees.
void decode_authenticated(std::span<const std::byte> bytes) {
  static const TierKeys keys = derive_tier_keys("the fuzzer's tier secret");
  static const RecordCodec mac(Hash128{1, 2}, TierSecurity{keys, false});
  static const RecordCodec sealed(Hash128{1, 2}, TierSecurity{keys, true});
  KvRecord r;
  RecordHeader h;
  (void)mac.decode(bytes, BlockHash{Hash128{3, 4}}, &r);
  (void)sealed.verify_any(bytes, &h);
  uint16_t version = 0;
  (void)RecordCodec::peek_format(bytes.first(std::min(bytes.size(), RecordCodec::kPeekBytes)), bytes.size(),
                                 &version, &h);
}

// The bytes as a reply stream, fed in pieces of the sizes its first byte picks.
void parse_replies(std::string_view bytes) {
  ReplyLimits limits{.max_bulk_bytes = 4096, .max_elements = 64, .max_total_elements = 256, .max_depth = 4,
                     .max_line_bytes = 512};
  RespParser p(limits);
  const size_t step = bytes.empty() ? 1 : 1 + static_cast<unsigned char>(bytes[0]) % 64;
  RedisReply r;
  for (size_t at = 0; at < bytes.size(); at += step) {
    p.feed(bytes.data() + at, std::min(step, bytes.size() - at));
    auto res = p.next(&r);
    for (; res == RespParser::Result::kReply; res = p.next(&r))
      if (r.str.size() > std::max(limits.max_bulk_bytes, limits.max_line_bytes)) std::abort();
    if (res != RespParser::Result::kNeedMore) return;  // a real link drops the connection here
    // What waits is at most one header line and one string within the limits.
    if (p.num_buffered() > limits.max_line_bytes + limits.max_bulk_bytes + 4 + step) std::abort();
  }
}

// A slot file (slot_file.h) as given, then with the checksum a writer would
// append, so the checks behind the checksum see every input too.
void decode_slot_files(std::string_view bytes) {
  std::string sealed(bytes);
  const uint64_t sum = XXH3_64bits(bytes.data(), bytes.size());
  sealed.append(reinterpret_cast<const char*>(&sum), sizeof(sum));
  for (std::string_view in : {bytes, std::string_view(sealed)}) {
    try {
      (void)decode_slot_file(in, Hash128{1, 2});
    } catch (const Error&) {
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const auto span = std::as_bytes(std::span<const char>(bytes.data(), bytes.size()));
  KvRecord r;
  RecordHeader h;
  if (decode_record(bytes, std::nullopt, std::nullopt, &r, &h) == RecordStatus::kOk) {
    // Whatever decodes re-encodes to the same bytes: one meaning per byte.
    if (encode_record(h.ns, r) != bytes) std::abort();
  }
  RecordHeader peek;
  (void)peek_record_header(span, size, &peek);
  decode_authenticated(span);
  parse_replies(bytes);
  decode_slot_files(bytes);
  (void)parse_hash_hex(bytes);
  (void)redis_key_slot(bytes);
  try {
    (void)parse_redis_url(bytes);
  } catch (const Error&) {
  }
  return 0;
}
