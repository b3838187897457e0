// The server's slots, as llama.cpp's server has them (docs/slots.md):
// --max-seqs of them, one per sequence the engine runs at once. A
// generation request takes the lowest free slot when it is submitted and
// gives it back when its answer ends; the slot then holds the token ids it
// ran (the first choice's prompt and output) and the key its KV blocks were
// hashed with, for GET /slots and for POST /slots/{id}?action=save.
//
// kvlm's KV is not a slot's own, as llama.cpp's is: every request's blocks
// live in one paged pool behind one prefix cache. A slot only remembers
// which chain of cached blocks its last request made; saving copies those
// blocks out, restoring puts them back into the prefix cache (for any
// request with that prefix), erasing forgets them. Requests beyond the free
// slots (waiting in the queue) run without one.
//
// Thread-safe: handler threads claim and read, answers release.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "common/strong_id.h"

namespace kvlm {

class SlotTable {
 public:
  // What a slot holds: the tokens its last request ran (or a restore put
  // there) and the key their blocks were hashed with (request_extra_key).
  struct Held {
    std::vector<int32_t> tokens;
    uint64_t extra_key = 0;
  };
  struct View {
    int32_t id = 0;
    std::optional<RequestId> task;  // the request running there; nullopt: idle
    Held held;
  };

  // A request's hold on a slot: its output is added as it comes, and the
  // slot is free again, holding the request's tokens, at release() or at
  // destruction, whichever comes first.
  class Claim {
   public:
    Claim(SlotTable& table, int32_t id, Held held) : table_(table), id_(id), held_(std::move(held)) {}
    ~Claim() { release(); }
    Claim(const Claim&) = delete;
    Claim& operator=(const Claim&) = delete;
    int32_t id() const { return id_; }
    void add_output(std::span<const int32_t> tokens);
    void release();

   private:
    SlotTable& table_;
    int32_t id_;
    Held held_;
    bool released_ = false;
  };

  explicit SlotTable(int32_t num_slots);
  int32_t size() const { return static_cast<int32_t>(slots_.size()); }

  // The lowest free slot for request `task`, whose prompt (and key) it holds
  // so far; null when every slot is taken.
  std::unique_ptr<Claim> claim(RequestId task, std::vector<int32_t> prompt, uint64_t extra_key);
  std::vector<View> snapshot() const;
  // Precondition: 0 <= id < size().
  View get(int32_t id) const;
  // A restore: the slot holds `held` (a request running there replaces it when it ends).
  void hold(int32_t id, Held held);
  // An erase: the slot holds nothing; what it held.
  Held forget(int32_t id);

 private:
  struct Slot {
    std::optional<RequestId> task;
    Held held;
  };
  void give_back(int32_t id, Held held);

  mutable std::mutex mu_;
  std::vector<Slot> slots_;
};

}  // namespace kvlm
