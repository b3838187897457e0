// The multi-tenant workload of `kvlm bench serve`: tenants that each have a
// system prompt shared by their users, users that hold multi-turn
// conversations on it. Consecutive requests mix tenants, as a router's
// clients do; where the prefix cache keeps a tenant's system prompt and a
// conversation's history, later requests reuse them, and the usage chunks'
// cached_tokens show how much (a router that sends a tenant to the replica
// that has its prefix gets more).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "apps/serve_load.h"

namespace kvlm::apps {

struct MultiTenantShape {
  int num_tenants = 1;
  int num_users = 1;     // per tenant
  int num_turns = 1;     // per user
  int system_words = 0;  // of each tenant's system prompt (0: none)
  int user_words = 1;    // of each user message
};

// The conversations as a RequestSource. A user's turn 1 is its tenant's
// system text, a newline and its first message; turn k+1 is turn k's prompt,
// the text the server generated for turn k (none if it failed), a newline and
// the next message, and is ready only once turn k has finished. Ready turns
// wait in one queue: at first every user's turn 1, in an order shuffled with
// `seed` (so tenants interleave); a follow-up joins the back when its
// previous turn ends. Words are drawn like make_prompts' (with `seed`), so
// every tenant's text and every message differ.
class MultiTenantSource final : public RequestSource {
 public:
  // Preconditions: every count of `shape` positive but system_words (>= 0).
  MultiTenantSource(const MultiTenantShape& shape, uint64_t seed);

  size_t num_requests() const override;  // tenants * users * turns
  std::optional<LoadRequest> next() override;
  void finish(size_t slot, const RequestResult& result) override;

  // Which turn (1-based) the request in `slot` was. Precondition: next()
  // has handed that slot out.
  int turn_of(size_t slot) const;

 private:
  struct Conversation {
    int tenant = 0;
    std::vector<std::string> messages;  // one a turn
    std::string history;                // the last prompt sent, then its answer
    int num_turns_sent = 0;
  };
  struct Sent {
    int conversation = 0;
    int turn = 0;  // 1-based
  };

  const size_t num_requests_;
  std::vector<std::string> system_texts_;  // one a tenant
  mutable std::mutex mu_;
  std::condition_variable ready_cv_;
  std::vector<Conversation> conversations_;  // tenant t's user u at t * num_users + u
  std::deque<int> ready_;                    // conversations whose next turn can be sent, in order
  std::vector<Sent> sent_;                   // by slot
};

}  // namespace kvlm::apps
