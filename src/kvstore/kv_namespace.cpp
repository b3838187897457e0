#include "kvstore/kv_namespace.h"

#include <algorithm>
#include <string>

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>

namespace kvlm {
namespace {

// Writes fields with explicit lengths and tags, so no two different specs
// serialize to the same bytes ("ab"+"c" vs "a"+"bc").
class Canon {
 public:
  Canon() { XXH3_128bits_reset(&state_); }
  void u64(uint64_t v) { XXH3_128bits_update(&state_, &v, sizeof(v)); }
  void str(const std::string& s) {
    u64(s.size());
    XXH3_128bits_update(&state_, s.data(), s.size());
  }
  void tag(const char* t) { str(t); }
  Hash128 digest() {
    XXH128_hash_t h = XXH3_128bits_digest(&state_);
    return Hash128{h.low64, h.high64};
  }

 private:
  XXH3_state_t state_;
};

}  // namespace

Hash128 kv_namespace_fingerprint(const KvNamespaceSpec& spec) {
  Canon c;
  c.tag("kvlm-kv-namespace-v1");
  c.tag("arch");
  c.str(spec.model.architecture);
  auto metadata = spec.model.metadata;
  std::sort(metadata.begin(), metadata.end());
  c.tag("metadata");
  c.u64(metadata.size());
  for (const auto& [k, v] : metadata) {
    c.str(k);
    c.str(v);
  }
  auto tensors = spec.model.tensors;
  std::sort(tensors.begin(), tensors.end(),
            [](const TensorIdentity& a, const TensorIdentity& b) { return a.name < b.name; });
  c.tag("tensors");
  c.u64(tensors.size());
  for (const auto& t : tensors) {
    c.str(t.name);
    c.str(t.dtype);
    c.u64(t.shape.size());
    for (int64_t d : t.shape) c.u64(static_cast<uint64_t>(d));
    c.u64(t.num_bytes);
  }
  c.tag("data");
  c.u64(spec.model.data_digest ? 1 : 0);
  if (spec.model.data_digest) {
    c.u64(spec.model.data_digest->lo);
    c.u64(spec.model.data_digest->hi);
  }
  c.tag("kv");
  c.str(spec.kv_dtype);
  c.u64(static_cast<uint64_t>(spec.block_size));
  c.u64(spec.layout_version);
  c.u64(spec.cache_salt);
  return c.digest();
}

}  // namespace kvlm
