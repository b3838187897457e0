#include "constrain/json_numbers.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/assert.h"
#include "constrain/regex.h"

namespace kvlm::constrain {
namespace {

Expr digit() { return byte_range('0', '9'); }

// Equal-length digit strings a <= b: every string of that length in [a, b].
Expr same_length(const std::string& a, const std::string& b) {
  if (a.empty()) return Expr();
  if (a == b) return literal(a);
  if (a[0] == b[0]) return literal(a.substr(0, 1)) + same_length(a.substr(1), b.substr(1));
  const size_t k = a.size() - 1;
  const std::string rest_a = a.substr(1), rest_b = b.substr(1);
  const bool all0 = rest_a == std::string(k, '0'), all9 = rest_b == std::string(k, '9');
  std::vector<Expr> options;
  if (!all0) options.push_back(literal(a.substr(0, 1)) + same_length(rest_a, std::string(k, '9')));
  const char lo = static_cast<char>(a[0] + (all0 ? 0 : 1)), hi = static_cast<char>(b[0] - (all9 ? 0 : 1));
  if (lo <= hi) options.push_back(byte_range(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)) + repeat(digit(), static_cast<int32_t>(k), static_cast<int32_t>(k)));
  if (!all9) options.push_back(literal(b.substr(0, 1)) + same_length(std::string(k, '0'), rest_b));
  return alt(std::move(options));
}

// Non-negative integers in [lo, hi], split by number of digits. A run of
// lengths the range covers whole (every d-digit number, for d in [m, n]) is
// one expression, [1-9][0-9]{m-1,n-1}: an unbounded integer is 16 digit
// states, not the 120 of one option per length.
Expr unsigned_range(int64_t lo, int64_t hi) {
  std::vector<Expr> options;
  int32_t run_from = 0, run_to = -1;  // the run of whole lengths being gathered
  auto flush = [&] {
    if (run_to < 0) return;
    options.push_back(byte_range('1', '9') + repeat(digit(), run_from - 1, run_to - 1));
    run_to = -1;
  };
  const size_t from = std::to_string(lo).size(), to = std::to_string(hi).size();
  int64_t pow = 1;
  for (size_t d = 1; d < from; ++d) pow *= 10;
  for (size_t d = from; d <= to; ++d, pow *= 10) {
    const int64_t a = std::max(lo, d == 1 ? 0 : pow), b = std::min(hi, pow * 10 - 1);
    if (a > b) continue;
    if (d > 1 && a == pow && b == pow * 10 - 1) {
      if (run_to < 0) run_from = static_cast<int32_t>(d);
      run_to = static_cast<int32_t>(d);
      continue;
    }
    flush();
    options.push_back(same_length(std::to_string(a), std::to_string(b)));
  }
  flush();
  return alt(std::move(options));
}

double clamp_bound(double v) {
  return std::clamp(v, -static_cast<double>(kMaxJsonInteger), static_cast<double>(kMaxJsonInteger));
}

// The real interval [L, H] (exclusiveness handled by the callers).
std::pair<double, double> interval(const NumberBounds& b) {
  double lo = -static_cast<double>(kMaxJsonInteger), hi = static_cast<double>(kMaxJsonInteger);
  if (b.minimum) lo = std::max(lo, clamp_bound(*b.minimum));
  if (b.exclusive_minimum) lo = std::max(lo, clamp_bound(*b.exclusive_minimum));
  if (b.maximum) hi = std::min(hi, clamp_bound(*b.maximum));
  if (b.exclusive_maximum) hi = std::min(hi, clamp_bound(*b.exclusive_maximum));
  return {lo, hi};
}

}  // namespace

Expr integer_range_expr(int64_t lo, int64_t hi) {
  KVLM_ASSERT(lo <= hi && lo >= -kMaxJsonInteger && hi <= kMaxJsonInteger, "integer range out of order");
  std::vector<Expr> options;
  if (hi >= 0) options.push_back(unsigned_range(std::max<int64_t>(lo, 0), hi));
  if (lo < 0) options.push_back(literal("-") + unsigned_range(std::max<int64_t>(-hi, 1), -lo));
  return alt(std::move(options));
}

std::optional<std::pair<int64_t, int64_t>> integer_bounds(const NumberBounds& b) {
  double lo = -static_cast<double>(kMaxJsonInteger), hi = static_cast<double>(kMaxJsonInteger);
  if (b.minimum) lo = std::max(lo, std::ceil(clamp_bound(*b.minimum)));
  if (b.exclusive_minimum) lo = std::max(lo, std::floor(clamp_bound(*b.exclusive_minimum)) + 1);
  if (b.maximum) hi = std::min(hi, std::floor(clamp_bound(*b.maximum)));
  if (b.exclusive_maximum) hi = std::min(hi, std::ceil(clamp_bound(*b.exclusive_maximum)) - 1);
  lo = std::max(lo, -static_cast<double>(kMaxJsonInteger));
  hi = std::min(hi, static_cast<double>(kMaxJsonInteger));
  if (lo > hi) return std::nullopt;
  return std::make_pair(static_cast<int64_t>(lo), static_cast<int64_t>(hi));
}

Expr integer_expr(const NumberBounds& b) {
  auto r = integer_bounds(b);
  return r ? integer_range_expr(r->first, r->second) : nothing();
}

std::optional<Expr> number_expr(const NumberBounds& b) {
  const bool bounded = b.minimum || b.maximum || b.exclusive_minimum || b.exclusive_maximum;
  if (!bounded) return regex_expr("-?(0|[1-9][0-9]{0,14})(\\.[0-9]{0,5}[1-9])?([eE][-+]?[1-9][0-9]?)?");
  const auto [lo, hi] = interval(b);
  const Expr frac = literal(".") + repeat(digit(), 0, 5) + byte_range('1', '9');
  std::vector<Expr> options;
  if (auto r = integer_bounds(b)) options.push_back(integer_range_expr(r->first, r->second));
  // k.f in (k, k + 1): needs lo <= k and k + 1 <= hi.
  const double pos_lo = std::max(0.0, std::ceil(lo)), pos_hi = std::floor(hi) - 1;
  if (pos_lo <= pos_hi)
    options.push_back(unsigned_range(static_cast<int64_t>(pos_lo), static_cast<int64_t>(pos_hi)) + frac);
  // -k.f in (-k - 1, -k): needs lo <= -k - 1 and -k <= hi.
  const double neg_lo = std::max(0.0, std::ceil(-hi)), neg_hi = std::floor(-lo) - 1;
  if (neg_lo <= neg_hi)
    options.push_back(literal("-") + unsigned_range(static_cast<int64_t>(neg_lo), static_cast<int64_t>(neg_hi)) + frac);
  if (options.empty()) return std::nullopt;
  return alt(std::move(options));
}

}  // namespace kvlm::constrain
