// One request's position in a grammar: the set of threads (NFA state plus
// return stack) that the bytes so far leave alive. Advanced by each sampled
// token's bytes; asked which tokens may come next by token_mask.h.
//
// Return stacks are hash-consed frames in an arena owned by the matcher, so
// equal stacks are equal ids and a thread set deduplicates by (state, stack).
// Not thread-safe; one per request (each choice of n has its own).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "constrain/program.h"

namespace kvlm::constrain {

struct Thread {
  int32_t state;
  int32_t stack;  // frame id; -1: empty
  bool operator==(const Thread&) const = default;
};
using Threads = std::vector<Thread>;

// Deepest rule nesting a thread may reach (left recursion and runaway $ref
// recursion end here instead of growing without bound).
inline constexpr int32_t kMaxStackDepth = 512;

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const Program> program);

  // Consumes `bytes` if the grammar allows all of them; otherwise returns
  // false and leaves the state as it was.
  bool advance(std::string_view bytes);
  // The bytes so far are a complete match.
  bool accepting() const { return accepting(threads_); }
  // Some byte may still follow.
  bool can_continue() const { return can_continue(threads_); }
  // Complete, and nothing may follow: only the end of generation is left.
  bool complete() const { return accepting() && !can_continue(); }
  // Nothing matches any more (the bytes left the grammar): only reachable
  // through step(), never after advance().
  bool dead() const { return threads_.empty(); }

  // For the token-mask walk: the threads after `byte` from `from` (empty:
  // rejected). `to` is cleared first.
  void step(const Threads& from, uint8_t byte, Threads& to);
  const Threads& threads() const { return threads_; }
  bool accepting(const Threads& t) const;
  bool can_continue(const Threads& t) const;
  const Program& program() const { return *program_; }

  // A lazily built DFA over thread sets, for the token-mask walk: sets are
  // interned (sorted, so equal sets are one id) and each (set, byte) step is
  // computed once and then looked up. The cache lives as long as the matcher,
  // so later steps of a generation reuse what earlier ones built; ids stay
  // valid until the next reset_cache_if_large().
  int32_t current_set();
  int32_t next_set(int32_t set, uint8_t byte);  // -1: the byte is refused
  bool set_accepting(int32_t set) const { return set_accepting_[set] != 0; }
  // Drops the cache past kMaxCachedSets sets or kMaxCacheBytes (call
  // between walks, never inside): a request's matcher stays a few MB
  // whatever the grammar, however long it runs.
  void reset_cache_if_large();
  static constexpr size_t kMaxCachedSets = 4096;
  static constexpr int64_t kMaxCacheBytes = 4 << 20;
  int64_t num_cache_bytes() const { return num_cache_bytes_; }

 private:
  int32_t intern_set(Threads t);
  struct Frame {
    int32_t ret;
    int32_t parent;
    int32_t depth;
  };
  void closure(int32_t state, int32_t stack, Threads& to);
  bool first_visit(uint64_t key);  // (state, stack) not yet met in this step
  void clear_seen();
  int32_t push(int32_t ret, int32_t parent);

  std::shared_ptr<const Program> program_;  // shared with every request on this grammar
  Threads threads_;
  std::vector<Frame> frames_;
  std::unordered_map<uint64_t, int32_t> frame_ids_;  // (ret, parent) -> frame
  static constexpr size_t kLinearSeen = 64;
  std::vector<uint64_t> seen_;    // scratch: (state, stack) visited by one step, the first kLinearSeen
  std::unordered_set<uint64_t> seen_set_;  // all of them, once there are kLinearSeen
  std::vector<Thread> work_;      // scratch: closure's stack
  Threads scratch_;
  std::vector<Threads> sets_;                        // by set id
  std::vector<std::array<int32_t, 256>> next_;       // by set id, byte; kUnknown until computed
  std::vector<uint8_t> set_accepting_;               // by set id
  std::unordered_map<std::string, int32_t> set_ids_;  // sorted threads' bytes -> set id
  int32_t current_ = -1;                             // set id of threads_; -1: not interned yet
  int64_t num_cache_bytes_ = 0;                      // what sets_, next_ and set_ids_ hold, about
};

}  // namespace kvlm::constrain
