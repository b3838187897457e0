#include "constrain/regex.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "common/error.h"
#include "constrain/program.h"

namespace kvlm::constrain {
namespace {

const CodepointRanges kDigit = {{'0', '9'}};
const CodepointRanges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const CodepointRanges kSpace = {{'\t', '\r'}, {' ', ' '}};

std::string json_escape(uint32_t cp) {
  switch (cp) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\n': return "\\n";
    case '\t': return "\\t";
    case '\r': return "\\r";
    case '\b': return "\\b";
    case '\f': return "\\f";
    default: return fmt::format("\\u{:04x}", cp);
  }
}

class RegexParser {
 public:
  RegexParser(std::string_view p, bool json) : p_(p), json_(json) {}

  Expr parse() {
    Expr e = alternation();
    if (pos_ < p_.size()) fail("unbalanced ')'");
    return e;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw_error(ErrorCode::kInvalidArgument, "regex: {} at offset {}", what, pos_);
  }
  bool done() const { return pos_ >= p_.size(); }
  char peek() const { return p_[pos_]; }
  bool eat(char c) {
    if (done() || p_[pos_] != c) return false;
    ++pos_;
    return true;
  }

  // One UTF-8 character of the pattern.
  uint32_t next_char() {
    const auto b = static_cast<uint8_t>(p_[pos_++]);
    if (b < 0x80) return b;
    const int len = b >= 0xF0 ? 3 : b >= 0xE0 ? 2 : b >= 0xC0 ? 1 : -1;
    if (len < 0 || pos_ + len > p_.size()) fail("invalid UTF-8");
    uint32_t cp = b & (0x3F >> len);
    for (int i = 0; i < len; ++i) cp = (cp << 6) | (static_cast<uint8_t>(p_[pos_++]) & 0x3F);
    return cp;
  }

  Expr alternation() {
    std::vector<Expr> options{concat()};
    while (eat('|')) options.push_back(concat());
    return alt(std::move(options));
  }

  Expr concat() {
    std::vector<Expr> parts;
    while (!done() && peek() != '|' && peek() != ')') {
      std::optional<Expr> a = atom();
      if (!a) continue;  // an anchor
      parts.push_back(quantified(std::move(*a)));
    }
    return seq(std::move(parts));
  }

  std::optional<int32_t> number() {
    size_t start = pos_;
    int64_t v = 0;
    while (!done() && peek() >= '0' && peek() <= '9') {
      v = v * 10 + (p_[pos_++] - '0');
      if (v > kMaxRepeat) fail(fmt::format("a repetition count over {}", kMaxRepeat));
    }
    if (pos_ == start) return std::nullopt;
    return static_cast<int32_t>(v);
  }

  // {m}, {m,}, {m,n}; anything else leaves `{` a literal (as PCRE does).
  bool braces(int32_t& min, std::optional<int32_t>& max) {
    const size_t start = pos_;
    if (!eat('{')) return false;
    auto m = number();
    if (m) {
      min = *m;
      max = m;
      if (eat(',')) max = number();
      if (eat('}')) {
        if (max && *max < min) fail("a repetition {m,n} with n < m");
        return true;
      }
    }
    pos_ = start;
    return false;
  }

  Expr quantified(Expr a) {
    while (!done()) {
      int32_t min = 0;
      std::optional<int32_t> max;
      const char c = peek();
      if (c == '*') { ++pos_; min = 0; max = std::nullopt; }
      else if (c == '+') { ++pos_; min = 1; max = std::nullopt; }
      else if (c == '?') { ++pos_; min = 0; max = 1; }
      else if (!braces(min, max)) break;
      if (!eat('?')) eat('+');  // lazy or possessive: same language
      a = repeat(std::move(a), min, max);
    }
    return a;
  }

  std::optional<Expr> atom() {
    const char c = peek();
    if (c == '^' || c == '$') {
      ++pos_;
      return std::nullopt;
    }
    if (c == '(') return group();
    if (c == '[') return char_class_expr(bracket(), json_);
    if (c == '.') {
      ++pos_;
      return char_class_expr(complement({{'\n', '\n'}}), json_);
    }
    if (c == '*' || c == '+' || c == '?') fail("a quantifier with nothing to repeat");
    if (c == '\\') {
      ++pos_;
      CodepointRanges r;
      escape(r, /*in_class=*/false);
      return char_class_expr(r, json_);
    }
    const uint32_t cp = next_char();
    return char_class_expr({{cp, cp}}, json_);
  }

  Expr group() {
    ++pos_;  // (
    if (eat('?')) {
      if (eat(':')) {
      } else if (eat('<') || (eat('P') && eat('<'))) {
        if (!done() && (peek() == '=' || peek() == '!')) fail("lookbehind is not supported");
        while (!done() && peek() != '>') ++pos_;
        if (!eat('>')) fail("an unterminated group name");
      } else {
        fail("lookaround and inline flags (?...) are not supported");
      }
    }
    Expr e = alternation();
    if (!eat(')')) fail("a missing ')'");
    return e;
  }

