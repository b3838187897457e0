// Compiled grammars for a server: one memory budget for every compilation
// and every compiled grammar still held (by the cache or by running
// requests), a bounded number of compilations at once, and a cache keyed by
// the canonical text of what a grammar compiles, so a client repeating one
// schema compiles it once.
//
//   GrammarCache grammars(GrammarLimits{.memory_bytes = 1 << 30});
//   auto program = grammars.get(canonical_schema_text(schema), [&] { return json_schema_program(schema); });
//
// A compilation is charged as it grows (compile_budget.h) and refused early:
// past max_grammar_bytes alone (GrammarLimit::kTooLarge), or when the budget
// is held by others even after the cache gave back what nobody uses
// (kMemory); unused cached grammars also go, least recently used first,
// past max_cached_bytes. One that finds every slot taken waits up to max_wait, as does a
// request whose grammar another request is compiling, then gives up (kBusy).
// A compiled grammar's bytes stay counted until its last holder drops it.
// Refusals for what a grammar says or costs alone are cached too, so a
// client repeating a hostile schema is answered at the cost of a lookup.
//
// Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "constrain/compile_budget.h"
#include "constrain/program.h"

namespace kvlm::constrain {

struct GrammarLimits {
  int64_t memory_bytes = 1 << 30;  // every compilation and compiled grammar together
  int64_t max_grammar_bytes = 0;   // one compilation; 0: a quarter of memory_bytes
  // What the cache keeps of it for grammars nobody runs now (0: a sixteenth of
  // memory_bytes): past it the least recently used go, so after a burst of
  // distinct schemas the process comes back near its idle size.
  int64_t max_cached_bytes = 0;
  int32_t max_compilations = 1;    // at once
  std::chrono::milliseconds max_wait{2000};
};

// The default budget for a machine with `physical_bytes` of memory: a
// sixteenth of it, between 64 MiB and 1 GiB.
int64_t default_grammar_memory(int64_t physical_bytes);

struct GrammarStats {
  int64_t num_bytes_in_use = 0;  // compilations, the cache and grammars held by requests
  int64_t budget_bytes = 0;
  int64_t num_cached = 0;        // compiled grammars (and refusals) in the cache
  int64_t num_cached_bytes = 0;  // theirs and their keys' (at most GrammarLimits::max_cached_bytes)
  int32_t num_compiling = 0;
  int32_t num_waiting = 0;       // for a slot or for another request's compilation
  int64_t num_compiled = 0;
  int64_t num_hits = 0;          // answered from the cache (or another request's compilation)
  int64_t num_refused[3] = {};   // by GrammarLimit
};

class GrammarCache {
 public:
  using Build = std::function<std::shared_ptr<const Program>()>;

  explicit GrammarCache(GrammarLimits limits);
  ~GrammarCache();
  GrammarCache(const GrammarCache&) = delete;
  GrammarCache& operator=(const GrammarCache&) = delete;

  // The grammar `build` compiles, whose canonical text is `key` (empty: not
  // cached), built under this cache's budget or found in the cache. Throws
  // GrammarLimitError for the limits above, and what `build` throws.
  std::shared_ptr<const Program> get(const std::string& key, const Build& build);
  GrammarStats stats() const;
  const GrammarLimits& limits() const { return limits_; }

 private:
  struct Entry {
    std::shared_ptr<const Program> program;  // null while compiling, or for a refusal
    std::exception_ptr refusal;              // what compiling it threw (kTooLarge, or the input refused)
    bool compiling = false;
    int64_t num_bytes = 0;                   // taken from the budget for the entry itself
    int64_t num_program_bytes = 0;           // the compiled grammar's, once finished
    std::list<std::string>::iterator lru;
  };
  using Lock = std::unique_lock<std::mutex>;
  using Deadline = std::chrono::steady_clock::time_point;

  std::shared_ptr<const Program> from_entry(Lock& lock, const std::string& key, Deadline deadline);
  void take_slot(Lock& lock, Deadline deadline);
  std::shared_ptr<const Program> compile(const Build& build);
  void finish(const std::string& key, std::shared_ptr<const Program> program, const std::exception_ptr& error);
  void drop(std::unordered_map<std::string, Entry>::iterator it);  // under mu_
  bool reclaim(int64_t bytes);
  void keep_cache_within_limit();  // under mu_
  [[noreturn]] void refuse(GrammarLimit limit, std::string message);

  const GrammarLimits limits_;
  // Shared with the compiled grammars handed out, which give their bytes
  // back when their last holder (a request, the cache) drops them, maybe
  // after the cache is gone.
  std::shared_ptr<MemoryBudget> budget_;
  mutable std::mutex mu_;
  std::condition_variable changed_;  // a slot came free or a compilation ended
  std::unordered_map<std::string, Entry> entries_;
  std::list<std::string> lru_;       // keys of finished entries, most recent first
  int64_t num_cached_bytes_ = 0;     // the finished entries' num_bytes and num_program_bytes
  int32_t num_compiling_ = 0;
  int32_t num_waiting_ = 0;
  int64_t num_compiled_ = 0;
  int64_t num_hits_ = 0;
  int64_t num_refused_[3] = {};
};

}  // namespace kvlm::constrain
