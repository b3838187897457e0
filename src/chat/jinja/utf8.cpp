#include "chat/jinja/utf8.h"

namespace kvlm::jinja {

namespace {

constexpr char32_t kEscapeBase = 0xDC80;  // surrogateescape: byte b <-> U+DC00+b (b >= 0x80)

// Length of a valid sequence starting at s[i], or 0 when the bytes there are
// not well-formed UTF-8 (overlong forms and surrogates included).
size_t valid_sequence(std::string_view s, size_t i, char32_t* out) {
  auto b0 = static_cast<unsigned char>(s[i]);
  size_t n = 0;
  char32_t c = 0;
  if (b0 < 0x80) {
    *out = b0;
    return 1;
  } else if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
    c = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    c = b0 & 0x0F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    c = b0 & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    c = (c << 6) | (b & 0x3F);
  }
  if ((n == 3 && c < 0x800) || (n == 4 && (c < 0x10000 || c > 0x10FFFF))) return 0;
  if (c >= 0xD800 && c <= 0xDFFF) return 0;
  *out = c;
  return n;
}

}  // namespace

std::u32string decode_utf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    char32_t c = 0;
    size_t n = valid_sequence(s, i, &c);
    if (n == 0) {
      out.push_back(kEscapeBase - 0x80 + static_cast<unsigned char>(s[i]));
      ++i;
    } else {
      out.push_back(c);
      i += n;
    }
  }
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  if (c >= kEscapeBase && c <= kEscapeBase + 0x7F) {
    out.push_back(static_cast<char>(c - kEscapeBase + 0x80));
  } else if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string encode_utf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

bool is_ascii(std::string_view s) {
  for (char ch : s) {
    if (static_cast<unsigned char>(ch) >= 0x80) return false;
  }
  return true;
}

size_t utf8_length(std::string_view s) {
  if (is_ascii(s)) return s.size();
  return decode_utf8(s).size();
}

bool is_py_space(char32_t c) {
  if (c <= 0x20) return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F);
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
         c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_py_digit(char32_t c) { return (c >= '0' && c <= '9') || (c >= 0xFF10 && c <= 0xFF19); }

bool is_py_alpha(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  if (c < 0x100) return c == 0xAA || c == 0xB5 || c == 0xBA || (c >= 0xC0 && c != 0xD7 && c != 0xF7);
  if (is_py_space(c)) return false;
  if (c >= 0x2000 && c <= 0x2BFF) return false;  // punctuation, symbols, arrows, box drawing
  if (c >= 0x3000 && c <= 0x303F) return false;  // CJK punctuation
  if (c >= 0xFF00 && c <= 0xFF20) return false;  // full-width punctuation and digits
  if ((c >= 0xFF3B && c <= 0xFF40) || (c >= 0xFF5B && c <= 0xFF65)) return false;
  if (c >= 0x2E00 && c <= 0x2E7F) return false;  // supplemental punctuation
  if (c >= 0xFE00 && c <= 0xFE6F) return false;  // variation selectors, CJK compatibility and small forms
  if (c >= 0x1F000 && c <= 0x1FAFF) return false;  // emoji and pictographs
  if (c >= 0xD800 && c <= 0xDFFF) return false;  // escaped bytes
  if (c >= 0xE000 && c <= 0xF8FF) return false;  // private use
  return true;
}

char32_t to_upper(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return c;
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 32;  // Greek
  if (c == 0x3C2) return 0x3A3;                               // final sigma
  if (c >= 0x430 && c <= 0x44F) return c - 32;                // Cyrillic
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  if (c >= 0x100 && c <= 0x17F && c != 0x131 && c != 0x138 && c != 0x149 && c != 0x17F) {
    // Latin Extended-A pairs alternate upper/lower, with the parity flipping
    // between U+0139 and U+0148 and again from U+0179.
    bool odd_is_lower = !((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E));
    if ((c % 2 == 1) == odd_is_lower) return c - 1;
  }
  return c;
}

char32_t to_lower(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c == 0x178) return 0xFF;
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x138 && c != 0x149 && c != 0x17F) {
    bool odd_is_lower = !((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E));
    if ((c % 2 == 0) == odd_is_lower) return c + 1;
  }
  return c;
}

bool is_upper(char32_t c) { return to_lower(c) != c; }
bool is_lower(char32_t c) { return to_upper(c) != c || c == 0xDF; }

}  // namespace kvlm::jinja
