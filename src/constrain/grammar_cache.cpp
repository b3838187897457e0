#include "constrain/grammar_cache.h"

#include <algorithm>
#include <new>
#include <optional>

#include <fmt/format.h>

namespace kvlm::constrain {
namespace {

// What an entry costs besides its key: the map and list nodes, the entry.
constexpr int64_t kEntryBytes = 256;

GrammarLimits normalized(GrammarLimits l) {
  if (l.max_grammar_bytes <= 0) l.max_grammar_bytes = l.memory_bytes / 4;
  l.max_grammar_bytes = std::min(l.max_grammar_bytes, l.memory_bytes);
  if (l.max_cached_bytes <= 0) l.max_cached_bytes = l.memory_bytes / 16;
  l.max_compilations = std::max(l.max_compilations, 1);
  return l;
}

// A compiled program and the budget bytes it holds, given back when the
// last holder drops it.
class Charged {
 public:
  Charged(std::shared_ptr<const Program> program, std::shared_ptr<MemoryBudget> budget, int64_t num_bytes)
      : program(std::move(program)), budget_(std::move(budget)), num_bytes_(num_bytes) {}
  ~Charged() { budget_->give_back(num_bytes_); }
  Charged(const Charged&) = delete;
  Charged& operator=(const Charged&) = delete;
  const std::shared_ptr<const Program> program;

 private:
  std::shared_ptr<MemoryBudget> budget_;
  int64_t num_bytes_;
};

// Whether a compilation's failure would happen again with the same input
// (so it may be cached): not when it was the server's memory or time.
bool deterministic(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const GrammarLimitError& e) {
    return e.limit() == GrammarLimit::kTooLarge;
  } catch (const std::bad_alloc&) {
    return false;
  } catch (...) {
    return true;
  }
}

std::optional<GrammarLimit> limit_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const GrammarLimitError& e) {
    return e.limit();
  } catch (...) {
    return std::nullopt;
  }
}

}  // namespace

int64_t default_grammar_memory(int64_t physical_bytes) {
  return std::clamp<int64_t>(physical_bytes / 16, int64_t{64} << 20, int64_t{1} << 30);
}

GrammarCache::GrammarCache(GrammarLimits limits)
    : limits_(normalized(limits)), budget_(std::make_shared<MemoryBudget>(limits_.memory_bytes)) {}

GrammarCache::~GrammarCache() {
  Lock lock(mu_);
  while (!entries_.empty()) drop(entries_.begin());
}

std::shared_ptr<const Program> GrammarCache::get(const std::string& key, const Build& build) {
  const Deadline deadline = std::chrono::steady_clock::now() + limits_.max_wait;
  Lock lock(mu_);
  for (;;) {
    if (!key.empty())
      if (auto program = from_entry(lock, key, deadline)) return program;
    take_slot(lock, deadline);
    // While this request waited for a slot, another may have begun the
    // same grammar: then it waits for that one instead.
    if (key.empty() || !entries_.count(key)) break;
  }
  ++num_compiling_;
  if (!key.empty()) {
    // Others asking for this key wait for this compilation (from_entry).
    Entry& e = entries_[key];
    e.compiling = true;
    e.lru = lru_.end();
    e.num_bytes = static_cast<int64_t>(key.size()) + kEntryBytes;
    budget_->take(e.num_bytes);
  }
  lock.unlock();
  std::shared_ptr<const Program> program;
  std::exception_ptr error;
  try {
    program = compile(build);
  } catch (...) {
    error = std::current_exception();
  }
  finish(key, program, error);
  if (error) std::rethrow_exception(error);
  return program;
}

// The cached grammar of `key`, after waiting for its compilation if one is
// running; a cached refusal is thrown again. nullptr: nothing cached.
std::shared_ptr<const Program> GrammarCache::from_entry(Lock& lock, const std::string& key, Deadline deadline) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return nullptr;
  if (it->second.compiling) {
    ++num_waiting_;
    const bool done = changed_.wait_until(lock, deadline, [&] {
      it = entries_.find(key);
      return it == entries_.end() || !it->second.compiling;
    });
    --num_waiting_;
    if (!done)
      refuse(GrammarLimit::kBusy, fmt::format("another request has been compiling the same grammar for over {} ms; "
                                              "retry later",
                                              limits_.max_wait.count()));
    if (it == entries_.end()) return nullptr;  // it failed for lack of memory or time: try again
  }
  Entry& e = it->second;
  lru_.splice(lru_.begin(), lru_, e.lru);
  ++num_hits_;
  if (e.program) return e.program;
  if (const auto limit = limit_of(e.refusal)) ++num_refused_[static_cast<int>(*limit)];
  std::rethrow_exception(e.refusal);
}

