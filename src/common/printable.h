// Text from a file or a peer, made safe to put in an error message: printable
// ASCII stays, every other byte (NUL, control characters, bytes >= 0x80)
// becomes \xNN, and the result is cut at `max_bytes` of input with "...".
// Messages built this way print whole through C stdio (no embedded NUL),
// are valid UTF-8 for JSON, and cannot forge terminal escapes or log lines.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kvlm {

std::string printable(std::string_view text, size_t max_bytes = 256);

}  // namespace kvlm
