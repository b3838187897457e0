#include "chat/jinja/strings.h"

#include <algorithm>

#include "chat/jinja/error.h"
#include "chat/jinja/utf8.h"

namespace kvlm::jinja {

namespace {

bool is_cased(char32_t c) { return is_upper(c) || is_lower(c); }

bool is_line_break(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E || c == 0x85 ||
         c == 0x2028 || c == 0x2029;
}

template <typename F>
std::string map_chars(std::string_view s, F f) {
  std::u32string chars = decode_utf8(s);
  for (char32_t& c : chars) c = f(c);
  return encode_utf8(chars);
}

}  // namespace

std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  std::u32string text = decode_utf8(s);
  std::u32string set = chars ? decode_utf8(*chars) : std::u32string();
  auto strip_it = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : is_py_space(c); };
  size_t begin = 0, end = text.size();
  if (left) {
    while (begin < end && strip_it(text[begin])) ++begin;
  }
  if (right) {
    while (end > begin && strip_it(text[end - 1])) --end;
  }
  return encode_utf8(std::u32string_view(text).substr(begin, end - begin));
}

std::string py_upper(std::string_view s) { return map_chars(s, to_upper); }
std::string py_lower(std::string_view s) { return map_chars(s, to_lower); }
std::string py_swapcase(std::string_view s) {
  return map_chars(s, [](char32_t c) { return is_upper(c) ? to_lower(c) : to_upper(c); });
}

std::string py_title(std::string_view s) {
  std::u32string chars = decode_utf8(s);
  bool prev_cased = false;
  for (char32_t& c : chars) {
    char32_t orig = c;
    c = prev_cased ? to_lower(c) : to_upper(c);
    prev_cased = is_cased(orig);
  }
  return encode_utf8(chars);
}

std::string py_capitalize(std::string_view s) {
  std::u32string chars = decode_utf8(s);
  for (size_t i = 0; i < chars.size(); ++i) chars[i] = i == 0 ? to_upper(chars[i]) : to_lower(chars[i]);
  return encode_utf8(chars);
}

std::string py_replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count) {
  std::string out;
  if (old.empty()) {  // Python inserts `repl` before every character and at the end
    std::u32string chars = decode_utf8(s);
    int64_t done = 0;
    for (char32_t c : chars) {
      if (count < 0 || done < count) {
        out += repl;
        ++done;
      }
      append_utf8(out, c);
    }
    if (count < 0 || done < count) out += repl;
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t hit = s.find(old, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(repl);
    pos = hit + old.size();
    ++done;
  }
  out.append(s.substr(pos));
  return out;
}

std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) throw_runtime("empty separator");
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      size_t hit = s.find(*sep, pos);
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(pos, hit - pos));
      pos = hit + sep->size();
    }
    out.emplace_back(s.substr(pos));
    return out;
  }
  std::u32string chars = decode_utf8(s);
  size_t i = 0;
  while (true) {
    while (i < chars.size() && is_py_space(chars[i])) ++i;
    if (i == chars.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      out.push_back(encode_utf8(std::u32string_view(chars).substr(i)));  // the rest, leading space dropped
      break;
    }
    size_t start = i;
    while (i < chars.size() && !is_py_space(chars[i])) ++i;
    out.push_back(encode_utf8(std::u32string_view(chars).substr(start, i - start)));
  }
  return out;
}

std::vector<std::string> py_rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  if (maxsplit < 0) return py_split(s, sep, maxsplit);
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) throw_runtime("empty separator");
    size_t end = s.size();
    while (static_cast<int64_t>(out.size()) < maxsplit) {
      size_t hit = end >= sep->size() ? s.rfind(*sep, end - sep->size()) : std::string_view::npos;
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
      end = hit;
    }
    out.emplace_back(s.substr(0, end));
  } else {
    std::u32string chars = decode_utf8(s);
    size_t i = chars.size();
    while (true) {
      while (i > 0 && is_py_space(chars[i - 1])) --i;
      if (i == 0) break;
      if (static_cast<int64_t>(out.size()) == maxsplit) {
        out.push_back(encode_utf8(std::u32string_view(chars).substr(0, i)));
        break;
      }
      size_t end = i;
      while (i > 0 && !is_py_space(chars[i - 1])) --i;
      out.push_back(encode_utf8(std::u32string_view(chars).substr(i, end - i)));
    }
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> py_splitlines(std::string_view s, bool keepends) {
  std::u32string chars = decode_utf8(s);
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i < chars.size(); ++i) {
    if (!is_line_break(chars[i])) continue;
    size_t end = i;
    if (chars[i] == '\r' && i + 1 < chars.size() && chars[i + 1] == '\n') ++i;
    out.push_back(encode_utf8(std::u32string_view(chars).substr(start, (keepends ? i + 1 : end) - start)));
    start = i + 1;
  }
  if (start < chars.size()) out.push_back(encode_utf8(std::u32string_view(chars).substr(start)));
  return out;
}

int64_t py_find(std::string_view s, std::string_view sub, bool from_right) {
  size_t hit = from_right ? s.rfind(sub) : s.find(sub);
  if (hit == std::string_view::npos) return -1;
  return static_cast<int64_t>(utf8_length(s.substr(0, hit)));
}

std::string py_justify(std::string_view s, int64_t width, std::string_view fill, char align) {
  int64_t len = static_cast<int64_t>(utf8_length(s));
  if (width <= len) return std::string(s);
  int64_t n = width - len;
  auto repeat = [&](int64_t k) {
    std::string out;
    for (int64_t i = 0; i < k; ++i) out += fill;
    return out;
  };
  if (align == '<') return std::string(s) + repeat(n);
  if (align == '>') return repeat(n) + std::string(s);
  // Python's center puts the extra fill character on the left when n and width are both odd.
  int64_t left = n / 2 + (n & width & 1);
  return repeat(left) + std::string(s) + repeat(n - left);
}

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

}  // namespace kvlm::jinja
