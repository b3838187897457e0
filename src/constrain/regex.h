// Regular expressions -> grammar expressions. The usual subset of
// PCRE/ECMAScript syntax: literals and escapes (\n \t \xHH \uHHHH, escaped
// punctuation), classes [a-z0-9_] and [^...], \d \w \s and their negations,
// `.` (any character but newline), groups (...) (?:...) (?<name>...),
// alternation, quantifiers * + ? {m} {m,} {m,n} (lazy/possessive suffixes
// change nothing here). Anchors ^ and $ are ignored: the whole output is
// matched against the whole pattern. Backreferences, lookaround and \b are
// refused.
#pragma once

#include <string_view>

#include "constrain/grammar.h"

namespace kvlm::constrain {

// Unbounded quantifiers (* + {m,}) in a pattern are allowed; callers that
// need the model to stop may prefer bounded ones.
//
// json_string: the pattern describes the *value* of a JSON string, and the
// expression matches its JSON spelling between the quotes: `"`, `\` and
// control characters become their escapes (\" \\ \n \u001f ...).
//
// Throws Error(kInvalidArgument) "regex: <what> at offset N".
Expr regex_expr(std::string_view pattern, bool json_string = false);

// One character of `ranges`, spelled as in a JSON string when json_string.
Expr char_class_expr(const CodepointRanges& ranges, bool json_string);

}  // namespace kvlm::constrain
