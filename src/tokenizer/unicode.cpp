#include "tokenizer/unicode.h"

#include <vector>

namespace kvlm::unicode {

void append_utf8(uint32_t cp, std::string& out) {
  if (cp <= 0x7F) {
    out.push_back(static_cast<char>(cp));
  } else if (cp <= 0x7FF) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp <= 0xFFFF) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | ((cp >> 18) & 0x07)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

Utf8Step utf8_step(std::string_view s, size_t pos) {
  using Kind = Utf8Step::Kind;
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  const uint8_t b0 = byte(pos);
  if (b0 < 0x80) return {Kind::kValid, 1};
  size_t need = 0;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;  // no overlong forms
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return {Kind::kInvalid, 1};
  }
  for (size_t i = 1; i < need; ++i) {
    if (pos + i >= s.size()) return {Kind::kIncomplete, i};
    const uint8_t b = byte(pos + i);
    const uint8_t min = i == 1 ? lo : 0x80;
    const uint8_t max = i == 1 ? hi : 0xBF;
    if (b < min || b > max) return {Kind::kInvalid, i};
  }
  return {Kind::kValid, need};
}

bool is_valid_utf8(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    // ASCII runs are the common case; skip them without the full decoder.
    if (static_cast<uint8_t>(s[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const Utf8Step step = utf8_step(s, pos);
    if (step.kind != Utf8Step::Kind::kValid) return false;
    pos += step.length;
  }
  return true;
}

std::string sanitize_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) {
    const Utf8Step step = utf8_step(s, pos);
    if (step.kind == Utf8Step::Kind::kValid) {
      out.append(s.substr(pos, step.length));
    } else {
      out.append("\xEF\xBF\xBD");
    }
    pos += step.length;
  }
  return out;
}

std::optional<uint32_t> decode_lenient(std::string_view s, size_t& pos) {
  const auto byte = [&](size_t i) { return static_cast<uint32_t>(static_cast<uint8_t>(s[i])); };
  const auto is_cont = [&](size_t i) { return i < s.size() && (byte(i) & 0xC0) == 0x80; };
  const uint32_t b0 = byte(pos);
  if (!(b0 & 0x80)) {
    pos += 1;
    return b0;
  }
  if ((b0 & 0x40) && !(b0 & 0x20) && is_cont(pos + 1)) {
    const uint32_t cp = ((b0 & 0x1F) << 6) | (byte(pos + 1) & 0x3F);
    pos += 2;
    return cp;
  }
  if ((b0 & 0x60) == 0x60 && !(b0 & 0x10) && is_cont(pos + 1) && is_cont(pos + 2)) {
    const uint32_t cp = ((b0 & 0x0F) << 12) | ((byte(pos + 1) & 0x3F) << 6) | (byte(pos + 2) & 0x3F);
    pos += 3;
    return cp;
  }
  if ((b0 & 0x70) == 0x70 && !(b0 & 0x08) && is_cont(pos + 1) && is_cont(pos + 2) && is_cont(pos + 3)) {
    const uint32_t cp = ((b0 & 0x07) << 18) | ((byte(pos + 1) & 0x3F) << 12) |
                        ((byte(pos + 2) & 0x3F) << 6) | (byte(pos + 3) & 0x3F);
    pos += 4;
    return cp;
  }
  pos += 1;
  return std::nullopt;
}

bool normalize_like_llama(std::string_view text, std::string& normalized, std::string& regex_view) {
  normalized.clear();
  regex_view.clear();
  if (is_valid_utf8(text)) return false;
  normalized.reserve(text.size() + 16);
  regex_view.reserve(text.size() + 16);
  size_t pos = 0;
  while (pos < text.size()) {
    std::optional<uint32_t> cp = decode_lenient(text, pos);
    // llama.cpp throws on values above U+10FFFF when re-encoding; a request
    // must not fail on bad bytes, so they become U+FFFD like other bad input.
    if (!cp || *cp > 0x10FFFF) cp = 0xFFFD;
    const size_t start = normalized.size();
    append_utf8(*cp, normalized);
    if (*cp >= 0xD800 && *cp <= 0xDFFF) {
      regex_view.append("\xEE\x80\x80");  // U+E000, same length as a surrogate
    } else {
      regex_view.append(normalized, start, std::string::npos);
    }
  }
  return true;
}

namespace {

struct ByteTables {
  std::array<uint32_t, 256> codepoint{};
  std::array<std::string, 256> utf8;
  std::vector<int16_t> inverse;  // code point -> byte, -1 if unmapped (code points < 324)

  ByteTables() {
    const auto printable = [](int b) {
      return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) codepoint[b] = printable(b) ? static_cast<uint32_t>(b) : next++;
    inverse.assign(next, -1);
    for (int b = 0; b < 256; ++b) {
      append_utf8(codepoint[b], utf8[b]);
      inverse[codepoint[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteTables& byte_tables() {
  static const ByteTables tables;  // immutable after construction
  return tables;
}

}  // namespace

uint32_t byte_to_codepoint(uint8_t byte) { return byte_tables().codepoint[byte]; }

const std::string& byte_to_utf8(uint8_t byte) { return byte_tables().utf8[byte]; }

std::optional<uint8_t> codepoint_to_byte(uint32_t cp) {
  const auto& inv = byte_tables().inverse;
  if (cp >= inv.size() || inv[cp] < 0) return std::nullopt;
  return static_cast<uint8_t>(inv[cp]);
}

}  // namespace kvlm::unicode
