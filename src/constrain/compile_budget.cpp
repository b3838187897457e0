#include "constrain/compile_budget.h"

#include "common/assert.h"
#include <fmt/format.h>

#include "common/error.h"

namespace kvlm::constrain {
namespace {

thread_local CompileBudget* current_budget = nullptr;

double mib(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

}  // namespace

const char* grammar_limit_name(GrammarLimit limit) {
  switch (limit) {
    case GrammarLimit::kTooLarge: return "too_large";
    case GrammarLimit::kMemory: return "memory";
    case GrammarLimit::kBusy: return "busy";
  }
  return "?";
}

CompileBudget::CompileBudget(int64_t max_bytes, std::shared_ptr<MemoryBudget> shared, Reclaim reclaim)
    : max_bytes_(max_bytes), shared_(std::move(shared)), reclaim_(std::move(reclaim)) {}

CompileBudget::~CompileBudget() {
  if (shared_ && num_taken_ > 0) shared_->give_back(num_taken_);
}

void CompileBudget::charge(int64_t bytes) {
  num_bytes_ += bytes;
  if (num_bytes_ > max_bytes_)
    throw GrammarLimitError(GrammarLimit::kTooLarge,
                            fmt::format("the grammar is too large (it needs over {:.0f} MiB to compile; a grammar may "
                                        "use at most {:.0f} MiB)",
                                        mib(max_bytes_), mib(max_bytes_)));
  if (!shared_ || num_bytes_ <= num_taken_) return;
  const int64_t want = (num_bytes_ - num_taken_ + kChunkBytes - 1) / kChunkBytes * kChunkBytes;
  // A reclaim frees what it can in one go; a second failure is final.
  if (!shared_->try_take(want) && !(reclaim_ && reclaim_(want) && shared_->try_take(want)))
    throw GrammarLimitError(GrammarLimit::kMemory,
                            fmt::format("the server's grammar memory is in use ({:.0f} of {:.0f} MiB held by "
                                        "compilations and running requests' grammars); retry later",
                                        mib(shared_->num_bytes_in_use()), mib(shared_->limit())));
  num_taken_ += want;
}

int64_t CompileBudget::settle(int64_t kept) {
  KVLM_ASSERT(kept >= 0, "a negative program size");
  if (!shared_) return kept;
  // The program was charged while it grew, so it lies within what was
  // taken; if a caller keeps more, the difference is taken now.
  if (kept > num_taken_) {
    shared_->take(kept - num_taken_);
  } else {
    shared_->give_back(num_taken_ - kept);
  }
  num_taken_ = 0;
  num_bytes_ = 0;
  return kept;
}

CompileScope::CompileScope(CompileBudget& budget) : previous_(current_budget) { current_budget = &budget; }

CompileScope::~CompileScope() { current_budget = previous_; }

void charge_compile_memory(int64_t bytes) {
  if (current_budget) current_budget->charge(bytes);
}

}  // namespace kvlm::constrain
