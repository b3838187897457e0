#include "constrain/matcher.h"

#include <algorithm>

namespace kvlm::constrain {
namespace {
uint64_t key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}
}  // namespace

Matcher::Matcher(std::shared_ptr<const Program> program) : program_(std::move(program)) {
  closure(program_->start(), -1, threads_);
}

int32_t Matcher::push(int32_t ret, int32_t parent) {
  const uint64_t k = key(ret, parent);
  if (auto it = frame_ids_.find(k); it != frame_ids_.end()) return it->second;
  const int32_t depth = parent < 0 ? 1 : frames_[parent].depth + 1;
  frames_.push_back({ret, parent, depth});
  const auto id = static_cast<int32_t>(frames_.size() - 1);
  frame_ids_.emplace(k, id);
  return id;
}

// Follows epsilon edges (precomputed closures), calls and returns from
// (state, stack); adds the threads that wait on a byte (and the accept
// thread) to `to`. seen_ spans one whole step, so threads reached twice are
// added once.
void Matcher::closure(int32_t state, int32_t stack, Threads& to) {
  work_.clear();
  work_.push_back({state, stack});
  while (!work_.empty()) {
    const Thread t = work_.back();
    work_.pop_back();
    if (t.state == program_->accept()) {
      if (!first_visit(key(t.state, t.stack))) continue;
      to.push_back(t);
      continue;
    }
    for (int32_t x : program_->eps_closure(t.state)) {
      if (!first_visit(key(x, t.stack))) continue;
      const NfaState& s = program_->state(x);
      if (s.rule_end) {
        if (t.stack < 0) {
          work_.push_back({program_->accept(), -1});
        } else {
          const Frame& f = frames_[t.stack];
          work_.push_back({f.ret, f.parent});
        }
        continue;
      }
      if (!program_->edges(x).empty()) to.push_back({x, t.stack});
      if (s.call_rule >= 0 && (t.stack < 0 || frames_[t.stack].depth < kMaxStackDepth))
        work_.push_back({program_->rule_start(s.call_rule), push(s.call_return, t.stack)});
    }
  }
}

// A short list while a step has met few threads (the common case, and the
// fastest); past kLinearSeen a hash set, so grammars whose steps meet
// thousands of threads (an anyOf of a thousand objects) stay linear.
bool Matcher::first_visit(uint64_t k) {
  if (seen_.size() < kLinearSeen) {
    if (std::find(seen_.begin(), seen_.end(), k) != seen_.end()) return false;
    seen_.push_back(k);
    if (seen_.size() == kLinearSeen) seen_set_.insert(seen_.begin(), seen_.end());
    return true;
  }
  return seen_set_.insert(k).second;
}

void Matcher::clear_seen() {
  if (seen_.size() >= kLinearSeen) seen_set_.clear();
  seen_.clear();
}

void Matcher::step(const Threads& from, uint8_t byte, Threads& to) {
  to.clear();
  clear_seen();
  for (const Thread& t : from) {
    for (const ByteEdge& e : program_->edges(t.state))
      if (byte >= e.lo && byte <= e.hi) closure(e.target, t.stack, to);
  }
}

bool Matcher::advance(std::string_view bytes) {
  Threads cur = threads_;
  for (char c : bytes) {
    step(cur, static_cast<uint8_t>(c), scratch_);
    if (scratch_.empty()) return false;
    cur.swap(scratch_);
  }
  threads_ = std::move(cur);
  current_ = -1;
  return true;
}

namespace {
constexpr int32_t kUnknown = -2;
}  // namespace

int32_t Matcher::intern_set(Threads t) {
  std::sort(t.begin(), t.end(), [](const Thread& a, const Thread& b) {
    return a.state < b.state || (a.state == b.state && a.stack < b.stack);
  });
  std::string k(reinterpret_cast<const char*>(t.data()), t.size() * sizeof(Thread));
  if (auto it = set_ids_.find(k); it != set_ids_.end()) return it->second;
  const auto id = static_cast<int32_t>(sets_.size());
  // The set twice (its threads and its key), its row of next sets, and the
  // containers' own entries.
  num_cache_bytes_ += static_cast<int64_t>(2 * k.size() + sizeof(next_[0]) + 96);
  set_accepting_.push_back(accepting(t) ? 1 : 0);
  sets_.push_back(std::move(t));
  next_.emplace_back();
  next_.back().fill(kUnknown);
  set_ids_.emplace(std::move(k), id);
  return id;
}

int32_t Matcher::current_set() {
  if (current_ < 0) current_ = intern_set(threads_);
  return current_;
}

int32_t Matcher::next_set(int32_t set, uint8_t byte) {
  int32_t& cached = next_[set][byte];
  if (cached != kUnknown) return cached;
  step(sets_[set], byte, scratch_);
  // intern_set may grow next_: write through the index, not the reference.
  const int32_t id = scratch_.empty() ? -1 : intern_set(scratch_);
  next_[set][byte] = id;
  return id;
}

void Matcher::reset_cache_if_large() {
  if (sets_.size() <= kMaxCachedSets && num_cache_bytes_ <= kMaxCacheBytes) return;
  num_cache_bytes_ = 0;
  sets_.clear();
  next_.clear();
  set_accepting_.clear();
  set_ids_.clear();
  current_ = -1;
}

bool Matcher::accepting(const Threads& t) const {
  for (const Thread& x : t)
    if (x.state == program_->accept()) return true;
  return false;
}

bool Matcher::can_continue(const Threads& t) const {
  for (const Thread& x : t)
    if (x.state != program_->accept()) return true;
  return false;
}

}  // namespace kvlm::constrain
