// Grammars over bytes: a small immutable expression tree (literal, byte
// class, sequence, alternation, bounded repetition, reference to a named
// rule for recursion) and the Grammar that names its rules. Every compiler in
// src/constrain/ (JSON Schema, regex, choice) produces one; others compose
// them, e.g. a tool call wrapped in tags, repeated:
//
//   Grammar g;
//   Expr call = literal("<tool_call>") + json_schema_expr(g, schema) + literal("</tool_call>");
//   g.set_root(repeat(call, 1, std::nullopt));
//
// Everything is bytes: text is matched as its UTF-8 encoding, and a class of
// code points becomes alternatives of byte ranges (utf8_class).
#pragma once

#include <bitset>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvlm::constrain {

using ByteSet = std::bitset<256>;

struct ExprNode;

// A grammar expression. Cheap to copy: nodes are immutable and shared
// (shared_ptr because one subtree is used by many parents, e.g. the same
// value schema under several properties).
class Expr {
 public:
  Expr();  // the empty sequence (matches "")
  explicit Expr(std::shared_ptr<const ExprNode> node) : node_(std::move(node)) {}
  const ExprNode& node() const { return *node_; }

 private:
  std::shared_ptr<const ExprNode> node_;
};

using RuleId = int32_t;

struct ExprNode {
  enum class Kind { kLiteral, kBytes, kSeq, kAlt, kRepeat, kRef, kNothing };
  Kind kind = Kind::kSeq;
  std::string literal;            // kLiteral
  ByteSet bytes;                  // kBytes: one byte out of this set
  std::vector<Expr> children;     // kSeq, kAlt; kRepeat: one child
  int32_t min = 0;                // kRepeat
  std::optional<int32_t> max;     // kRepeat; nullopt: unbounded
  RuleId rule = -1;               // kRef
};

Expr literal(std::string_view bytes);
Expr byte_set(const ByteSet& set);
Expr byte_range(uint8_t lo, uint8_t hi);
Expr seq(std::vector<Expr> parts);
Expr alt(std::vector<Expr> options);  // no options: matches nothing
Expr nothing();                       // matches no string at all
// x repeated min..max times (max nullopt: unbounded). Precondition:
// 0 <= min <= *max.
Expr repeat(Expr x, int32_t min, std::optional<int32_t> max);
Expr optional(Expr x);
Expr ref(RuleId rule);
inline Expr operator+(Expr a, Expr b) { return seq({std::move(a), std::move(b)}); }
inline Expr operator|(Expr a, Expr b) { return alt({std::move(a), std::move(b)}); }

// Inclusive ranges of Unicode code points; surrogates are never produced.
using CodepointRanges = std::vector<std::pair<uint32_t, uint32_t>>;
// One code point from `ranges`, as its UTF-8 bytes.
Expr utf8_class(const CodepointRanges& ranges);
// The complement of `ranges` in [0, 0x10FFFF] (sorted and merged).
CodepointRanges complement(CodepointRanges ranges);
// UTF-8 encoding of one code point.
std::string utf8_encode(uint32_t cp);

// Named rules and a root. Rules make recursion possible ($ref, any JSON
// value) and keep repeated sub-grammars from being copied.
class Grammar {
 public:
  RuleId add_rule(std::string name);           // defined later with define()
  void define(RuleId rule, Expr body);
  RuleId add_rule(std::string name, Expr body) {
    RuleId r = add_rule(std::move(name));
    define(r, std::move(body));
    return r;
  }
  void set_root(Expr root) { root_ = std::move(root); }

  int32_t num_rules() const { return static_cast<int32_t>(rules_.size()); }
  const std::string& rule_name(RuleId r) const { return rules_[r].name; }
  const std::optional<Expr>& rule_body(RuleId r) const { return rules_[r].body; }
  const Expr& root() const { return root_; }

 private:
  struct Rule {
    std::string name;
    std::optional<Expr> body;
  };
  std::vector<Rule> rules_;
  Expr root_;
};

}  // namespace kvlm::constrain