  uint32_t hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      if (done() || !std::isxdigit(static_cast<unsigned char>(peek()))) fail("a bad hex escape");
      const char h = p_[pos_++];
      v = v * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
    }
    return v;
  }

  // After a backslash: adds what it stands for to `r`.
  void escape(CodepointRanges& r, bool in_class) {
    if (done()) fail("a trailing backslash");
    const char c = p_[pos_++];
    auto add = [&](const CodepointRanges& s) { r.insert(r.end(), s.begin(), s.end()); };
    auto one = [&](uint32_t cp) { r.emplace_back(cp, cp); };
    switch (c) {
      case 'd': return add(kDigit);
      case 'D': return add(complement(kDigit));
      case 'w': return add(kWord);
      case 'W': return add(complement(kWord));
      case 's': return add(kSpace);
      case 'S': return add(complement(kSpace));
      case 'n': return one('\n');
      case 'r': return one('\r');
      case 't': return one('\t');
      case 'f': return one('\f');
      case 'v': return one('\v');
      case '0': return one(0);
      case 'x':
        if (eat('{')) {
          uint32_t v = 0;
          while (!done() && peek() != '}') v = v * 16 + hex(1);
          if (!eat('}') || v > 0x10FFFF) fail("a bad \\x{...} escape");
          return one(v);
        }
        return one(hex(2));
      case 'u': return one(hex(4));
      case 'b':
        if (in_class) return one('\b');
        fail("word boundaries (\\b) are not supported");
      default:
        if (std::isalnum(static_cast<unsigned char>(c)))
          fail(fmt::format("the escape \\{} is not supported", c));
        --pos_;
        return one(next_char());  // escaped punctuation or a non-ASCII character
    }
  }

  CodepointRanges bracket() {
    ++pos_;  // [
    const bool negate = eat('^');
    CodepointRanges r;
    bool first = true;
    while (!done() && (peek() != ']' || first)) {
      first = false;
      CodepointRanges item;
      if (eat('\\')) {
        escape(item, /*in_class=*/true);
      } else {
        const uint32_t cp = next_char();
        item.emplace_back(cp, cp);
      }
      // A range a-b: both ends single characters, '-' not last.
      if (item.size() == 1 && item[0].first == item[0].second && pos_ + 1 < p_.size() && peek() == '-' &&
          p_[pos_ + 1] != ']') {
        ++pos_;
        CodepointRanges hi;
        if (eat('\\')) {
          escape(hi, true);
        } else {
          const uint32_t cp = next_char();
          hi.emplace_back(cp, cp);
        }
        if (hi.size() != 1 || hi[0].first != hi[0].second) fail("a class range ending in a class");
        if (hi[0].first < item[0].first) fail("a class range out of order");
        item[0].second = hi[0].first;
      }
      r.insert(r.end(), item.begin(), item.end());
    }
    if (!eat(']')) fail("a missing ']'");
    return negate ? complement(std::move(r)) : r;
  }

  std::string_view p_;
  bool json_;
  size_t pos_ = 0;
};

}  // namespace

Expr char_class_expr(const CodepointRanges& ranges, bool json_string) {
  if (!json_string) return utf8_class(ranges);
  // Characters JSON must escape are split off and spelled as escapes.
  CodepointRanges plain;
  std::vector<Expr> options;
  for (auto [lo, hi] : ranges) {
    for (uint32_t cp = lo; cp <= std::min<uint32_t>(hi, 0x5C); ++cp)
      if (cp < 0x20 || cp == '"' || cp == '\\') {
        std::string esc = json_escape(cp);
        options.push_back(literal(esc));
      }
    // Whatever is left of [lo, hi] once the escaped characters are removed.
    uint32_t from = lo;
    for (uint32_t special : {0x22u, 0x5Cu}) {
      if (special < from || special > hi) continue;
      if (special > from) plain.emplace_back(std::max<uint32_t>(from, 0x20), special - 1);
      from = special + 1;
    }
    from = std::max<uint32_t>(from, 0x20);
    if (from <= hi) plain.emplace_back(from, hi);
  }
  std::erase_if(plain, [](const auto& r) { return r.first > r.second; });
  std::sort(options.begin(), options.end(), [](const Expr& a, const Expr& b) { return a.node().literal < b.node().literal; });
  options.erase(std::unique(options.begin(), options.end(),
                            [](const Expr& a, const Expr& b) { return a.node().literal == b.node().literal; }),
                options.end());
  if (!plain.empty()) options.insert(options.begin(), utf8_class(plain));
  return alt(std::move(options));
}

Expr regex_expr(std::string_view pattern, bool json_string) { return RegexParser(pattern, json_string).parse(); }

}  // namespace kvlm::constrain
