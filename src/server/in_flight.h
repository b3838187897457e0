// The generation requests a server has accepted and not yet answered in
// full, so that a graceful shutdown can wait for them, then cancel the rest.
//
// A request counts from the moment its handler registers it until its last
// byte has been handed to the transport (a streaming response holds its
// Ticket in the content provider, which the transport destroys at the end).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "common/strong_id.h"

namespace kvlm {

class Engine;

class InFlightRequests {
 public:
  // Unregisters on destruction. The engine request ids are set once submitted
  // (before that there is nothing to cancel): one per choice of the request.
  class Ticket {
   public:
    Ticket(InFlightRequests& owner, uint64_t key) : owner_(owner), key_(key) {}
    ~Ticket();
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    // Returns false once drain() has begun cancelling: the caller cancels
    // the request itself (drain() did not see its id).
    [[nodiscard]] bool set_request(RequestId id) { return set_requests({id}); }
    // All of a request's choices (n > 1), which a drain cancels together.
    [[nodiscard]] bool set_requests(const std::vector<RequestId>& ids);

   private:
    InFlightRequests& owner_;
    uint64_t key_;
  };

  // Registers a request; never fails. Check draining() after registering:
  // a request registered before drain() began is waited for.
  std::unique_ptr<Ticket> enter();
  bool draining() const;
  size_t size() const;

  // Starts draining (draining() is true from now on), waits up to `timeout`
  // for every registered request to end, then cancels those left in `engine`
  // and waits for them to end too. Returns how many were cancelled.
  size_t drain(Engine& engine, std::chrono::milliseconds timeout);

 private:
  void leave(uint64_t key);
  bool set_requests(uint64_t key, const std::vector<RequestId>& ids);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<uint64_t, std::vector<RequestId>> live_;  // empty: not submitted yet
  uint64_t next_key_ = 0;
  bool draining_ = false;
  bool cancelling_ = false;  // drain()'s timeout has passed
};

}  // namespace kvlm
