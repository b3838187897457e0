// The namespace a tier record lives in: a 128-bit fingerprint of everything
// that makes KV bytes incompatible (docs/ARCHITECTURE.md "Tiers"). Two processes that
// would compute different K/V bytes for the same tokens must get different
// fingerprints; the same model files and settings always give the same one,
// on any machine and in any process (XXH3-128 with no seed over a canonical
// serialization: no std::hash, no pointer, no time).
//
// kvstore/ may not depend on model/, so apps/tier_options.cpp
// (kv_namespace_spec) fills ModelIdentity from the GGUF: its tensor table,
// its general and architecture metadata, and a digest of its tensor data.
//
// cache_salt: an operator-wide salt (for example one per tenant deployment).
// A request's own `cache_salt` is already part of its chained block hashes
// (kv/block_hash.h extra_key), so salted prompts never share keys without a
// namespace per request; per-request namespaces would scatter one model's
// records over many directories and defeat the disk tier's size cap.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/hash.h"

namespace kvlm {

// Bumped whenever KvStorage's block byte layout changes (runner/kv_storage.h).
// 2: Q8_0 keys in int8 lanes of four dimensions (backend/kv_layout.h).
inline constexpr uint32_t kKvLayoutVersion = 2;

struct TensorIdentity {
  std::string name;
  std::string dtype;             // dtype name, e.g. "q4_0"
  std::vector<int64_t> shape;
  uint64_t num_bytes = 0;
};

struct ModelIdentity {
  std::string architecture;                                  // general.architecture
  std::vector<std::pair<std::string, std::string>> metadata;  // architecture keys as text (order-free)
  std::vector<TensorIdentity> tensors;                       // order-free
  std::optional<Hash128> data_digest;                        // digest of tensor data, when known
};

struct KvNamespaceSpec {
  ModelIdentity model;
  std::string kv_dtype;          // "f16", "f32", "q8_0", "q4_0"
  int32_t block_size = 16;
  uint32_t layout_version = kKvLayoutVersion;
  uint64_t cache_salt = 0;
};

// The fingerprint of `spec`. Metadata and tensors are sorted first, so the
// order a reader lists them in does not matter.
Hash128 kv_namespace_fingerprint(const KvNamespaceSpec& spec);

}  // namespace kvlm
