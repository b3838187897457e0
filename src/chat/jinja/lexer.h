// Jinja lexer: template source -> tokens, with Jinja2's whitespace control
// applied to the text between tags as it goes:
//  - `{%-`, `{{-`, `{#-` strip all whitespace before the tag; `-%}`, `-}}`,
//    `-#}` strip all whitespace after it;
//  - trim_blocks drops the first newline after a block or comment tag
//    (`+%}` keeps it); lstrip_blocks drops spaces and tabs between the start
//    of a line and a block or comment tag (`{%+` keeps them);
//  - `{% raw %}...{% endraw %}` becomes one text token;
//  - newlines are normalised to "\n" and one trailing newline is dropped
//    (Jinja2's keep_trailing_newline=False).
// Hugging Face renders chat templates with trim_blocks and lstrip_blocks on,
// which are the defaults here.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "chat/jinja/error.h"

namespace kvlm::jinja {

enum class TokenKind {
  kText,        // template data between tags, after whitespace control
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,
  kInteger,
  kFloat,
  kOperator,
  kEof,
};

struct Token {
  TokenKind kind = TokenKind::kEof;
  // kText: the data; kName: the identifier; kString: the decoded value;
  // kOperator: the operator ("+", "//", "(").
  std::string text;
  int64_t int_value = 0;
  double float_value = 0.0;
  SourcePos pos;
};

struct LexerOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};

// Throws Error(kInvalidArgument) with line and column for malformed input
// (an unterminated tag, comment or string, a character no token starts with).
std::vector<Token> tokenize(std::string_view source, const LexerOptions& options = {});

}  // namespace kvlm::jinja
