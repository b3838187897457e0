// Typed access to a GGUF file's tensors with shape checks, for the loaders.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"
#include "model/gguf.h"

namespace kvlm {

class WeightLoader {
 public:
  // Matrices come out prepared for `backend`'s matmul (Backend::prepare_matrix).
  WeightLoader(const GgufFile& gguf, const Backend& backend) : gguf_(gguf), backend_(backend) {}

  // A [rows, cols] matrix (GGUF dims {cols, rows}), prepared for matmul
  // (the CPU's: a copy in its kernels' layout).
  // Throws Error(kCorrupt) when missing or of another shape.
  WeightMatrix matrix(const std::string& name, int64_t rows, int64_t cols) const;
  std::optional<WeightMatrix> optional_matrix(const std::string& name, int64_t rows, int64_t cols) const;
  // The output head: output.weight when the file has one, else the embedding
  // table (tied embeddings), prepared for matmul in both cases.
  WeightMatrix output_head(const WeightMatrix& token_embd, int64_t vocab_size, int64_t dim) const;
  // Row ranges of one fused [sum(row_counts), cols] matrix (Phi-3's attn_qkv
  // and ffn_up), each its own matrix prepared for matmul, in order.
  std::vector<WeightMatrix> split_rows(const std::string& name, const std::vector<int64_t>& row_counts,
                                       int64_t cols) const;
  // The experts of a 3-D [num_experts, rows, cols] tensor (GGUF dims {cols,
  // rows, num_experts}: expert e's rows follow expert e - 1's), one matrix
  // each, prepared for matmul.
  std::vector<WeightMatrix> experts(const std::string& name, int64_t num_experts, int64_t rows, int64_t cols) const;
  // A vector of n values converted to f32 (norm weights, biases).
  std::vector<float> vector(const std::string& name, int64_t n) const;
  std::vector<float> optional_vector(const std::string& name, int64_t n) const;  // empty if absent
  // token_embd.weight as a [vocab, dim] matrix, not prepared (get_row reads
  // the GGUF layout); sets config.vocab_size from its shape (the authority
  // over the vocabulary's length).
  WeightMatrix token_embedding(ModelConfig& config) const;

 private:
  const GgufFile& gguf_;
  const Backend& backend_;
};

}  // namespace kvlm
