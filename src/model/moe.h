// The mixture-of-experts feed-forward block (Mixtral, Qwen2-MoE, Qwen3-MoE):
// a router scores the experts of each token, the top k run as SwiGLU FFNs,
// and their outputs are summed with the routing weights. The T tokens of a
// step are grouped by expert, so each expert's matrices are read once per
// forward pass however many tokens chose it (a prefill reads every expert
// once, not once per token).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"
#include "model/weights.h"

namespace kvlm {

struct MoeWeights {
  WeightMatrix router;                      // [num_experts, dim]  ffn_gate_inp
  std::vector<WeightMatrix> gate, up;       // [num_experts] x [expert_ffn, dim]
  std::vector<WeightMatrix> down;           // [num_experts] x [dim, expert_ffn]
  // Qwen2-MoE's shared expert, added to every token scaled by sigmoid(x . shared_gate).
  std::optional<WeightMatrix> shared_gate;  // [1, dim]  ffn_gate_inp_shexp
  WeightMatrix shared_w_gate, shared_w_up;  // [shared_ffn, dim]
  WeightMatrix shared_w_down;               // [dim, shared_ffn]
};

// Reads layer `prefix` ("blk.N.")'s expert tensors as llama.cpp names them:
// ffn_gate_inp, ffn_{gate,up,down}_exps (3-D, one slice per expert) and, with
// a shared expert, ffn_gate_inp_shexp and ffn_{gate,up,down}_shexp.
MoeWeights load_moe_weights(const WeightLoader& w, const std::string& prefix, const ModelConfig& c);

// Buffers of one MoE block, reused across layers and steps.
struct MoeScratch {
  std::vector<float> probs;         // [T, num_experts] router softmax
  std::vector<int32_t> choice;      // [T, k] chosen experts, most probable first
  std::vector<float> weight;        // [T, k] their weights
  std::vector<int32_t> pair_start;  // [num_experts + 1] each expert's run in `pairs`
  std::vector<int32_t> pairs;       // [T * k] (t * k + rank), grouped by expert, ascending t
  std::vector<float> xe, ge, ue;    // [n_e, dim], [n_e, ffn] x2: one expert's tokens
  std::vector<float> ye;            // [T * k, dim] each pair's expert output
  std::vector<float> sg, sh1, sh2;  // shared expert: [T] gate, [T, shared_ffn] x2
};

// Counts of the experts' work in one forward pass, for tests and benchmarks.
struct MoeStats {
  // Passes over expert e of layer l's matrices (gate, up and down together
  // count once) at [l * num_experts + e]; 1 for every expert any token chose,
  // whatever the number of tokens.
  std::vector<int32_t> weight_reads;
  std::vector<int32_t> tokens;  // token-expert pairs routed to each, same index
  void reset(int32_t num_layers, int32_t num_experts);
};

// out ([T, dim]) = the MoE FFN of xn ([T, dim]). Each token's output depends
// only on its own row, summed over its experts in rank order, so it is bit
// for bit the same in any batch. `stats` gets layer `layer`'s counts.
void moe_ffn(const Backend& backend, const MoeWeights& w, const MoeConfig& c, const float* xn, int64_t T,
             int64_t dim, MoeScratch& s, float* out, MoeStats& stats, int32_t layer);

}  // namespace kvlm
