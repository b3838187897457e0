#include "tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "common/assert.h"
#include "common/error.h"
#include "common/log.h"
#include "tokenizer/unicode.h"

namespace kvlm {

namespace {

// llama.cpp's whitespace (unicode_set_whitespace), as class items.
constexpr std::string_view kWhitespaceItems =
    "\\x{9}-\\x{d}\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}"
    "\\x{202f}\\x{205f}\\x{3000}";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  int n = pcre2_get_error_message(code, buffer, sizeof(buffer));
  return n < 0 ? "unknown PCRE2 error" : std::string(reinterpret_cast<const char*>(buffer), n);
}

}  // namespace

std::string translate_regex(std::string_view re) {
  std::string out;
  out.reserve(re.size() + 64);
  bool in_class = false;
  bool negated = false;
  bool class_has_symbol = false;
  bool class_has_tilde = false;
  size_t class_start = 0;
  size_t i = 0;
  while (i < re.size()) {
    const char c = re[i];
    if (c == '\\' && i + 1 < re.size()) {
      const char d = re[i + 1];
      if (d == 's') {
        out += in_class ? std::string(kWhitespaceItems) : "[" + std::string(kWhitespaceItems) + "]";
      } else if (d == 'S') {
        // Only ever used outside classes in llama.cpp's expressions.
        KVLM_ASSERT(!in_class, "\\S inside a character class is not supported");
        out += "[^" + std::string(kWhitespaceItems) + "]";
      } else if (d == 'd') {
        out += in_class ? "0-9" : "[0-9]";
      } else if (d == 'p' && re.substr(i, 5) == "\\p{S}") {
        if (in_class) {
          class_has_symbol = true;
          out += "\\p{S}";
        } else {
          out += "(?:(?!~)\\p{S})";
        }
        i += 5;
        continue;
      } else {
        if (in_class && d == '~') class_has_tilde = true;
        out += c;
        out += d;
      }
      i += 2;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      class_start = out.size();
      negated = i + 1 < re.size() && re[i + 1] == '^';
      class_has_symbol = false;
      class_has_tilde = false;
      out += negated ? "[^" : "[";
      i += negated ? 2 : 1;
      continue;
    }
    if (in_class && c == ']') {
      out += ']';
      in_class = false;
      if (class_has_symbol && !class_has_tilde) {
        const std::string cls = out.substr(class_start);
        out.resize(class_start);
        out += negated ? "(?:~|" + cls + ")" : "(?:(?!~)" + cls + ")";
      }
      ++i;
      continue;
    }
    if (in_class && c == '~') class_has_tilde = true;
    out += c;
    ++i;
  }
  return out;
}

struct PreTokenizer::Regex {
  std::string source;  // llama.cpp's expression, for messages
  pcre2_code* code = nullptr;
  bool jit = false;    // JIT-compiled: matched with pcre2_jit_match (no per-call checks)
  ~Regex() { pcre2_code_free(code); }
};

PreTokenizer::PreTokenizer(const std::vector<std::string_view>& regexes) {
  for (std::string_view source : regexes) {
    auto regex = std::make_unique<Regex>();
    regex->source = std::string(source);
    const std::string pattern = translate_regex(source);
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    regex->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &error,
                                &error_offset, nullptr);
    if (regex->code == nullptr) {
      throw_error(ErrorCode::kInternal, "pre-tokenizer expression '{}' does not compile: {} (at {})",
                  source, pcre2_message(error), error_offset);
    }
    // Without JIT support PCRE2 still matches, only slower.
    const int jit = pcre2_jit_compile(regex->code, PCRE2_JIT_COMPLETE);
    regex->jit = jit == 0;
    if (!regex->jit) log_debug("pre-tokenizer: no JIT for '{}': {}", source, pcre2_message(jit));
    regexes_.push_back(std::move(regex));
  }
}

PreTokenizer::~PreTokenizer() = default;

namespace {

struct MatchData {
  pcre2_match_data* data;
  explicit MatchData(const pcre2_code* code) : data(pcre2_match_data_create_from_pattern(code, nullptr)) {
    if (data == nullptr) throw_error(ErrorCode::kInternal, "out of memory for regex match data");
  }
  ~MatchData() { pcre2_match_data_free(data); }
  MatchData(const MatchData&) = delete;
  MatchData& operator=(const MatchData&) = delete;
};

// One search of `code` in subject[0, length) from `offset`; returns false when
// there is no further match. The JIT's default 32 KiB stack can run out on
// very long pieces with nested lookaheads; the interpreter (heap-backed) then
// takes over for that search.
bool next_match(const pcre2_code* code, bool jit, const char* subject, size_t length, size_t offset,
                pcre2_match_data* md, const std::string& source, size_t& begin, size_t& end) {
  const auto* s = reinterpret_cast<PCRE2_SPTR>(subject);
  int rc = jit ? pcre2_jit_match(code, s, length, offset, 0, md, nullptr)
               : pcre2_match(code, s, length, offset, PCRE2_NO_UTF_CHECK, md, nullptr);
  if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
    rc = pcre2_match(code, s, length, offset, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, nullptr);
  }
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) {
    throw_error(ErrorCode::kInternal, "pre-tokenizer expression '{}' failed on a {}-byte piece: {}",
                source, length, pcre2_message(rc));
  }
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(md);
  begin = ovector[0];
  end = ovector[1];
  return true;
}

}  // namespace

void PreTokenizer::split(std::string_view text, std::vector<TextRange>& words) const {
  words.clear();
  if (text.empty()) return;
  words.push_back({0, text.size()});
  std::vector<TextRange> next;
  for (const auto& regex : regexes_) {
    MatchData md(regex->code);
    next.clear();
    next.reserve(words.size() * 2);
    for (const TextRange& piece : words) {
      const char* subject = text.data() + piece.begin;
      const size_t length = piece.size();
      size_t offset = 0;     // where the next search starts
      size_t emitted = 0;    // end of what has been emitted so far
      size_t begin = 0, end = 0;
      while (offset < length &&
             next_match(regex->code, regex->jit, subject, length, offset, md.data, regex->source, begin, end)) {
        if (end == begin) {
          // An empty match emits nothing (none of llama.cpp's expressions can
          // produce one); step over one character and search again.
          if (begin >= length) break;
          offset = begin + unicode::lead_byte_length(static_cast<uint8_t>(subject[begin]));
          continue;
        }
        if (begin > emitted) next.push_back({piece.begin + emitted, piece.begin + begin});
        next.push_back({piece.begin + begin, piece.begin + end});
        emitted = end;
        offset = end;
      }
      if (emitted < length) next.push_back({piece.begin + emitted, piece.end});
    }
    words.swap(next);
  }
}

}  // namespace kvlm
