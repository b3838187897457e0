// Decimal spellings of bounded numbers as grammars (JSON Schema's minimum,
// maximum and their exclusive forms). Internal to src/constrain/.
#pragma once

#include <cstdint>
#include <optional>

#include "constrain/grammar.h"

namespace kvlm::constrain {

// Integers are kept to 15 digits (|n| < 10^15, exact in a double), so an
// unbounded integer is still a finite run of digits.
inline constexpr int64_t kMaxJsonInteger = 999'999'999'999'999;

// The canonical spellings (no leading zeros, no "-0") of the integers in
// [lo, hi]. Precondition: -kMaxJsonInteger <= lo <= hi <= kMaxJsonInteger.
Expr integer_range_expr(int64_t lo, int64_t hi);

struct NumberBounds {
  std::optional<double> minimum, maximum;  // inclusive
  std::optional<double> exclusive_minimum, exclusive_maximum;
};

// JSON integers within the bounds; nothing when none fit (callers check
// integer_bounds first to report it).
std::optional<std::pair<int64_t, int64_t>> integer_bounds(const NumberBounds& b);
Expr integer_expr(const NumberBounds& b);
// JSON numbers within the bounds: integers, and decimals with up to six
// fraction digits (the last one non-zero, so k.f lies strictly between k and
// k + 1). Without bounds an exponent is allowed too. nullopt: no number fits.
std::optional<Expr> number_expr(const NumberBounds& b);

}  // namespace kvlm::constrain
