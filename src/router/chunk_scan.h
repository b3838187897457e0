// The relay's fast path over a worker's stream chunk: what it needs of a
// chunk (its choice index, the token ids of its last chunk, whether it
// finishes its choice) read from the JSON text as kvlm serve writes it, and
// the text the client gets (the token-id fields cut out), with no parse and
// no re-serialisation. Anything else — another layout, an error, a usage
// chunk, a choice with a repeated key (a JSON parser keeps the last, a scan
// the first) — is left to the JSON path (scan_chunk returns nullopt).
//
// Why the text can be searched: a key is a quoted name followed by a colon,
// and inside a JSON string every quote is escaped, so `"name":` never occurs
// inside a string. kvlm serve puts a choice's `prompt_token_ids` and
// `token_ids` last (routes_stream.cpp), so they end the chunk before `}]}`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvlm::router {

struct ScannedChunk {
  size_t index = 0;                      // the choice's index in the worker's stream
  bool has_ids = false;                  // the event's last chunk: token_ids present
  std::vector<int32_t> ids;              // token_ids
  std::optional<std::vector<int32_t>> prompt_ids;
  bool finished = false;                 // its finish_reason is set
  std::string without_ids;               // the chunk without prompt_token_ids and token_ids
};

std::optional<ScannedChunk> scan_chunk(std::string_view data);

}  // namespace kvlm::router
