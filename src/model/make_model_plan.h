// What `kvlm make-model` writes, before any byte is generated: the shape
// checks, the GGUF metadata and the list of tensors in llama.cpp's names for
// each architecture (make_model.cpp then fills them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/dtype.h"
#include "model/gguf_writer.h"
#include "model/make_model.h"

namespace kvlm {

enum class Fill {
  kNormal,  // N(0, weight_std^2), a stream per (seed, tensor, row)
  kOnes,    // norm weights
  kValues,  // TensorPlan::values (RoPE factors)
  kRowsOf,  // rows of another tensor: TensorPlan::source, source_rows (a reranker's head)
};

struct TensorPlan {
  std::string name;
  int64_t cols = 0;     // row length (GGUF dims[0])
  int64_t rows = 1;     // rows of one matrix; 1 for a vector
  int64_t experts = 0;  // > 0: a 3-D stack of that many [rows, cols] matrices (GGUF dims {cols, rows, experts})
  DType dtype = DType::kF32;
  Fill fill = Fill::kNormal;
  bool is_matrix = true;      // GGUF dims {cols, rows}; a vector's are {cols}
  std::vector<float> values;  // Fill::kValues: the vector's contents
  bool fell_back = false;     // a matrix whose rows did not fit the asked type's blocks
  size_t source = 0;          // Fill::kRowsOf: the plan index of the tensor whose rows these are
  std::vector<int64_t> source_rows;  // Fill::kRowsOf: its rows, in order (drawn from the same streams)
  int64_t total_rows() const { return rows * (experts > 0 ? experts : 1); }
  std::vector<int64_t> dims() const;
};

// Throws Error(kInvalidArgument) naming the flag of the first invalid field.
void check_shape(const ModelShape& s);

// The tensors of `s` with a vocabulary of `vocab` tokens, matrices in `type`
// where their rows fit its blocks.
std::vector<TensorPlan> plan_tensors(const ModelShape& s, int64_t vocab, DType type);

// A reranker's label tokens ("yes", "no") in the vocabulary of `vocab_from`;
// Error(kInvalidArgument) when it lacks one.
std::vector<int64_t> rank_label_tokens(const std::string& vocab_from);
// The head of a reranker (s.rank_head), appended last: cls.output.weight,
// F32, the rows `label_tokens` of the output head (output.weight, else the
// tied token_embd.weight).
void plan_rank_head(const ModelShape& s, std::vector<int64_t> label_tokens, std::vector<TensorPlan>& plan);

// Model metadata plus the vocabulary file's tokenizer.* keys; returns the vocab size.
int64_t set_metadata(GgufWriter& w, const MakeModelOptions& o);

// llama3 scaling's per-pair frequency factors, [head_size / 2], computed as
// llama.cpp's converter computes rope_freqs from config.json's rope_scaling.
std::vector<float> llama3_rope_factors(const ModelShape& s);

}  // namespace kvlm
