#include "constrain/program.h"

#include <unordered_map>

#include "common/error.h"

namespace kvlm::constrain {

// Thompson's construction, one fragment (start, end) per expression.
class ProgramBuilder {
 public:
  explicit ProgramBuilder(const Grammar& g) : g_(g) { p_ = std::make_shared<Program>(); }

  std::shared_ptr<const Program> build() {
    const int32_t num_rules = g_.num_rules();
    p_->rule_start_.assign(num_rules, -1);
    // Rule starts first, so calls can name them before their bodies exist.
    std::vector<int32_t> ends(num_rules);
    for (int32_t r = 0; r < num_rules; ++r) {
      if (!g_.rule_body(r)) throw_error(ErrorCode::kInvalidArgument, "grammar rule '{}' is never defined", g_.rule_name(r));
      p_->rule_start_[r] = new_state();
      ends[r] = new_state();
      p_->states_[ends[r]].rule_end = true;
    }
    for (int32_t r = 0; r < num_rules; ++r) body(*g_.rule_body(r), p_->rule_start_[r], ends[r]);
    p_->start_ = new_state();
    const int32_t end = new_state();
    p_->states_[end].rule_end = true;
    body(g_.root(), p_->start_, end);
    // Hidden rules made for big repeated sub-expressions (which may add more).
    for (size_t i = 0; i < hidden_.size(); ++i) {
      const Hidden h = hidden_[i];
      body(h.expr, h.start, h.end);
    }
    p_->accept_ = new_state();
    close_epsilons();
    return p_;
  }

 private:
  struct Hidden {
    Expr expr;
    int32_t start, end;
  };

  int32_t new_state() {
    if (static_cast<int32_t>(p_->states_.size()) >= kMaxProgramStates)
      throw_error(ErrorCode::kInvalidArgument, "the grammar is too large (over {} states)", kMaxProgramStates);
    p_->states_.emplace_back();
    return static_cast<int32_t>(p_->states_.size() - 1);
  }
  void eps(int32_t from, int32_t to) { p_->states_[from].eps.push_back(to); }

  // Compiles `e` between the existing states `from` and `to`.
  void body(const Expr& e, int32_t from, int32_t to) {
    const ExprNode& n = e.node();
    switch (n.kind) {
      case ExprNode::Kind::kLiteral: {
        int32_t at = from;
        for (size_t i = 0; i < n.literal.size(); ++i) {
          const int32_t next = i + 1 == n.literal.size() ? to : new_state();
          const auto b = static_cast<uint8_t>(n.literal[i]);
          p_->states_[at].edges.push_back({b, b, next});
          at = next;
        }
        if (n.literal.empty()) eps(from, to);
        return;
      }
      case ExprNode::Kind::kBytes:
        for (int b = 0; b < 256;) {
          if (!n.bytes.test(static_cast<size_t>(b))) { ++b; continue; }
          int hi = b;
          while (hi + 1 < 256 && n.bytes.test(static_cast<size_t>(hi + 1))) ++hi;
          p_->states_[from].edges.push_back({static_cast<uint8_t>(b), static_cast<uint8_t>(hi), to});
          b = hi + 1;
        }
        return;
      case ExprNode::Kind::kSeq: {
        int32_t at = from;
        for (size_t i = 0; i < n.children.size(); ++i) {
          const int32_t next = i + 1 == n.children.size() ? to : new_state();
          body(n.children[i], at, next);
          at = next;
        }
        if (n.children.empty()) eps(from, to);
        return;
      }
      case ExprNode::Kind::kAlt:
        for (const Expr& c : n.children) {
          const int32_t s = new_state(), t = new_state();
          eps(from, s);
          body(c, s, t);
          eps(t, to);
        }
        return;
      case ExprNode::Kind::kNothing: return;
      case ExprNode::Kind::kRef: call(n.rule, from, to); return;
      case ExprNode::Kind::kRepeat: repeat(n, from, to); return;
    }
  }

