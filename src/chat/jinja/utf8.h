// Python strings index, slice, count and strip by code point; kvlm keeps
// strings as UTF-8 bytes. These helpers convert between the two. Invalid
// bytes decode to U+DC80+byte (Python's "surrogateescape"), so a decode /
// encode round trip returns the original bytes even for broken input.
#pragma once

#include <string>
#include <string_view>

namespace kvlm::jinja {

std::u32string decode_utf8(std::string_view s);
std::string encode_utf8(std::u32string_view s);
void append_utf8(std::string& out, char32_t c);
bool is_ascii(std::string_view s);
size_t utf8_length(std::string_view s);  // in code points

// Python's str.isspace() (Unicode White_Space plus the ASCII separators).
bool is_py_space(char32_t c);
// Letters as Python's str.isalpha() sees them, approximated: ASCII and
// Latin-1 letters, and any code point from U+0100 up that is not whitespace
// or punctuation in the general, CJK and full-width punctuation blocks.
bool is_py_alpha(char32_t c);
bool is_py_digit(char32_t c);  // ASCII digits and full-width digits
// Simple case mapping for ASCII, Latin-1, Greek and Cyrillic (the scripts
// whose one-to-one mappings are a few ranges); other code points map to
// themselves. Python's multi-character mappings (e.g. 'ß'.upper() == 'SS')
// are not reproduced.
char32_t to_upper(char32_t c);
char32_t to_lower(char32_t c);
bool is_upper(char32_t c);  // a cased letter that is upper case
bool is_lower(char32_t c);

}  // namespace kvlm::jinja
