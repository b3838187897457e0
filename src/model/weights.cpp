#include "model/weights.h"

#include "backend/quant.h"
#include "common/assert.h"
#include "common/error.h"
#include "common/huge_pages.h"

namespace kvlm {
namespace {

// Backend::prepare_matrix, then the file's bytes of a matrix the backend
// copied go back to the system: the kernels read the copy only, and keeping
// both would hold a model's weights twice (an 8B Q4_0 model on the CPU: 8.8
// GB of RSS instead of 4.6). The embedding table is never released (get_row
// reads its rows).
WeightMatrix prepared_and_released(const Backend& backend, WeightMatrix w) {
  w = backend.prepare_matrix(std::move(w));
  if (w.packed) release_pages(w.data, row_bytes(w.dtype, w.cols) * static_cast<size_t>(w.rows));
  return w;
}

}  // namespace

std::optional<WeightMatrix> WeightLoader::optional_matrix(const std::string& name, int64_t rows,
                                                          int64_t cols) const {
  const GgufTensor* t = gguf_.find_tensor(name);
  if (t == nullptr) return std::nullopt;
  bool ok = (t->dims.size() == 2 && t->dims[0] == cols && t->dims[1] == rows) ||
            (t->dims.size() == 1 && rows == 1 && t->dims[0] == cols);
  if (!ok)
    throw_error(ErrorCode::kCorrupt, "{}: tensor '{}' has shape {}, expected [{}, {}]", gguf_.path(),
                name, t->shape_string(), cols, rows);
  return prepared_and_released(backend_, WeightMatrix{t->data, t->dtype, rows, cols, nullptr});
}

WeightMatrix WeightLoader::matrix(const std::string& name, int64_t rows, int64_t cols) const {
  auto m = optional_matrix(name, rows, cols);
  if (!m) throw_error(ErrorCode::kCorrupt, "{}: missing tensor '{}'", gguf_.path(), name);
  return *m;
}

namespace {

// Rows [first_row, first_row + rows) of a tensor whose rows are `cols` long.
WeightMatrix slice(const Backend& backend, const GgufTensor& t, int64_t first_row, int64_t rows, int64_t cols) {
  KVLM_ASSERT(t.slices.empty(), "row ranges of a contiguous tensor only");
  const auto* base = static_cast<const uint8_t*>(t.data);
  const size_t offset = static_cast<size_t>(first_row) * row_bytes(t.dtype, cols);
  return prepared_and_released(backend, WeightMatrix{base + offset, t.dtype, rows, cols, nullptr});
}

}  // namespace

std::vector<WeightMatrix> WeightLoader::split_rows(const std::string& name, const std::vector<int64_t>& row_counts,
                                                   int64_t cols) const {
  int64_t total = 0;
  for (int64_t r : row_counts) total += r;
  const GgufTensor& t = gguf_.require_tensor(name);
  if (t.dims.size() != 2 || t.dims[0] != cols || t.dims[1] != total)
    throw_error(ErrorCode::kCorrupt, "{}: tensor '{}' has shape {}, expected [{}, {}]", gguf_.path(), name,
                t.shape_string(), cols, total);
  std::vector<WeightMatrix> parts;
  int64_t first = 0;
  for (int64_t r : row_counts) {
    parts.push_back(slice(backend_, t, first, r, cols));
    first += r;
  }
  return parts;
}

std::vector<WeightMatrix> WeightLoader::experts(const std::string& name, int64_t num_experts, int64_t rows,
                                                int64_t cols) const {
  const GgufTensor& t = gguf_.require_tensor(name);
  if (t.dims.size() != 3 || t.dims[0] != cols || t.dims[1] != rows || t.dims[2] != num_experts)
    throw_error(ErrorCode::kCorrupt, "{}: tensor '{}' has shape {}, expected [{}, {}, {}]", gguf_.path(), name,
                t.shape_string(), cols, rows, num_experts);
  std::vector<WeightMatrix> out;
  for (int64_t e = 0; e < num_experts; ++e)
    out.push_back(prepared_and_released(backend_, WeightMatrix{t.slice(e, num_experts), t.dtype, rows, cols, nullptr}));
  return out;
}

std::vector<float> WeightLoader::optional_vector(const std::string& name, int64_t n) const {
  const GgufTensor* t = gguf_.find_tensor(name);
  if (t == nullptr) return {};
  if (t->num_elements() != n)
    throw_error(ErrorCode::kCorrupt, "{}: tensor '{}' has shape {}, expected [{}]", gguf_.path(),
                name, t->shape_string(), n);
  // Norm weights and biases are float in every writer (llama.cpp keeps 1-D
  // tensors F32 when it quantizes); a quantized one is a relabelled table entry.
  if (t->dtype != DType::kF32 && t->dtype != DType::kF16 && t->dtype != DType::kBF16)
    throw_error(ErrorCode::kCorrupt, "{}: tensor '{}' has type {}; a norm weight or bias must be F32, F16 or BF16",
                gguf_.path(), name, dtype_info(t->dtype).name);
  std::vector<float> out(static_cast<size_t>(n));
  dequantize_row(t->dtype, t->data, out.data(), n);
  return out;
}

std::vector<float> WeightLoader::vector(const std::string& name, int64_t n) const {
  auto v = optional_vector(name, n);
  if (v.empty()) throw_error(ErrorCode::kCorrupt, "{}: missing tensor '{}'", gguf_.path(), name);
  return v;
}

WeightMatrix WeightLoader::token_embedding(ModelConfig& config) const {
  const GgufTensor& emb = gguf_.require_tensor("token_embd.weight");
  if (emb.dims.size() != 2 || emb.dims[0] != config.dim || emb.dims[1] > INT32_MAX)
    throw_error(ErrorCode::kCorrupt, "{}: token_embd.weight has shape {}, expected [{}, vocab]", gguf_.path(),
                emb.shape_string(), config.dim);
  config.vocab_size = static_cast<int32_t>(emb.dims[1]);
  return WeightMatrix{emb.data, emb.dtype, config.vocab_size, config.dim, nullptr};
}

WeightMatrix WeightLoader::output_head(const WeightMatrix& token_embd, int64_t vocab_size, int64_t dim) const {
  if (auto head = optional_matrix("output.weight", vocab_size, dim)) return *head;
  return backend_.prepare_matrix(token_embd);
}

}  // namespace kvlm
