// How a model rotates its queries and keys by position (RoPE). Plain data,
// read from the GGUF into ModelConfig and given to Backend::rope; every
// backend rotates by the same formula (Backend::rope).
#pragma once

#include <cstdint>

namespace kvlm {

enum class RopeStyle {
  kNormal,  // llama: rotate pairs (2i, 2i+1)
  kNeox,    // NEOX / Qwen2 / Gemma: rotate pairs (i, i + rot_dim/2)
};

struct RopeParams {
  RopeStyle style = RopeStyle::kNormal;
  int32_t rot_dim = 0;        // leading dims of each head that rotate (even); 0 = head_dim
  float freq_base = 10000.f;
  float freq_scale = 1.f;     // linear scaling: position * freq_scale
  // [rot_dim / 2] or nullptr: pair i's angle is divided by freq_factors[i]
  // (llama3 scaling's rope_freqs, Phi-3's long/short factors). Not owned: it
  // points into the model that set it and lives as long as that model.
  const float* freq_factors = nullptr;
  float attn_factor = 1.f;    // cos and sin scaled by it (Phi-3 long-rope's magnitude correction)
};

}  // namespace kvlm
