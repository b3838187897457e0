// A bounded generator of malformed HTTP requests for the server: seeded,
// so a failing case can be replayed from its index.
#pragma once

#include <cstdint>
#include <random>
#include <string>

namespace kvlm::test {

struct HostileRequest {
  std::string bytes;        // the whole request as sent
  bool half_close = false;  // shut the write side after sending (malformed framing)
  std::string kind;         // which family of mutation made it (for failure messages)
};

// Request number `index` of the stream seeded with `seed`.
HostileRequest hostile_request(uint64_t seed, uint64_t index);

// Bytes shown in a failure message: printable ASCII kept, the rest as \xNN,
// cut at 300 bytes.
std::string shown(const std::string& bytes);

}  // namespace kvlm::test
