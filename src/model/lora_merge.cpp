#include "model/lora_merge.h"

#include <algorithm>

#include <fmt/format.h>

#include "backend/quant.h"
#include "common/assert.h"

namespace kvlm {
namespace {

// The base (its mapping or its own owner) and the merged matrices' bytes.
struct MergeOwner : TensorOwner {
  std::unique_ptr<GgufFile> base;
  std::vector<std::vector<float>> merged;
};

// W + scale * B A, W [out, in] of any dtype, A [rank, in], B [out, rank].
std::vector<float> merged_matrix(const GgufTensor& w, const LoraPair& p) {
  const int64_t in = w.dims[0], out = w.dims[1], rank = p.a.rows;
  KVLM_ASSERT(w.slices.empty() && p.a.cols == in && p.b.rows == out && p.b.cols == rank,
              "merge_lora: an adapter loaded against another base");
  std::vector<float> m(static_cast<size_t>(in * out));
  const size_t bytes = row_bytes(w.dtype, in);
  const std::vector<float> a_values = lora_matrix_values(p.a), b_values = lora_matrix_values(p.b);
  const float* a = a_values.data();
  const float* b = b_values.data();
  for (int64_t o = 0; o < out; ++o) {
    float* row = m.data() + o * in;
    dequantize_row(w.dtype, w.data + static_cast<size_t>(o) * bytes, row, in);
    for (int64_t k = 0; k < rank; ++k) {
      const float c = p.scale * b[o * rank + k];
      const float* a_row = a + k * in;
      for (int64_t i = 0; i < in; ++i) row[i] += c * a_row[i];
    }
  }
  return m;
}

}  // namespace

std::unique_ptr<GgufFile> merge_lora(std::unique_ptr<GgufFile> base, const LoraAdapter& adapter) {
  auto owner = std::make_unique<MergeOwner>();
  Metadata metadata;
  for (const auto& [key, value] : base->metadata().entries())
    if (key != "general.file_type") metadata.set(key, value);
  std::vector<GgufTensor> tensors = base->tensors();
  for (size_t layer = 0; layer < adapter.layers.size(); ++layer) {
    for (size_t t = 0; t < kNumLoraTargets; ++t) {
      const LoraPair* p = adapter.pair(static_cast<int32_t>(layer), static_cast<LoraTarget>(t));
      if (!p) continue;
      const std::string name = fmt::format("blk.{}.{}.weight", layer, lora_target_gguf_name(static_cast<LoraTarget>(t)));
      auto it = std::find_if(tensors.begin(), tensors.end(), [&](const GgufTensor& g) { return g.name == name; });
      KVLM_ASSERT(it != tensors.end(), "merge_lora: the adapter's base tensor is missing");
      const std::vector<float>& m = owner->merged.emplace_back(merged_matrix(*it, *p));
      it->dtype = DType::kF32;
      it->data = reinterpret_cast<const uint8_t*>(m.data());
      it->num_bytes = m.size() * sizeof(float);
      it->offset = 0;
    }
  }
  const std::string source = base->path();
  owner->base = std::move(base);
  return GgufFile::from_parts(source, std::move(metadata), std::move(tensors), std::move(owner));
}

}  // namespace kvlm
