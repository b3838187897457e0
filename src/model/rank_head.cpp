#include "model/rank_head.h"

#include <algorithm>
#include <cmath>

#include "backend/quant.h"
#include "common/assert.h"
#include "common/error.h"
#include "model/model.h"

namespace kvlm {
namespace {

// A tensor's rows as f32; Error(kCorrupt) unless it is [rows, cols].
std::vector<float> rows_f32(const GgufTensor& t, int64_t rows, int64_t cols) {
  const bool shaped = !t.dims.empty() && t.dims.size() <= 2 && t.dims[0] == cols &&
                      (t.dims.size() == 1 ? 1 : t.dims[1]) == rows;
  if (!shaped || !t.slices.empty())
    throw_error(ErrorCode::kCorrupt, "tensor '{}' is {}, expected [{}, {}]", t.name, t.shape_string(), cols, rows);
  if (cols % dtype_info(t.dtype).block_size != 0)
    throw_error(ErrorCode::kCorrupt, "tensor '{}': rows of {} do not fill its type's blocks", t.name, cols);
  std::vector<float> out(static_cast<size_t>(rows * cols));
  const size_t row_size = row_bytes(t.dtype, cols);
  for (int64_t r = 0; r < rows; ++r)
    dequantize_row(t.dtype, t.data + static_cast<size_t>(r) * row_size, &out[static_cast<size_t>(r * cols)], cols);
  return out;
}

}  // namespace

std::unique_ptr<RankHead> RankHead::load(const Model& model) {
  const ModelConfig& c = model.config();
  if (c.pooling_type != 4)
    throw_error(ErrorCode::kUnsupported, "the model is not a reranker (its {}.pooling_type is not 4, rank)",
                c.arch_name);
  if (c.arch != Arch::kQwen3)
    throw_error(ErrorCode::kUnsupported,
                "kvlm ranks with Qwen3 rerankers only (llama.cpp's softmax of the labels is Qwen3's alone); "
                "this one is {}", c.arch_name);
  const GgufFile& g = model.gguf();
  const GgufTensor* w = g.find_tensor("cls.output.weight");
  if (w == nullptr) throw_error(ErrorCode::kUnsupported, "the reranker has no cls.output.weight (its classifier)");
  // llama.cpp's n_cls_out: the length of classifier.output_labels, else 1.
  int64_t num_labels = 1;
  if (const MetaValue* labels = g.metadata().find(c.arch_name + ".classifier.output_labels"))
    num_labels = static_cast<int64_t>(labels->as_array(c.arch_name + ".classifier.output_labels").size());
  if (num_labels < 1 || num_labels > 1024)
    throw_error(ErrorCode::kCorrupt, "{}.classifier.output_labels has {} labels", c.arch_name, num_labels);
  std::unique_ptr<RankHead> head(new RankHead(c.dim, static_cast<int32_t>(num_labels)));
  head->weight_ = rows_f32(*w, num_labels, c.dim);
  if (const GgufTensor* b = g.find_tensor("cls.output.bias")) head->bias_ = rows_f32(*b, 1, num_labels);
  return head;
}

float RankHead::score(std::span<const float> hidden) const {
  KVLM_ASSERT(hidden.size() == static_cast<size_t>(dim_), "a hidden state of the model's width");
  std::vector<double> logits(static_cast<size_t>(num_labels_));
  for (int32_t l = 0; l < num_labels_; ++l) {
    double dot = bias_.empty() ? 0.0 : bias_[static_cast<size_t>(l)];
    const float* row = &weight_[static_cast<size_t>(l) * static_cast<size_t>(dim_)];
    for (int32_t i = 0; i < dim_; ++i) dot += static_cast<double>(row[i]) * hidden[static_cast<size_t>(i)];
    logits[static_cast<size_t>(l)] = dot;
  }
  // The softmax's first label; with one label that is always 1, as in llama.cpp.
  const double top = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (double x : logits) sum += std::exp(x - top);
  return static_cast<float>(std::exp(logits[0] - top) / sum);
}

}  // namespace kvlm
