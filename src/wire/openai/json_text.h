// JSON text in and out of the server: the only places request bytes become a
// Json value and a Json value becomes response bytes, so the two limits that
// keep hostile input from killing the process live in one spot.
//
//  - parse_json: nesting deeper than kMaxJsonDepth is refused *while parsing*
//    (each container as it opens), so a body nested a million levels deep
//    never becomes a value whose copy or destruction recurses that deep.
//    Numbers beyond the double range, syntax errors and too-deep nesting all
//    throw Error(kInvalidArgument) with a message a client can act on. Time
//    is linear in the text, however many members an object has (nlohmann's
//    own parser is quadratic in them for ordered_json).
//  - dump_json: invalid UTF-8 in any string (a byte token, a raw path byte)
//    becomes U+FFFD instead of nlohmann's type_error.316, the way OpenAI's
//    API returns bytes it cannot decode.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "wire/openai/protocol.h"

namespace kvlm::openai {

// Far above any real request (OpenAI's own schemas nest under 10 levels) and
// far below what the recursive walks over a value (copy, Jinja conversion)
// can take on a 64 KiB-per-frame worst case.
constexpr int kMaxJsonDepth = 64;

// Throws Error(kInvalidArgument): not JSON, a number out of range, or nesting
// deeper than kMaxJsonDepth (arrays and objects both count).
Json parse_json(std::string_view text);
// parse_json, or a discarded value (is_discarded()) where it throws: for a
// body only peeked into, that another process validates (kvlm router).
Json parse_json_or_discarded(std::string_view text);

// About the most memory parse_json(text) allocates for its value, without
// parsing: the text's bytes twice (strings' characters with their
// allocations), and for each value its slot in a container (16 bytes, up
// to twice that as containers grow by doubling), each object member its
// key and value (48 bytes, doubled too), each array or object its own
// allocation, each string its std::string and allocation header. One pass
// over the text, no allocation: what the server reserves of --body-mem
// before it parses a body, since parsed JSON takes up to 20 times its text.
int64_t parsed_json_bytes(std::string_view text);

// Compact JSON text; every string made valid UTF-8 by replacement. Never throws
// for a value built by the server (only std::bad_alloc).
std::string dump_json(const Json& j);

}  // namespace kvlm::openai
