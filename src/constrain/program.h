// A Grammar compiled for matching: a recursive transition network over bytes.
// Each rule is a small NFA whose states have byte-range edges, epsilon edges
// and at most one call (enter another rule, come back to a return state).
// Matching keeps a set of (state, return stack) threads (matcher.h).
//
// Immutable once built: one Program is shared by every request (and every
// choice of a request) that uses the same constraint. It is stored flat
// (every state's edges and epsilon closure in one array each), so a state
// costs 12 bytes, an edge 8 and a closure entry 4, with no allocation per
// state: grammars of hundreds of thousands of states stay a few MB.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "constrain/grammar.h"

namespace kvlm::constrain {

struct ByteEdge {
  uint8_t lo = 0, hi = 0;  // inclusive byte range
  int32_t target = 0;
};

struct NfaState {
  int32_t call_rule = -1;    // >= 0: enter this rule, then continue at call_return
  int32_t call_return = -1;
  bool rule_end = false;     // the end of a rule's body: return to the caller
};

// Most states a program may have, and most repetitions one `{m,n}` may ask
// for: past these a grammar is refused rather than eating the server's memory.
inline constexpr int32_t kMaxProgramStates = 500'000;
inline constexpr int32_t kMaxRepeat = 100'000;
// Most entries all epsilon closures together may hold: (a?){1000}-style
// patterns make closures quadratic in the pattern, and are refused here.
inline constexpr int64_t kMaxClosureEntries = 4'000'000;
// Most bytes the compilation of one program may allocate for its own arrays
// (the state limit in bytes; a compilation's whole memory, its expression
// tree included, is charged to its CompileBudget besides).
inline constexpr int64_t kMaxProgramBytes = 64 << 20;

class Program {
 public:
  // Throws Error(kInvalidArgument) for a rule referenced but never defined,
  // a repetition over kMaxRepeat, a grammar over kMaxProgramStates or
  // kMaxProgramBytes or with epsilon closures over kMaxClosureEntries. The
  // compilation's memory is charged to the thread's CompileBudget as it
  // grows (compile_budget.h), which may stop it early.
  static std::shared_ptr<const Program> compile(const Grammar& grammar);

  const NfaState& state(int32_t s) const { return states_[s]; }
  int32_t num_states() const { return static_cast<int32_t>(states_.size()); }
  std::span<const ByteEdge> edges(int32_t s) const {
    return {edges_.data() + edge_begin_[s], static_cast<size_t>(edge_begin_[s + 1] - edge_begin_[s])};
  }
  int32_t rule_start(int32_t rule) const { return rule_start_[rule]; }
  int32_t start() const { return start_; }
  // The states reachable from s through epsilon edges alone (s included)
  // that matter to a matcher: those with byte edges, calls or rule ends.
  // Precomputed so a step does not walk the epsilon graph again and again,
  // and only for the states a matcher enters (the start, rule starts, call
  // returns and byte-edge targets): empty for the others.
  std::span<const int32_t> eps_closure(int32_t s) const {
    return {closures_.data() + closure_begin_[s], static_cast<size_t>(closure_begin_[s + 1] - closure_begin_[s])};
  }
  // A state with no edges that stands for "the whole grammar has matched".
  int32_t accept() const { return accept_; }

  int64_t num_edges() const { return static_cast<int64_t>(edges_.size()); }
  int64_t num_closure_entries() const { return static_cast<int64_t>(closures_.size()); }
  // The bytes this program holds (its arrays' capacity and itself).
  int64_t num_bytes() const;

 private:
  friend class ProgramBuilder;
  std::vector<NfaState> states_;
  std::vector<int32_t> edge_begin_;     // [num_states + 1] into edges_
  std::vector<ByteEdge> edges_;         // by state
  std::vector<int32_t> closure_begin_;  // [num_states + 1] into closures_
  std::vector<int32_t> closures_;       // by state
  std::vector<int32_t> rule_start_;     // -1: a rule nothing reaches (not compiled)
  int32_t start_ = 0;
  int32_t accept_ = 0;
};

}  // namespace kvlm::constrain
