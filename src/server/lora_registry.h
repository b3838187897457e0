// The LoRA adapters a server serves beside its base model, by name
// (docs/lora.md): `kvlm serve --lora NAME=PATH`, and POST
// /v1/load_lora_adapter / /v1/unload_lora_adapter at run time. A request
// names an adapter as its `model`. Thread-safe: handlers look adapters up
// while others load and unload them.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace kvlm {

struct LoraAdapter;

struct ServedLora {
  std::string name;
  std::string path;   // the file or folder it was read from
  std::shared_ptr<const LoraAdapter> adapter;
  int64_t created = 0;  // unix seconds of its loading
};

// What the listings say of a served adapter (no hold on it).
struct LoraInfo {
  std::string name;
  std::string path;
  int64_t created = 0;
  std::string identity;  // LoraAdapter::identity, 32 hex digits
};

// Per-adapter counts of the requests answered with it (metrics).
struct LoraUsage {
  int64_t num_requests = 0;
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  int64_t cached_tokens = 0;
};

class LoraRegistry {
 public:
  explicit LoraRegistry(size_t max_loras) : max_loras_(max_loras) {}

  size_t max_loras() const { return max_loras_; }
  // Throws Error(kInvalidArgument) for a name taken, Error(kOutOfRange)
  // when max_loras are loaded already.
  void add(ServedLora lora);
  enum class Removal { kRemoved, kUnknown, kInUse };
  // kInUse while a request holds the adapter (it stays loaded).
  Removal remove(const std::string& name);
  // null: no adapter of that name. The pointer returned is a hold of the
  // registry's own (the adapter is in use while any is alive).
  std::shared_ptr<const LoraAdapter> find(const std::string& name) const;
  std::vector<LoraInfo> list() const;  // by name
  // The adapters running requests hold now (beside the registry's own hold), by name.
  std::vector<std::string> names_in_use() const;

  void record(const std::string& name, int64_t prompt_tokens, int64_t generated_tokens, int64_t cached_tokens);
  // Every adapter ever served, by name (unloaded ones keep their counts).
  std::map<std::string, LoraUsage> usage() const;

 private:
  const size_t max_loras_;
  mutable std::mutex mu_;
  // Each adapter as requests hold it: a pointer with a control block of its
  // own, whose count says how many holds requests have (ServedLora's own
  // pointer, which callers may have copied, never counts).
  std::map<std::string, ServedLora> loras_;
  std::map<std::string, LoraUsage> usage_;
};

}  // namespace kvlm