  void call(int32_t rule, int32_t from, int32_t to) {
    const int32_t s = new_state();
    eps(from, s);
    p_->states_[s].call_rule = rule;
    p_->states_[s].call_return = to;
  }

  // Counts nodes, refs as one, stopping early past `limit`.
  static int64_t size(const Expr& e, int64_t limit) {
    const ExprNode& n = e.node();
    int64_t total = 1 + static_cast<int64_t>(n.literal.size());
    for (const Expr& c : n.children) {
      if (total > limit) break;
      total += size(c, limit) * (n.kind == ExprNode::Kind::kRepeat ? std::max<int64_t>(n.max.value_or(n.min), 1) : 1);
    }
    return total;
  }

  // One copy of the repeated expression: inline when small, else a call to a
  // hidden rule compiled once (a string of 500 JSON characters is 500 calls,
  // not 500 copies of the UTF-8 automaton).
  void copy(const ExprNode& n, bool as_call, int32_t from, int32_t to) {
    if (!as_call) return body(n.children[0], from, to);
    if (hidden_rule_ < 0) {
      const int32_t start = new_state(), end = new_state();
      p_->states_[end].rule_end = true;
      hidden_rule_ = static_cast<int32_t>(p_->rule_start_.size());
      p_->rule_start_.push_back(start);
      hidden_.push_back({n.children[0], start, end});
    }
    call(hidden_rule_, from, to);
  }

  void repeat(const ExprNode& n, int32_t from, int32_t to) {
    const int32_t count = n.max.value_or(n.min);
    if (count > kMaxRepeat || n.min > kMaxRepeat)
      throw_error(ErrorCode::kInvalidArgument, "a repetition of {} exceeds the limit of {}", count, kMaxRepeat);
    const int32_t saved = hidden_rule_;
    hidden_rule_ = -1;
    const bool as_call = count > 2 && size(n.children[0], 64) * count > 4096;
    int32_t at = from;
    for (int32_t i = 0; i < n.min; ++i) {
      const int32_t next = new_state();
      copy(n, as_call, at, next);
      at = next;
    }
    if (!n.max) {
      const int32_t loop = new_state(), back = new_state();
      eps(at, loop);
      copy(n, as_call, loop, back);
      eps(back, loop);
      eps(loop, to);
    } else {
      for (int32_t i = n.min; i < *n.max; ++i) {
        const int32_t next = new_state();
        eps(at, to);
        copy(n, as_call, at, next);
        at = next;
      }
      eps(at, to);
    }
    hidden_rule_ = saved;
  }

  void close_epsilons() {
    const int32_t n = p_->num_states();
    p_->eps_closure_.resize(n);
    std::vector<int32_t> mark(n, -1), stack;
    int64_t total = 0;
    for (int32_t s = 0; s < n; ++s) {
      std::vector<int32_t>& out = p_->eps_closure_[s];
      stack.assign(1, s);
      mark[s] = s;
      while (!stack.empty()) {
        const int32_t x = stack.back();
        stack.pop_back();
        const NfaState& st = p_->states_[x];
        if (!st.edges.empty() || st.call_rule >= 0 || st.rule_end) {
          out.push_back(x);
          if (++total > kMaxClosureEntries)
            throw_error(ErrorCode::kInvalidArgument, "the grammar is too complex (its optional parts nest too deeply)");
        }
        for (int32_t e : st.eps)
          if (mark[e] != s) {
            mark[e] = s;
            stack.push_back(e);
          }
      }
    }
  }

  const Grammar& g_;
  std::shared_ptr<Program> p_;
  std::vector<Hidden> hidden_;
  int32_t hidden_rule_ = -1;  // the hidden rule of the repetition being compiled
};

std::shared_ptr<const Program> Program::compile(const Grammar& grammar) { return ProgramBuilder(grammar).build(); }

}  // namespace kvlm::constrain
