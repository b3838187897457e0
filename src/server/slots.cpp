#include "server/slots.h"

#include <utility>

#include "common/assert.h"

namespace kvlm {

void SlotTable::Claim::add_output(std::span<const int32_t> tokens) {
  held_.tokens.insert(held_.tokens.end(), tokens.begin(), tokens.end());
}

void SlotTable::Claim::release() {
  if (released_) return;
  released_ = true;
  table_.give_back(id_, std::move(held_));
}

SlotTable::SlotTable(int32_t num_slots) : slots_(static_cast<size_t>(num_slots)) {
  KVLM_ASSERT(num_slots > 0, "a server has at least one slot");
}

std::unique_ptr<SlotTable::Claim> SlotTable::claim(RequestId task, std::vector<int32_t> prompt, uint64_t extra_key) {
  std::lock_guard lock(mu_);
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].task) continue;
    slots_[i].task = task;
    return std::make_unique<Claim>(*this, static_cast<int32_t>(i), Held{std::move(prompt), extra_key});
  }
  return nullptr;
}

std::vector<SlotTable::View> SlotTable::snapshot() const {
  std::lock_guard lock(mu_);
  std::vector<View> out;
  for (size_t i = 0; i < slots_.size(); ++i) out.push_back({static_cast<int32_t>(i), slots_[i].task, slots_[i].held});
  return out;
}

SlotTable::View SlotTable::get(int32_t id) const {
  std::lock_guard lock(mu_);
  const Slot& s = slots_.at(static_cast<size_t>(id));
  return {id, s.task, s.held};
}

void SlotTable::hold(int32_t id, Held held) {
  std::lock_guard lock(mu_);
  slots_.at(static_cast<size_t>(id)).held = std::move(held);
}

SlotTable::Held SlotTable::forget(int32_t id) {
  std::lock_guard lock(mu_);
  return std::exchange(slots_.at(static_cast<size_t>(id)).held, Held{});
}

void SlotTable::give_back(int32_t id, Held held) {
  std::lock_guard lock(mu_);
  Slot& s = slots_.at(static_cast<size_t>(id));
  s.task.reset();
  s.held = std::move(held);
}

}  // namespace kvlm
