#include "common/hash.h"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>

namespace kvlm {

Hash128 hash128(const void* data, size_t num_bytes, Hash128 seed) {
  // Chain the seed in as a prefix so hash(parent, tokens) differs from
  // hash(other_parent, tokens) for every parent pair.
  XXH3_state_t state;
  XXH3_128bits_reset(&state);
  XXH3_128bits_update(&state, &seed, sizeof(seed));
  XXH3_128bits_update(&state, data, num_bytes);
  XXH128_hash_t h = XXH3_128bits_digest(&state);
  return Hash128{h.low64, h.high64};
}

}  // namespace kvlm
