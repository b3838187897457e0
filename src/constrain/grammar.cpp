#include "constrain/grammar.h"

#include <algorithm>

#include "common/assert.h"
#include "common/error.h"
#include "constrain/compile_budget.h"

namespace kvlm::constrain {
namespace {

// What a node costs: itself and its shared_ptr control block (one
// allocation), its literal and its children, charged to the compilation
// that makes it (compile_budget.h).
int64_t node_bytes(const ExprNode& n) {
  constexpr int64_t kControlBlock = 16;
  const size_t text = n.literal.capacity() > 15 ? n.literal.capacity() + 1 : 0;  // past the short-string buffer
  return static_cast<int64_t>(sizeof(ExprNode) + kControlBlock + text + n.children.capacity() * sizeof(Expr));
}

Expr make(ExprNode n) {
  charge_compile_memory(node_bytes(n));
  return Expr(std::make_shared<const ExprNode>(std::move(n)));
}

// Appends the byte sequences of [lo, hi] (both encoded with the same number
// of bytes) as sequences of byte ranges, splitting where a continuation byte
// would not span its full 0x80..0xBF range (the construction of Russ Cox's
// RE2 and Rust's utf8-ranges).
void split_same_length(uint32_t lo, uint32_t hi, std::vector<Expr>& out) {
  const std::string a = utf8_encode(lo), b = utf8_encode(hi);
  const size_t n = a.size();
  for (size_t i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;  // the low i continuation bytes
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        split_same_length(lo, lo | m, out);
        split_same_length((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        split_same_length(lo, (hi & ~m) - 1, out);
        split_same_length(hi & ~m, hi, out);
        return;
      }
    }
  }
  std::vector<Expr> parts;
  for (size_t i = 0; i < n; ++i)
    parts.push_back(byte_range(static_cast<uint8_t>(a[i]), static_cast<uint8_t>(b[i])));
  out.push_back(seq(std::move(parts)));
}

void split_range(uint32_t lo, uint32_t hi, std::vector<Expr>& out) {
  static constexpr uint32_t kEnds[] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
  for (uint32_t end : kEnds) {
    if (lo > end) continue;
    const uint32_t h = std::min(hi, end);
    split_same_length(lo, h, out);
    if (h == hi) return;
    lo = h + 1;
  }
}

CodepointRanges normalized(CodepointRanges r) {
  std::sort(r.begin(), r.end());
  CodepointRanges out;
  for (auto [lo, hi] : r) {
    hi = std::min<uint32_t>(hi, 0x10FFFF);
    if (lo > hi) continue;
    if (!out.empty() && lo <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, hi);
    } else {
      out.emplace_back(lo, hi);
    }
  }
  return out;
}

}  // namespace

Expr::Expr() : node_(std::make_shared<const ExprNode>()) { charge_compile_memory(node_bytes(*node_)); }

Expr literal(std::string_view bytes) {
  ExprNode n;
  n.kind = ExprNode::Kind::kLiteral;
  n.literal = std::string(bytes);
  return make(std::move(n));
}

Expr byte_set(const ByteSet& set) {
  ExprNode n;
  n.kind = ExprNode::Kind::kBytes;
  n.bytes = set;
  return make(std::move(n));
}

Expr byte_range(uint8_t lo, uint8_t hi) {
  ByteSet s;
  for (int b = lo; b <= hi; ++b) s.set(static_cast<size_t>(b));
  return byte_set(s);
}

Expr seq(std::vector<Expr> parts) {
  if (parts.size() == 1) return parts[0];
  ExprNode n;
  n.kind = ExprNode::Kind::kSeq;
  n.children = std::move(parts);
  return make(std::move(n));
}

Expr alt(std::vector<Expr> options) {
  if (options.size() == 1) return options[0];
  ExprNode n;
  n.kind = options.empty() ? ExprNode::Kind::kNothing : ExprNode::Kind::kAlt;
  n.children = std::move(options);
  return make(std::move(n));
}

Expr nothing() { return alt({}); }

Expr repeat(Expr x, int32_t min, std::optional<int32_t> max) {
  KVLM_ASSERT(min >= 0 && (!max || *max >= min), "repeat bounds out of order");
  if (min == 1 && max == 1) return x;
  ExprNode n;
  n.kind = ExprNode::Kind::kRepeat;
  n.children = {std::move(x)};
  n.min = min;
  n.max = max;
  return make(std::move(n));
}

Expr optional(Expr x) { return repeat(std::move(x), 0, 1); }

Expr ref(RuleId rule) {
  ExprNode n;
  n.kind = ExprNode::Kind::kRef;
  n.rule = rule;
  return make(std::move(n));
}

std::string utf8_encode(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

CodepointRanges complement(CodepointRanges ranges) {
  ranges = normalized(std::move(ranges));
  CodepointRanges out;
  uint32_t next = 0;
  for (auto [lo, hi] : ranges) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= 0x10FFFF) out.emplace_back(next, 0x10FFFF);
  return out;
}

Expr utf8_class(const CodepointRanges& ranges) {
  // Surrogates are not characters: UTF-8 cannot carry them.
  CodepointRanges r;
  for (auto [lo, hi] : normalized(ranges)) {
    if (hi < 0xD800 || lo > 0xDFFF) {
      r.emplace_back(lo, hi);
      continue;
    }
    if (lo < 0xD800) r.emplace_back(lo, 0xD7FF);
    if (hi > 0xDFFF) r.emplace_back(0xE000, hi);
  }
  // The one-byte part as a single byte set keeps ASCII classes one edge.
  std::vector<Expr> out;
  ByteSet ascii;
  for (auto [lo, hi] : r) {
    for (uint32_t c = lo; c <= std::min<uint32_t>(hi, 0x7F); ++c) ascii.set(c);
    if (hi >= 0x80) split_range(std::max<uint32_t>(lo, 0x80), hi, out);
  }
  if (ascii.any()) out.insert(out.begin(), byte_set(ascii));
  return alt(std::move(out));
}

RuleId Grammar::add_rule(std::string name) {
  charge_compile_memory(static_cast<int64_t>(sizeof(Rule) + (name.capacity() > 15 ? name.capacity() + 1 : 0)));
  rules_.push_back({std::move(name), std::nullopt});
  return static_cast<RuleId>(rules_.size() - 1);
}

void Grammar::define(RuleId rule, Expr body) {
  KVLM_ASSERT(rule >= 0 && rule < num_rules(), "rule id outside the grammar");
  rules_[rule].body = std::move(body);
}

}  // namespace kvlm::constrain
