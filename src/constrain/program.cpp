#include "constrain/program.h"

#include <algorithm>
#include <string_view>
#include <unordered_set>

#include <fmt/format.h>

#include "common/error.h"
#include "constrain/compile_budget.h"

namespace kvlm::constrain {

int64_t Program::num_bytes() const {
  auto bytes = [](const auto& v) { return static_cast<int64_t>(v.capacity() * sizeof(v[0])); };
  return static_cast<int64_t>(sizeof(Program)) + bytes(states_) + bytes(edge_begin_) + bytes(edges_) +
         bytes(closure_begin_) + bytes(closures_) + bytes(rule_start_);
}

// Thompson's construction, one fragment (start, end) per expression. Edges
// are collected as (from, edge) pairs and sorted into the program's flat
// arrays at the end; every array's growth is charged as it happens.
class ProgramBuilder {
 public:
  explicit ProgramBuilder(const Grammar& g) : g_(g) { p_ = std::make_shared<Program>(); }

  std::shared_ptr<const Program> build() {
    const int32_t num_rules = g_.num_rules();
    const std::vector<bool> reached = reachable_rules();
    grow(p_->rule_start_, static_cast<size_t>(num_rules), -1);
    // Rule starts first, so calls can name them before their bodies exist.
    std::vector<int32_t> ends(num_rules, -1);
    for (int32_t r = 0; r < num_rules; ++r) {
      if (!reached[r]) continue;
      p_->rule_start_[r] = new_state();
      ends[r] = new_state();
      p_->states_[ends[r]].rule_end = true;
    }
    for (int32_t r = 0; r < num_rules; ++r)
      if (reached[r]) body(*g_.rule_body(r), p_->rule_start_[r], ends[r]);
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
    sort_edges();
    close_epsilons();
    return p_;
  }

 private:
  struct Hidden {
    Expr expr;
    int32_t start, end;
  };
  struct PendingEdge {
    int32_t from;
    ByteEdge edge;
  };
  struct EpsEdge {
    int32_t from, to;
  };

  // Appends to a vector the builder owns, charging its growth (the
  // allocation is made here, on doubling, so the charge is what it costs).
  template <typename T>
  void push(std::vector<T>& v, T x) {
    if (v.size() == v.capacity()) reserve(v, std::max<size_t>(16, v.capacity() * 2));
    v.push_back(std::move(x));
  }
  template <typename T>
  void reserve(std::vector<T>& v, size_t n) {
    if (n <= v.capacity()) return;
    const auto bytes = static_cast<int64_t>((n - v.capacity()) * sizeof(T));
    num_bytes_ += bytes;
    if (num_bytes_ > kMaxProgramBytes)
      throw GrammarLimitError(GrammarLimit::kTooLarge,
                              fmt::format("the grammar is too large (over {} MiB)", kMaxProgramBytes >> 20));
    charge_compile_memory(bytes);
    v.reserve(n);
  }
  template <typename T>
  void grow(std::vector<T>& v, size_t n, T fill) {
    reserve(v, n);
    v.resize(n, fill);
  }

  // Rules the root reaches (through references in reached rules): only
  // those are compiled. Shared sub-expressions are walked once.
  std::vector<bool> reachable_rules() {
    std::vector<bool> reached(static_cast<size_t>(g_.num_rules()), false);
    std::unordered_set<const ExprNode*> seen;
    std::vector<const ExprNode*> todo{&g_.root().node()};
    while (!todo.empty()) {
      const ExprNode* n = todo.back();
      todo.pop_back();
      if (!seen.insert(n).second) continue;
      charge_compile_memory(32);  // a hash-set node
      if (n->kind == ExprNode::Kind::kRef) {
        if (reached[n->rule]) continue;
        if (!g_.rule_body(n->rule))
          throw_error(ErrorCode::kInvalidArgument, "grammar rule '{}' is never defined", g_.rule_name(n->rule));
        reached[n->rule] = true;
        todo.push_back(&g_.rule_body(n->rule)->node());
      }
      for (const Expr& c : n->children) todo.push_back(&c.node());
    }
    return reached;
  }

  int32_t new_state() {
    if (static_cast<int32_t>(p_->states_.size()) >= kMaxProgramStates)
      throw GrammarLimitError(GrammarLimit::kTooLarge,
                              fmt::format("the grammar is too large (over {} states)", kMaxProgramStates));
    push(p_->states_, NfaState{});
    return static_cast<int32_t>(p_->states_.size() - 1);
  }
  void eps(int32_t from, int32_t to) { push(eps_, EpsEdge{from, to}); }
  void edge(int32_t from, uint8_t lo, uint8_t hi, int32_t to) { push(pending_, PendingEdge{from, ByteEdge{lo, hi, to}}); }

