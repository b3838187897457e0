// Memory accounting for grammar compilation. A compilation charges what it
// allocates as it grows (expression nodes and rules while a schema or regex
// becomes a Grammar, states, edges and closures while that becomes a
// Program) to the CompileBudget installed on its thread, which stops it
// early (an Error) past its own cap or when the MemoryBudget it draws from,
// shared by every compilation and compiled grammar of a server, is short.
//
//   auto shared = std::make_shared<MemoryBudget>(1 << 30);
//   CompileBudget account(256 << 20, shared);
//   {
//     CompileScope scope(account);
//     program = json_schema_program(schema);   // charges `account` as it grows
//   }
//   account.settle(program->num_bytes());      // keep the program's bytes, give back the rest
//
// Charges only grow during a compilation (freed temporaries are not given
// back until settle), so an account is an upper bound of what the
// compilation held at any moment.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/error.h"
#include "common/memory_budget.h"

namespace kvlm::constrain {

// Why a grammar was refused for what it would cost rather than for what it
// says: kTooLarge, it alone is over a limit (400: no retry will help);
// kMemory, the shared budget is held by others; kBusy, no compilation slot
// came free in time (both 503: retry later).
enum class GrammarLimit { kTooLarge, kMemory, kBusy };
const char* grammar_limit_name(GrammarLimit limit);  // "too_large", "memory", "busy"

class GrammarLimitError : public Error {
 public:
  GrammarLimitError(GrammarLimit limit, std::string message)
      : Error(limit == GrammarLimit::kTooLarge ? ErrorCode::kInvalidArgument : ErrorCode::kUnavailable,
              std::move(message)),
        limit_(limit) {}
  GrammarLimit limit() const { return limit_; }

 private:
  GrammarLimit limit_;
};

class CompileBudget {
 public:
  // Asked for `bytes` the shared budget cannot give; frees what it can
  // (a cache dropping compiled grammars) and says whether it freed any.
  using Reclaim = std::function<bool(int64_t bytes)>;

  // max_bytes: the most this compilation may hold; shared (may be null): the
  // budget it draws from, in steps of kChunkBytes so that charges stay cheap.
  explicit CompileBudget(int64_t max_bytes, std::shared_ptr<MemoryBudget> shared = nullptr, Reclaim reclaim = {});
  ~CompileBudget();  // gives back everything it still holds
  CompileBudget(const CompileBudget&) = delete;
  CompileBudget& operator=(const CompileBudget&) = delete;

  // Throws GrammarLimitError: kTooLarge past max_bytes, kMemory when the
  // shared budget stays short after reclaim.
  void charge(int64_t bytes);
  int64_t num_bytes() const { return num_bytes_; }
  int64_t max_bytes() const { return max_bytes_; }
  // The compilation is over and only `kept` bytes of it remain (the
  // compiled program): gives back the rest of what it took from the shared
  // budget and hands `kept` over to the caller, who gives them back with
  // shared()->give_back when the program goes. Returns `kept`.
  int64_t settle(int64_t kept);
  const std::shared_ptr<MemoryBudget>& shared() const { return shared_; }

  static constexpr int64_t kChunkBytes = 256 << 10;

 private:
  const int64_t max_bytes_;
  std::shared_ptr<MemoryBudget> shared_;
  Reclaim reclaim_;
  int64_t num_bytes_ = 0;  // charged so far
  int64_t num_taken_ = 0;  // taken from shared_ (whole chunks, >= num_bytes_)
};

// Makes `budget` the one this thread's compilations charge until the scope
// ends (scopes nest; the innermost wins). A thread-local, rather than a
// parameter of every Expr factory, because grammars are composed through
// free functions (literal(), seq(), json_schema_expr(), regex_expr()) by
// callers all over the code; the scope is per thread, so nothing is shared.
class CompileScope {
 public:
  explicit CompileScope(CompileBudget& budget);
  ~CompileScope();
  CompileScope(const CompileScope&) = delete;
  CompileScope& operator=(const CompileScope&) = delete;

 private:
  CompileBudget* previous_;
};

// Charges the current thread's compilation; nothing when no scope is installed.
void charge_compile_memory(int64_t bytes);

}  // namespace kvlm::constrain