void GrammarCache::take_slot(Lock& lock, Deadline deadline) {
  if (num_compiling_ < limits_.max_compilations) return;
  ++num_waiting_;
  const bool free = changed_.wait_until(lock, deadline, [&] { return num_compiling_ < limits_.max_compilations; });
  --num_waiting_;
  if (!free)
    refuse(GrammarLimit::kBusy,
           fmt::format("the server is compiling {} grammars, its limit, and none finished "
                       "within {} ms; retry later",
                       limits_.max_compilations, limits_.max_wait.count()));
}

std::shared_ptr<const Program> GrammarCache::compile(const Build& build) {
  CompileBudget account(limits_.max_grammar_bytes, budget_, [this](int64_t bytes) { return reclaim(bytes); });
  std::shared_ptr<const Program> program;
  {
    CompileScope scope(account);
    program = build();
  }
  // The grammar's expression tree and the builder's scratch are gone by
  // now: of all the compilation charged, only the program remains.
  const int64_t kept = account.settle(program->num_bytes());
  auto charged = std::make_shared<Charged>(std::move(program), budget_, kept);
  return std::shared_ptr<const Program>(charged, charged->program.get());
}

void GrammarCache::finish(const std::string& key, std::shared_ptr<const Program> program,
                          const std::exception_ptr& error) {
  Lock lock(mu_);
  --num_compiling_;
  if (program) ++num_compiled_;
  if (error)
    if (const auto limit = limit_of(error)) ++num_refused_[static_cast<int>(*limit)];
  if (!key.empty()) {
    const auto it = entries_.find(key);
    if (program || deterministic(error)) {
      Entry& e = it->second;
      e.num_program_bytes = program ? program->num_bytes() : 0;
      e.program = std::move(program);
      e.refusal = error;
      e.compiling = false;
      lru_.push_front(key);
      e.lru = lru_.begin();
      num_cached_bytes_ += e.num_bytes + e.num_program_bytes;
      keep_cache_within_limit();
    } else {
      drop(it);
    }
  }
  changed_.notify_all();
}

void GrammarCache::drop(std::unordered_map<std::string, Entry>::iterator it) {
  if (it->second.lru != lru_.end()) {
    lru_.erase(it->second.lru);
    num_cached_bytes_ -= it->second.num_bytes + it->second.num_program_bytes;
  }
  budget_->give_back(it->second.num_bytes);
  entries_.erase(it);  // the program's bytes go back with its last holder
}

// Called by a compilation the budget is short for: drops cached grammars,
// least recently used first, until `bytes` would fit or nothing is left.
// Grammars running requests hold free nothing until those requests end.
bool GrammarCache::reclaim(int64_t bytes) {
  Lock lock(mu_);
  bool any = false;
  while (!lru_.empty() && budget_->num_bytes_in_use() + bytes > budget_->limit()) {
    drop(entries_.find(lru_.back()));
    any = true;
  }
  return any;
}

// Least recently used first; a grammar larger than the whole limit is not
// kept at all (the requests running it hold it meanwhile).
void GrammarCache::keep_cache_within_limit() {
  while (!lru_.empty() && num_cached_bytes_ > limits_.max_cached_bytes) drop(entries_.find(lru_.back()));
}

void GrammarCache::refuse(GrammarLimit limit, std::string message) {
  ++num_refused_[static_cast<int>(limit)];
  throw GrammarLimitError(limit, std::move(message));
}

GrammarStats GrammarCache::stats() const {
  Lock lock(mu_);
  GrammarStats s;
  s.num_bytes_in_use = budget_->num_bytes_in_use();
  s.budget_bytes = budget_->limit();
  s.num_cached = static_cast<int64_t>(lru_.size());
  s.num_cached_bytes = num_cached_bytes_;
  s.num_compiling = num_compiling_;
  s.num_waiting = num_waiting_;
  s.num_compiled = num_compiled_;
  s.num_hits = num_hits_;
  std::copy(std::begin(num_refused_), std::end(num_refused_), std::begin(s.num_refused));
  return s;
}

}  // namespace kvlm::constrain
