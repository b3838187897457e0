#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "common/assert.h"

namespace kvlm {

MoeWeights load_moe_weights(const WeightLoader& w, const std::string& p, const ModelConfig& c) {
  const MoeConfig& m = c.moe;
  MoeWeights e;
  e.router = w.matrix(p + "ffn_gate_inp.weight", m.num_experts, c.dim);
  e.gate = w.experts(p + "ffn_gate_exps.weight", m.num_experts, m.expert_ffn_dim, c.dim);
  e.up = w.experts(p + "ffn_up_exps.weight", m.num_experts, m.expert_ffn_dim, c.dim);
  e.down = w.experts(p + "ffn_down_exps.weight", m.num_experts, c.dim, m.expert_ffn_dim);
  if (m.shared_ffn_dim > 0) {
    e.shared_gate = w.matrix(p + "ffn_gate_inp_shexp.weight", 1, c.dim);
    e.shared_w_gate = w.matrix(p + "ffn_gate_shexp.weight", m.shared_ffn_dim, c.dim);
    e.shared_w_up = w.matrix(p + "ffn_up_shexp.weight", m.shared_ffn_dim, c.dim);
    e.shared_w_down = w.matrix(p + "ffn_down_shexp.weight", c.dim, m.shared_ffn_dim);
  }
  return e;
}

void MoeStats::reset(int32_t num_layers, int32_t num_experts) {
  const size_t n = static_cast<size_t>(num_layers) * static_cast<size_t>(num_experts);
  weight_reads.assign(n, 0);
  tokens.assign(n, 0);
}

namespace {

// Softmax over the experts, then each token's k most probable (the lower
// index first on a tie), weighted by their probabilities, normalised to sum
// to 1 where the family does so.
void route(const Backend& backend, const MoeWeights& w, const MoeConfig& c, const float* xn, int64_t T,
           MoeScratch& s) {
  const int32_t E = c.num_experts, k = c.num_experts_used;
  s.probs.resize(static_cast<size_t>(T) * E);
  backend.matmul(w.router, xn, T, s.probs.data());
  backend.softmax(s.probs.data(), T, E);
  s.choice.resize(static_cast<size_t>(T) * k);
  s.weight.resize(static_cast<size_t>(T) * k);
  std::vector<int32_t> order(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t) {
    const float* p = &s.probs[t * E];
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [p](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    float sum = 0.f;
    for (int32_t r = 0; r < k; ++r) sum += p[order[r]];
    for (int32_t r = 0; r < k; ++r) {
      s.choice[t * k + r] = order[r];
      s.weight[t * k + r] = c.normalize_weights ? p[order[r]] / sum : p[order[r]];
    }
  }
}

// Counting sort of the (token, rank) pairs by expert: expert e's pairs are
// pairs[pair_start[e] .. pair_start[e + 1]), in token order.
void group_by_expert(const MoeConfig& c, int64_t T, MoeScratch& s) {
  const int32_t E = c.num_experts, k = c.num_experts_used;
  s.pair_start.assign(static_cast<size_t>(E) + 1, 0);
  for (int64_t i = 0; i < T * k; ++i) ++s.pair_start[s.choice[i] + 1];
  for (int32_t e = 0; e < E; ++e) s.pair_start[e + 1] += s.pair_start[e];
  std::vector<int32_t> next(s.pair_start.begin(), s.pair_start.end() - 1);
  s.pairs.resize(static_cast<size_t>(T) * k);
  for (int64_t i = 0; i < T * k; ++i) s.pairs[next[s.choice[i]]++] = static_cast<int32_t>(i);
}

// Expert e over its n tokens at once: gather their rows, SwiGLU, and put each
// output row at its pair's place in ye.
void run_expert(const Backend& backend, const MoeWeights& w, const MoeConfig& c, int32_t e, const float* xn,
                int64_t dim, MoeScratch& s) {
  const int32_t begin = s.pair_start[e], n = s.pair_start[e + 1] - begin;
  const int32_t k = c.num_experts_used, ffn = c.expert_ffn_dim;
  s.xe.resize(static_cast<size_t>(n) * dim);
  s.ge.resize(static_cast<size_t>(n) * ffn);
  s.ue.resize(static_cast<size_t>(n) * std::max<int64_t>(ffn, dim));
  for (int32_t i = 0; i < n; ++i) {
    const int64_t t = s.pairs[begin + i] / k;
    std::memcpy(&s.xe[i * dim], xn + t * dim, sizeof(float) * dim);
  }
  const MatmulJob gate_up[] = {{&w.gate[e], s.ge.data()}, {&w.up[e], s.ue.data()}};
  backend.matmul_many(gate_up, s.xe.data(), n);
  backend.swiglu(s.ge.data(), s.ue.data(), s.ge.data(), static_cast<int64_t>(n) * ffn);
  backend.matmul(w.down[e], s.ge.data(), n, s.ue.data());  // [n, dim]
  for (int32_t i = 0; i < n; ++i)
    std::memcpy(&s.ye[static_cast<size_t>(s.pairs[begin + i]) * dim], &s.ue[i * dim], sizeof(float) * dim);
}

// out += sigmoid(xn . shared_gate) * SwiGLU_shared(xn), per token.
void add_shared_expert(const Backend& backend, const MoeWeights& w, const MoeConfig& c, const float* xn,
                       int64_t T, int64_t dim, MoeScratch& s, float* out) {
  const int64_t ffn = c.shared_ffn_dim;
  s.sg.resize(static_cast<size_t>(T));
  s.sh1.resize(static_cast<size_t>(T * ffn));
  s.sh2.resize(static_cast<size_t>(T * std::max(ffn, dim)));
  backend.matmul(*w.shared_gate, xn, T, s.sg.data());
  const MatmulJob gate_up[] = {{&w.shared_w_gate, s.sh1.data()}, {&w.shared_w_up, s.sh2.data()}};
  backend.matmul_many(gate_up, xn, T);
  backend.swiglu(s.sh1.data(), s.sh2.data(), s.sh1.data(), T * ffn);
  backend.matmul(w.shared_w_down, s.sh1.data(), T, s.sh2.data());  // [T, dim]
  for (int64_t t = 0; t < T; ++t) {
    const float g = 1.f / (1.f + std::exp(-s.sg[t]));
    for (int64_t i = 0; i < dim; ++i) out[t * dim + i] += g * s.sh2[t * dim + i];
  }
}

}  // namespace

void moe_ffn(const Backend& backend, const MoeWeights& w, const MoeConfig& c, const float* xn, int64_t T,
             int64_t dim, MoeScratch& s, float* out, MoeStats& stats, int32_t layer) {
  const int32_t E = c.num_experts, k = c.num_experts_used;
  KVLM_ASSERT(stats.weight_reads.size() >= static_cast<size_t>(layer + 1) * E, "MoeStats sized for every layer");
  route(backend, w, c, xn, T, s);
  group_by_expert(c, T, s);
  s.ye.resize(static_cast<size_t>(T) * k * dim);
  for (int32_t e = 0; e < E; ++e) {
    const int32_t n = s.pair_start[e + 1] - s.pair_start[e];
    if (n == 0) continue;
    run_expert(backend, w, c, e, xn, dim, s);
    ++stats.weight_reads[static_cast<size_t>(layer) * E + e];
    stats.tokens[static_cast<size_t>(layer) * E + e] += n;
  }
  // Each token's experts summed in rank order, as llama.cpp adds them.
  for (int64_t t = 0; t < T; ++t) {
    float* o = out + t * dim;
    for (int64_t i = 0; i < dim; ++i) o[i] = s.weight[t * k] * s.ye[(t * k) * dim + i];
    for (int32_t r = 1; r < k; ++r) {
      const float wr = s.weight[t * k + r];
      const float* y = &s.ye[(t * k + r) * dim];
      for (int64_t i = 0; i < dim; ++i) o[i] += wr * y[i];
    }
  }
  if (w.shared_gate) add_shared_expert(backend, w, c, xn, T, dim, s, out);
}

}  // namespace kvlm
