// libFuzzer target: a worker's SSE stream as kvlm router reads it. The bytes
// are cut into reads at points the input picks (its first byte seeds them),
// fed to SseReader, and every event goes through scan_chunk. Any input must
// give events and chunks, never a crash or a sanitizer report; and where the
// fast scan reads a chunk, a JSON parse of the same text must agree on its
// index and token ids (a differential check of the relay's fast path).
//
//   scripts/fuzz.sh 60 (FUZZ_TARGETS=router_stream)
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <nlohmann/json.hpp>

#include "router/chunk_scan.h"
#include "router/sse.h"

namespace {

void check_against_json(std::string_view data, const kvlm::router::ScannedChunk& s) {
  const auto j = nlohmann::ordered_json::parse(data, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("choices") || !j["choices"].is_array() || j["choices"].empty())
    return;  // not JSON: the relay forwards it as it came, as before
  const auto& c = j["choices"][0];
  if (!c.is_object() || !c.contains("index") || !c["index"].is_number_unsigned()) return;
  if (c["index"].get<size_t>() != s.index) std::abort();
  if (c.contains("token_ids") && c["token_ids"].is_array() && s.has_ids) {
    std::vector<int32_t> ids;
    for (const auto& t : c["token_ids"]) {
      if (!t.is_number_integer()) return;
      ids.push_back(t.get<int32_t>());
    }
    if (ids != s.ids) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t step = 1 + data[0] % 64;
  kvlm::router::SseReader reader;
  for (size_t i = 0; i < bytes.size(); i += step) {
    for (const auto& ev : reader.feed(bytes.substr(i, step))) {
      if (ev.comment) continue;
      if (auto s = kvlm::router::scan_chunk(ev.data)) check_against_json(ev.data, *s);
    }
  }
  return 0;
}