  // Compiles `e` between the existing states `from` and `to`.
  void body(const Expr& e, int32_t from, int32_t to) {
    const ExprNode& n = e.node();
    switch (n.kind) {
      case ExprNode::Kind::kLiteral: {
        int32_t at = from;
        for (size_t i = 0; i < n.literal.size(); ++i) {
          const int32_t next = i + 1 == n.literal.size() ? to : new_state();
          const auto b = static_cast<uint8_t>(n.literal[i]);
          edge(at, b, b, next);
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
          edge(from, static_cast<uint8_t>(b), static_cast<uint8_t>(hi), to);
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
        if (all_literals(n)) return literal_trie(n, from, to);
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

  static bool all_literals(const ExprNode& n) {
    if (n.children.size() < 3) return false;
    for (const Expr& c : n.children)
      if (c.node().kind != ExprNode::Kind::kLiteral) return false;
    return true;
  }

  // Alternatives that are all literals (an enum, a guided choice) as a
  // byte trie: shared prefixes are shared states, so 20,000 values that
  // begin alike cost a state per distinct byte, and a matcher follows one
  // thread down their common prefix instead of 20,000. Sorted, a word
  // shares its prefix with the word before it; path[d] is the state after
  // d bytes of that word.
  void literal_trie(const ExprNode& n, int32_t from, int32_t to) {
    std::vector<std::string_view> words;
    reserve(words, n.children.size());
    for (const Expr& c : n.children) words.push_back(c.node().literal);
    std::sort(words.begin(), words.end());
    words.erase(std::unique(words.begin(), words.end()), words.end());
    std::vector<int32_t> path{from};
    std::string_view prev;
    for (std::string_view w : words) {
      size_t common = 0;
      while (common < prev.size() && common < w.size() && prev[common] == w[common]) ++common;
      path.resize(common + 1);
      for (size_t d = common; d < w.size(); ++d) {
        const int32_t next = new_state();
        const auto b = static_cast<uint8_t>(w[d]);
        edge(path[d], b, b, next);
        path.push_back(next);
      }
      eps(path[w.size()], to);
      prev = w;
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
      push(p_->rule_start_, start);
      push(hidden_, Hidden{n.children[0], start, end});
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

  // Counting sort of `items` by their state into `begin` (num_states + 1
  // offsets) and `out`, keeping each state's items in the order they came.
  template <typename In, typename Out, typename From, typename Value>
  void by_state(const std::vector<In>& items, std::vector<int32_t>& begin, std::vector<Out>& out, From from,
                Value value) {
    const auto n = static_cast<size_t>(p_->num_states());
    grow(begin, n + 1, 0);
    for (const In& x : items) ++begin[from(x) + 1];
    for (size_t s = 0; s < n; ++s) begin[s + 1] += begin[s];
    grow(out, items.size(), Out{});
    std::vector<int32_t> at;
    grow(at, n, 0);
    std::copy(begin.begin(), begin.end() - 1, at.begin());
    for (const In& x : items) out[at[from(x)]++] = value(x);
  }

  void sort_edges() {
    by_state(pending_, p_->edge_begin_, p_->edges_, [](const PendingEdge& e) { return e.from; },
             [](const PendingEdge& e) { return e.edge; });
    std::vector<PendingEdge>().swap(pending_);
  }

  // The epsilon closures of the states a matcher enters (Program::eps_closure).
  void close_epsilons() {
    const int32_t n = p_->num_states();
    std::vector<int32_t> eps_begin, eps_to;
    by_state(eps_, eps_begin, eps_to, [](const EpsEdge& e) { return e.from; }, [](const EpsEdge& e) { return e.to; });
    std::vector<EpsEdge>().swap(eps_);
    std::vector<uint8_t> entered;
    grow(entered, static_cast<size_t>(n), uint8_t{0});
    entered[p_->start_] = 1;
    for (int32_t r : p_->rule_start_)
      if (r >= 0) entered[r] = 1;
    for (const NfaState& s : p_->states_)
      if (s.call_rule >= 0) entered[s.call_return] = 1;
    for (const ByteEdge& e : p_->edges_) entered[e.target] = 1;
    grow(p_->closure_begin_, static_cast<size_t>(n) + 1, 0);
    std::vector<int32_t> mark, stack;
    grow(mark, static_cast<size_t>(n), -1);
    for (int32_t s = 0; s < n; ++s) {
      p_->closure_begin_[s] = static_cast<int32_t>(p_->closures_.size());
      if (entered[s]) closure_of(s, eps_begin, eps_to, mark, stack);
    }
    p_->closure_begin_[n] = static_cast<int32_t>(p_->closures_.size());
  }

  void closure_of(int32_t s, const std::vector<int32_t>& eps_begin, const std::vector<int32_t>& eps_to,
                  std::vector<int32_t>& mark, std::vector<int32_t>& stack) {
    stack.assign(1, s);
    mark[s] = s;
    while (!stack.empty()) {
      const int32_t x = stack.back();
      stack.pop_back();
      const NfaState& st = p_->states_[x];
      if (p_->edge_begin_[x] != p_->edge_begin_[x + 1] || st.call_rule >= 0 || st.rule_end) {
        if (static_cast<int64_t>(p_->closures_.size()) >= kMaxClosureEntries)
          throw GrammarLimitError(GrammarLimit::kTooLarge,
                                  "the grammar is too complex (its optional parts nest too deeply)");
        push(p_->closures_, x);
      }
      for (int32_t i = eps_begin[x]; i < eps_begin[x + 1]; ++i)
        if (const int32_t e = eps_to[i]; mark[e] != s) {
          mark[e] = s;
          stack.push_back(e);
        }
    }
  }

  const Grammar& g_;
  std::shared_ptr<Program> p_;
  std::vector<PendingEdge> pending_;
  std::vector<EpsEdge> eps_;
  std::vector<Hidden> hidden_;
  int32_t hidden_rule_ = -1;  // the hidden rule of the repetition being compiled
  int64_t num_bytes_ = 0;     // what the builder's arrays have allocated
};

std::shared_ptr<const Program> Program::compile(const Grammar& grammar) { return ProgramBuilder(grammar).build(); }

}  // namespace kvlm::constrain
