#include "chat/jinja/lexer.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include <fmt/format.h>

#include "chat/jinja/utf8.h"

namespace kvlm::jinja {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

std::string normalize_newlines(std::string_view src, bool keep_trailing_newline) {
  std::string out;
  out.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      out.push_back(src[i]);
    }
  }
  if (!keep_trailing_newline && !out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  Lexer(std::string_view source, const LexerOptions& options)
      : src_(normalize_newlines(source, options.keep_trailing_newline)), opt_(options) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<Token> run() {
    size_t pos = 0;
    while (pos < src_.size()) {
      size_t tag = find_tag_start(pos);
      if (tag == std::string::npos) {
        emit_text(std::string_view(src_).substr(pos), pos);
        break;
      }
      char kind = src_[tag + 1];
      char sign = tag + 2 < src_.size() && (src_[tag + 2] == '-' || src_[tag + 2] == '+') ? src_[tag + 2] : 0;
      size_t raw_body = kind == '%' ? match_raw_begin(tag) : std::string::npos;
      emit_text(control_text(std::string_view(src_).substr(pos, tag - pos), sign, kind != '{'), pos);
      if (kind == '#') {
        pos = lex_comment(tag);
      } else if (raw_body != std::string::npos) {
        pos = lex_raw(tag, raw_body);
      } else {
        pos = lex_tag(tag, kind, sign);
      }
    }
    tokens_.push_back(Token{TokenKind::kEof, "", 0, 0.0, pos_at(src_.size())});
    return std::move(tokens_);
  }

 private:
  // Line and column (in code points) of a byte offset. Tokens are looked up
  // in increasing order, so counting resumes from the previous lookup on the
  // same line instead of rescanning it (a long one-line template stays linear).
  SourcePos pos_at(size_t offset) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    size_t line_start = *(it - 1);
    int line = static_cast<int>(it - line_starts_.begin());
    size_t from = line_start;
    int column = 1;
    if (cached_.line == line && cached_offset_ <= offset) {
      from = cached_offset_;
      column = cached_.column;
    }
    for (size_t i = from; i < offset && i < src_.size(); ++i) {
      if ((static_cast<unsigned char>(src_[i]) & 0xC0) != 0x80) ++column;
    }
    cached_ = SourcePos{line, column};
    cached_offset_ = offset;
    return cached_;
  }

  [[noreturn]] void fail(size_t offset, std::string_view message) const {
    throw_syntax(pos_at(offset), message);
  }

  size_t find_tag_start(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  // Whitespace control for the text before a tag (see lexer.h). `block_like`
  // is true for block and comment tags, which lstrip_blocks applies to.
  std::string_view control_text(std::string_view text, char sign, bool block_like) const {
    if (sign == '-') {
      size_t end = text.size();
      while (end > 0 && is_space(text[end - 1])) --end;
      return text.substr(0, end);
    }
    if (sign != '+' && block_like && opt_.lstrip_blocks) {
      size_t nl = text.rfind('\n');
      size_t line_pos = nl == std::string_view::npos ? 0 : nl + 1;
      if (line_pos > 0 || line_starting_) {
        std::string_view tail = text.substr(line_pos);
        bool blank = !tail.empty() && std::all_of(tail.begin(), tail.end(), [](char c) {
          return c == ' ' || c == '\t' || c == '\f' || c == '\v';
        });
        if (blank) return text.substr(0, line_pos);
      }
    }
    return text;
  }

  void emit_text(std::string_view text, size_t offset) {
    if (text.empty()) return;
    tokens_.push_back(Token{TokenKind::kText, std::string(text), 0, 0.0, pos_at(offset)});
  }

  // Consumes a tag end at `p` followed by Jinja's suffix rule: "-" strips all
  // whitespace after it, "+" keeps everything, plain trims one newline when
  // `trim` is set. Returns the position after it, or npos if no end is there.
  size_t match_end(size_t p, std::string_view end, bool trim) {
    size_t after = std::string::npos;
    if (src_.compare(p, 1, "-") == 0 && src_.compare(p + 1, end.size(), end) == 0) {
      after = p + 1 + end.size();
      while (after < src_.size() && is_space(src_[after])) ++after;
    } else if (trim && src_.compare(p, 1, "+") == 0 && src_.compare(p + 1, end.size(), end) == 0) {
      after = p + 1 + end.size();
    } else if (src_.compare(p, end.size(), end) == 0) {
      after = p + end.size();
      if (trim && opt_.trim_blocks && after < src_.size() && src_[after] == '\n') ++after;
    }
    if (after != std::string::npos) line_starting_ = src_[after - 1] == '\n';
    return after;
  }

  size_t lex_comment(size_t tag) {
    size_t end = src_.find("#}", tag + 2);
    if (end == std::string::npos) fail(tag, "unterminated comment: missing '#}'");
    if (end > tag + 2 && (src_[end - 1] == '-' || src_[end - 1] == '+')) --end;
    return match_end(end, "#}", true);
  }

  // If a `{% raw %}` tag starts at `tag`, returns where its body starts.
  size_t match_raw_begin(size_t tag) {
    size_t p = tag + 2;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
    while (p < src_.size() && is_space(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0) return std::string::npos;
    p += 3;
    while (p < src_.size() && is_space(src_[p])) ++p;
    // The raw opening tag has no trim_blocks suffix in Jinja2.
    if (src_.compare(p, 3, "-%}") == 0) {
      p += 3;
      while (p < src_.size() && is_space(src_[p])) ++p;
      return p;
    }
    if (src_.compare(p, 2, "%}") == 0) return p + 2;
    return std::string::npos;
  }

  size_t lex_raw(size_t tag, size_t body) {
    line_starting_ = src_[body - 1] == '\n';
    for (size_t open = src_.find("{%", body); open != std::string::npos; open = src_.find("{%", open + 1)) {
      size_t p = open + 2;
      char sign = p < src_.size() && (src_[p] == '-' || src_[p] == '+') ? src_[p] : 0;
      if (sign) ++p;
      while (p < src_.size() && is_space(src_[p])) ++p;
      if (src_.compare(p, 6, "endraw") != 0) continue;
      p += 6;
      while (p < src_.size() && is_space(src_[p])) ++p;
      emit_text(control_text(std::string_view(src_).substr(body, open - body), sign, true), body);
      size_t after = match_end(p, "%}", true);
      if (after == std::string::npos) fail(p, "expected '%}' after 'endraw'");
      return after;
    }
    fail(tag, "unterminated raw block: missing '{% endraw %}'");
  }

  size_t lex_tag(size_t tag, char kind, char sign) {
    bool block = kind == '%';
    std::string_view end = block ? "%}" : "}}";
    tokens_.push_back(Token{block ? TokenKind::kBlockBegin : TokenKind::kVarBegin, "", 0, 0.0, pos_at(tag)});
    size_t p = tag + 2 + (sign ? 1 : 0);
    // Open brackets: "}}" inside {{ {'a': {}} }} closes a dict, not the tag.
    std::vector<size_t> open;
    while (true) {
      while (p < src_.size() && is_space(src_[p])) ++p;
      if (p >= src_.size()) {
        if (!open.empty()) fail(open.back(), fmt::format("unclosed '{}'", src_[open.back()]));
        fail(tag, fmt::format("unterminated tag: missing '{}'", end));
      }
      if (open.empty()) {
        size_t after = match_end(p, end, block);
        if (after != std::string::npos) {
          tokens_.push_back(Token{block ? TokenKind::kBlockEnd : TokenKind::kVarEnd, "", 0, 0.0, pos_at(p)});
          return after;
        }
      }
      p = lex_token(p, &open);
    }
  }

  // Byte length of the non-ASCII letter at `p`, or 0 if there is none.
  size_t unicode_letter_at(size_t p) const {
    if (static_cast<unsigned char>(src_[p]) < 0x80) return 0;
    size_t n = 1;
    while (p + n < src_.size() && n < 4 && (static_cast<unsigned char>(src_[p + n]) & 0xC0) == 0x80) ++n;
    std::u32string c = decode_utf8(std::string_view(src_).substr(p, n));
    return c.size() == 1 && is_py_alpha(c[0]) ? n : 0;
  }

  size_t lex_token(size_t p, std::vector<size_t>* open) {
    char c = src_[p];
    if (c == '\'' || c == '"') return lex_string(p);
    if (is_digit(c)) return lex_number(p);
    if (is_name_start(c) || unicode_letter_at(p) > 0) {
      size_t e = p;
      while (e < src_.size()) {  // Jinja2 names are Python identifiers, letters beyond ASCII included
        if (is_name_char(src_[e])) {
          ++e;
        } else if (size_t n = unicode_letter_at(e)) {
          e += n;
        } else {
          break;
        }
      }
      tokens_.push_back(Token{TokenKind::kName, src_.substr(p, e - p), 0, 0.0, pos_at(p)});
      return e;
    }
    static constexpr std::string_view kTwoChar[] = {"//", "**", "==", "!=", "<=", ">="};
    for (std::string_view op : kTwoChar) {
      if (src_.compare(p, 2, op) == 0) {
        tokens_.push_back(Token{TokenKind::kOperator, std::string(op), 0, 0.0, pos_at(p)});
        return p + 2;
      }
    }
    if (std::string_view("+-*/%~<>=.,:|()[]{};").find(c) != std::string_view::npos) {
      if (c == '(' || c == '[' || c == '{') open->push_back(p);
      if (c == ')' || c == ']' || c == '}') {
        if (open->empty()) fail(p, fmt::format("unexpected '{}'", c));
        char opener = src_[open->back()];
        char expected = opener == '(' ? ')' : (opener == '[' ? ']' : '}');
        if (c != expected) fail(p, fmt::format("unexpected '{}', expected '{}'", c, expected));
        open->pop_back();
      }
      tokens_.push_back(Token{TokenKind::kOperator, std::string(1, c), 0, 0.0, pos_at(p)});
      return p + 1;
    }
    fail(p, fmt::format("unexpected character '{}'", c));
  }

  // Decodes a Python string literal's escapes (\n, \t, \\, \', \xNN, \uNNNN,
  // \UNNNNNNNN, octal); unknown escapes keep their backslash, as in Python.
  size_t lex_string(size_t p) {
    char quote = src_[p];
    std::string value;
    size_t i = p + 1;
    while (true) {
      if (i >= src_.size()) fail(p, "unterminated string literal");
      char c = src_[i];
      if (c == quote) break;
      if (c != '\\') {
        value.push_back(c);
        ++i;
        continue;
      }
      if (i + 1 >= src_.size()) fail(p, "unterminated string literal");
      char e = src_[i + 1];
      i += 2;
      switch (e) {
        case 'n': value.push_back('\n'); break;
        case 't': value.push_back('\t'); break;
        case 'r': value.push_back('\r'); break;
        case '\\': value.push_back('\\'); break;
        case '\'': value.push_back('\''); break;
        case '"': value.push_back('"'); break;
        case 'a': value.push_back('\a'); break;
        case 'b': value.push_back('\b'); break;
        case 'f': value.push_back('\f'); break;
        case 'v': value.push_back('\v'); break;
        case '\n': break;  // line continuation
        case 'x':
        case 'u':
        case 'U': {
          size_t num_digits = e == 'x' ? 2 : (e == 'u' ? 4 : 8);
          uint32_t code = 0;
          auto res = std::from_chars(src_.data() + i, src_.data() + std::min(src_.size(), i + num_digits), code, 16);
          if (res.ec != std::errc() || res.ptr != src_.data() + i + num_digits || code > 0x10FFFF) {
            fail(i - 2, fmt::format("invalid \\{} escape in string literal", e));
          }
          append_utf8(value, code);
          i += num_digits;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t code = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && i < src_.size() && src_[i] >= '0' && src_[i] <= '7'; ++k, ++i) {
              code = code * 8 + static_cast<uint32_t>(src_[i] - '0');
            }
            append_utf8(value, code);
          } else {
            value.push_back('\\');
            value.push_back(e);
          }
      }
    }
    tokens_.push_back(Token{TokenKind::kString, std::move(value), 0, 0.0, pos_at(p)});
    return i + 1;
  }

  size_t lex_number(size_t p) {
    auto digits_from = [&](size_t i, auto pred) {  // digits with single underscores between
      std::string out;
      while (i < src_.size() && (pred(src_[i]) || (src_[i] == '_' && i + 1 < src_.size() && pred(src_[i + 1])))) {
        if (src_[i] != '_') out.push_back(src_[i]);
        ++i;
      }
      return std::make_pair(out, i);
    };
    char prefix = p + 1 < src_.size() && src_[p] == '0' ? static_cast<char>(src_[p + 1] | 0x20) : 0;
    if (prefix == 'x' || prefix == 'o' || prefix == 'b') {
      int base = prefix == 'x' ? 16 : (prefix == 'o' ? 8 : 2);
      size_t start = p + 2;
      if (start < src_.size() && src_[start] == '_') ++start;
      auto [digits, end] = digits_from(start, [base](char c) {
        int v = is_digit(c) ? c - '0' : ((c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10 : 99);
        return v < base;
      });
      if (digits.empty()) fail(p, "invalid integer literal");
      return push_integer(p, digits, base, end);
    }
    auto [int_digits, end] = digits_from(p, is_digit);
    bool after_dot = p > 0 && src_[p - 1] == '.';  // x.0.1 is two item accesses, not x[0.1]
    std::string text = int_digits;
    bool is_float = false;
    if (!after_dot && end + 1 < src_.size() && src_[end] == '.' && is_digit(src_[end + 1])) {
      auto [frac, frac_end] = digits_from(end + 1, is_digit);
      text += "." + frac;
      end = frac_end;
      is_float = true;
    }
    if (!after_dot && end < src_.size() && (src_[end] | 0x20) == 'e') {
      size_t e = end + 1;
      std::string sign;
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) sign = src_[e++];
      if (e < src_.size() && is_digit(src_[e])) {
        auto [exp_digits, exp_end] = digits_from(e, is_digit);
        text += "e" + sign + exp_digits;
        end = exp_end;
        is_float = true;
      }
    }
    if (!is_float) return push_integer(p, int_digits, 10, end);
    tokens_.push_back(Token{TokenKind::kFloat, text, 0, std::strtod(text.c_str(), nullptr), pos_at(p)});
    return end;
  }

  size_t push_integer(size_t p, const std::string& digits, int base, size_t end) {
    int64_t value = 0;
    auto res = std::from_chars(digits.data(), digits.data() + digits.size(), value, base);
    if (res.ec != std::errc()) fail(p, "integer literal too large");
    tokens_.push_back(Token{TokenKind::kInteger, digits, value, 0.0, pos_at(p)});
    return end;
  }

  std::string src_;
  LexerOptions opt_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
  bool line_starting_ = true;  // the last tag's end consumed a newline (or nothing was lexed yet)
  mutable SourcePos cached_{0, 1};  // pos_at's last answer, and the offset it was for
  mutable size_t cached_offset_ = 0;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const LexerOptions& options) {
  return Lexer(source, options).run();
}

}  // namespace kvlm::jinja
