// The classification head of a decoder reranker, as llama.cpp applies it
// with pooling_type 4 (rank) to Qwen3-Reranker GGUFs: the last token's
// final hidden state (after the output norm) times cls.output.weight
// ([labels, dim]; the converter stacks the lm_head rows of "yes" and "no"),
// plus cls.output.bias when the file has one, then a softmax over the
// labels. The relevance score is the first label's probability (P("yes")).
// llama.cpp's softmax is Qwen3's (and Qwen3-VL's) alone, and its converter
// writes no other decoder reranker: another decoder would score a raw
// logit, not a probability, so kvlm ranks only Qwen3.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace kvlm {

class Model;

class RankHead {
 public:
  // The head of a reranker (pooling_type 4, Qwen3, cls.output.weight);
  // throws Error(kUnsupported) saying why another model is none, and
  // Error(kCorrupt) for a head of the wrong shape.
  static std::unique_ptr<RankHead> load(const Model& model);

  int32_t num_labels() const { return num_labels_; }
  // The relevance score of a pair from its last token's final hidden state
  // ([dim]): softmax(W h + b)[0], in [0, 1].
  float score(std::span<const float> hidden) const;

 private:
  RankHead(int32_t dim, int32_t num_labels) : dim_(dim), num_labels_(num_labels) {}
  int32_t dim_;
  int32_t num_labels_;
  std::vector<float> weight_;  // [num_labels, dim], dequantized at load (a few rows)
  std::vector<float> bias_;    // [num_labels] or empty
};

}  // namespace kvlm
