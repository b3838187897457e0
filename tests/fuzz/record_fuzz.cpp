// libFuzzer target: tier records and the other bytes a tier or a user hands
// kvstore/ (record headers, hash file names, Redis URLs). Any input must give
// a status or a kvlm::Error, never a crash, a sanitizer report or a record
// that decodes after re-encoding differently.
//
//   scripts/fuzz.sh 60                     (builds and runs every target)
//   build-fuzz/fuzz/kvlm_fuzz_record CORPUS_DIR
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "common/error.h"
#include "kvstore/record.h"
#include "kvstore/redis_cluster.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvlm;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  KvRecord r;
  RecordHeader h;
  if (decode_record(bytes, std::nullopt, std::nullopt, &r, &h) == RecordStatus::kOk) {
    // Whatever decodes re-encodes to the same bytes: one meaning per byte.
    if (encode_record(h.ns, r) != bytes) std::abort();
  }
  RecordHeader peek;
  (void)peek_record_header(std::as_bytes(std::span<const char>(bytes.data(), bytes.size())), size, &peek);
  (void)parse_hash_hex(bytes);
  (void)redis_key_slot(bytes);
  try {
    (void)parse_redis_url(bytes);
  } catch (const Error&) {
  }
  return 0;
}
