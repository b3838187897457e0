#include "server/lora_registry.h"

#include "common/error.h"
#include "kv/block_hash.h"
#include "model/lora.h"

namespace kvlm {

void LoraRegistry::add(ServedLora lora) {
  std::lock_guard lock(mu_);
  if (loras_.count(lora.name))
    throw_error(ErrorCode::kInvalidArgument, "a LoRA adapter named '{}' is loaded already", lora.name);
  if (loras_.size() >= max_loras_)
    throw_error(ErrorCode::kOutOfRange, "{} LoRA adapters are loaded, the most --max-loras allows; unload one "
                "first", loras_.size());
  std::string name = lora.name;
  const LoraAdapter* raw = lora.adapter.get();
  lora.adapter = std::shared_ptr<const LoraAdapter>(raw, [keep = std::move(lora.adapter)](const LoraAdapter*) {});
  loras_.emplace(std::move(name), std::move(lora));
}

LoraRegistry::Removal LoraRegistry::remove(const std::string& name) {
  std::lock_guard lock(mu_);
  auto it = loras_.find(name);
  if (it == loras_.end()) return Removal::kUnknown;
  // Every holder of the map's pointer beside the map is a request (or a
  // handler about to submit one); under the lock no new one can appear.
  if (it->second.adapter.use_count() > 1) return Removal::kInUse;
  loras_.erase(it);
  return Removal::kRemoved;
}

std::shared_ptr<const LoraAdapter> LoraRegistry::find(const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = loras_.find(name);
  return it == loras_.end() ? nullptr : it->second.adapter;
}

std::vector<LoraInfo> LoraRegistry::list() const {
  std::lock_guard lock(mu_);
  std::vector<LoraInfo> out;
  for (const auto& [name, lora] : loras_)
    out.push_back({name, lora.path, lora.created, block_hash_hex(BlockHash{lora.adapter->identity})});
  return out;
}

std::vector<std::string> LoraRegistry::names_in_use() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  for (const auto& [name, lora] : loras_)
    if (lora.adapter.use_count() > 1) out.push_back(name);
  return out;
}

void LoraRegistry::record(const std::string& name, int64_t prompt_tokens, int64_t generated_tokens,
                          int64_t cached_tokens) {
  std::lock_guard lock(mu_);
  LoraUsage& u = usage_[name];
  ++u.num_requests;
  u.prompt_tokens += prompt_tokens;
  u.generated_tokens += generated_tokens;
  u.cached_tokens += cached_tokens;
}

std::map<std::string, LoraUsage> LoraRegistry::usage() const {
  std::lock_guard lock(mu_);
  return usage_;
}

}  // namespace kvlm
