#include "model/lora.h"

#include <cstring>

#include "backend/backend.h"
#include "backend/quant.h"
#include "common/assert.h"

namespace kvlm {
namespace {

constexpr std::string_view kTargetNames[kNumLoraTargets] = {
    "attn_q", "attn_k", "attn_v", "attn_qkv", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};

}  // namespace

std::string_view lora_target_gguf_name(LoraTarget t) { return kTargetNames[static_cast<size_t>(t)]; }

std::optional<LoraTarget> lora_target_from_gguf_name(std::string_view name) {
  for (size_t i = 0; i < kNumLoraTargets; ++i)
    if (kTargetNames[i] == name) return static_cast<LoraTarget>(i);
  return std::nullopt;
}

std::vector<LoraTarget> LoraAdapter::targets() const {
  std::vector<LoraTarget> out;
  for (size_t t = 0; t < kNumLoraTargets; ++t)
    for (const auto& layer : layers)
      if (layer[t]) {
        out.push_back(static_cast<LoraTarget>(t));
        break;
      }
  return out;
}

namespace {

// The stacked pair of several adapters' pairs of one matrix (stack_loras).
LoraPair stack_pairs(const std::vector<const LoraPair*>& parts, LoraAdapter& out, const Backend& backend) {
  int64_t rank = 0;
  for (const LoraPair* p : parts) rank += p->a.rows;
  const int64_t in = parts[0]->a.cols, num_out = parts[0]->b.rows;
  std::vector<float> a(static_cast<size_t>(rank * in)), b(static_cast<size_t>(num_out * rank));
  int64_t r0 = 0;
  for (const LoraPair* p : parts) {
    KVLM_ASSERT(p->a.cols == in && p->b.rows == num_out, "stacked adapters adapt matrices of one shape");
    const std::vector<float> pa = lora_matrix_values(p->a), pb = lora_matrix_values(p->b);
    std::copy(pa.begin(), pa.end(), a.begin() + r0 * in);
    for (int64_t o = 0; o < num_out; ++o)
      for (int64_t k = 0; k < p->a.rows; ++k) b[o * rank + r0 + k] = p->scale * pb[o * p->a.rows + k];
    r0 += p->a.rows;
  }
  out.max_rank = std::max(out.max_rank, static_cast<int32_t>(rank));
  LoraPair pair;
  pair.a = keep_lora_matrix(out, a, rank, in, backend);
  pair.b = keep_lora_matrix(out, b, num_out, rank, backend);
  return pair;
}

}  // namespace

WeightMatrix keep_lora_matrix(LoraAdapter& adapter, const std::vector<float>& values, int64_t rows, int64_t cols,
                              const Backend& backend) {
  KVLM_ASSERT(values.size() == static_cast<size_t>(rows * cols), "a LoRA matrix of its shape");
  std::vector<uint8_t>& bytes = adapter.storage.emplace_back(row_bytes(adapter.dtype, cols) * static_cast<size_t>(rows));
  quantize_row(adapter.dtype, values.data(), bytes.data(), rows * cols);
  WeightMatrix w = backend.prepare_matrix(WeightMatrix{bytes.data(), adapter.dtype, rows, cols, nullptr});
  // The backend's copy is the same rows again, in its layout (about the same size).
  adapter.num_bytes += bytes.size() * (w.packed ? 2 : 1);
  return w;
}

std::vector<float> lora_matrix_values(const WeightMatrix& m) {
  std::vector<float> out(static_cast<size_t>(m.rows * m.cols));
  dequantize_row(m.dtype, static_cast<const uint8_t*>(m.data), out.data(), m.rows * m.cols);
  return out;
}

std::shared_ptr<const LoraAdapter> stack_loras(std::span<const std::shared_ptr<const LoraAdapter>> adapters,
                                               const Backend& backend) {
  KVLM_ASSERT(!adapters.empty(), "at least one adapter to stack");
  if (adapters.size() == 1) return adapters[0];
  auto out = std::make_shared<LoraAdapter>();
  out->dtype = adapters[0]->dtype;
  out->layers.resize(adapters[0]->layers.size());
  for (const auto& a : adapters) {
    KVLM_ASSERT(a->layers.size() == out->layers.size(), "stacked adapters of one base");
    out->source += (out->source.empty() ? "" : " + ") + a->source;
    out->identity = hash128(&a->identity, sizeof(a->identity), out->identity);
  }
  for (size_t l = 0; l < out->layers.size(); ++l)
    for (size_t t = 0; t < kNumLoraTargets; ++t) {
      std::vector<const LoraPair*> parts;
      for (const auto& a : adapters)
        if (a->layers[l][t]) parts.push_back(&*a->layers[l][t]);
      if (!parts.empty()) out->layers[l][t] = stack_pairs(parts, *out, backend);
    }
  return out;
}

}  // namespace kvlm
