#include "backend/cpu/cpu_backend.h"

#include <utility>

#include "backend/cpu/attention.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/ops.h"

namespace kvlm {
namespace {

// Forwards each op to its kernel; the kernels' headers state their numerics
// (matmul.h: activation quantization; attention.h: per KV dtype).
class CpuBackend final : public Backend {
 public:
  WeightMatrix prepare_matrix(WeightMatrix w) const override { return pack_for_matmul(std::move(w)); }
  void get_row(const WeightMatrix& w, int64_t row, float* out) const override { kvlm::get_row(w, row, out); }
  void matmul(const WeightMatrix& w, const float* x, int64_t num_tokens, float* y) const override {
    kvlm::matmul(w, x, num_tokens, y);
  }
  void matmul_many(std::span<const MatmulJob> jobs, const float* x, int64_t num_tokens) const override {
    kvlm::matmul_many(jobs, x, num_tokens);
  }
  void matmul_grouped(std::span<const GroupedMatmulJob> jobs) const override { kvlm::matmul_grouped(jobs); }

  void rms_norm(const float* x, const float* w, float* y, int64_t num_rows, int64_t n, float eps) const override {
    kvlm::rms_norm(x, w, y, num_rows, n, eps);
  }
  void layer_norm(const float* x, const float* w, const float* b, float* y, int64_t num_rows, int64_t n,
                  float eps) const override {
    kvlm::layer_norm(x, w, b, y, num_rows, n, eps);
  }
  void rope(float* x, const int32_t* positions, int64_t num_tokens, int64_t num_heads, int64_t head_dim,
            const RopeParams& p) const override {
    kvlm::rope(x, positions, num_tokens, num_heads, head_dim, p);
  }
  void softmax(float* x, int64_t num_rows, int64_t n) const override { kvlm::softmax(x, num_rows, n); }

  void swiglu(const float* gate, const float* up, float* out, int64_t n) const override {
    kvlm::swiglu(gate, up, out, n);
  }
  void geglu(const float* gate, const float* up, float* out, int64_t n) const override {
    kvlm::geglu(gate, up, out, n);
  }
  void gelu(float* x, int64_t n) const override { kvlm::gelu(x, n); }
  void soft_cap(float* x, int64_t n, float cap) const override { kvlm::soft_cap(x, n, cap); }
  void add_inplace(float* y, const float* x, int64_t n) const override { kvlm::add_inplace(y, x, n); }
  void add_bias(float* y, const float* b, int64_t num_rows, int64_t n) const override {
    kvlm::add_bias(y, b, num_rows, n);
  }
  void scale_inplace(float* x, int64_t n, float s) const override { kvlm::scale_inplace(x, n, s); }

  void kv_write(const KvLayout& layout, const KvLayer& layer, const float* k, const float* v, const int64_t* slots,
                int64_t num_tokens) const override {
    kvlm::kv_write(layout, layer, k, v, slots, num_tokens);
  }
  void kv_deviation(const KvLayout& layout, const KvLayer& layer, const float* k, const float* v,
                    const int64_t* slots, int64_t num_tokens, float* out) const override {
    kvlm::kv_deviation(layout, layer, k, v, slots, num_tokens, out);
  }
  void paged_attention(const KvLayout& layout, const KvLayer& layer, const float* q,
                       std::span<const AttentionSeq> seqs, const AttentionParams& params,
                       float* out) const override {
    kvlm::paged_attention(layout, layer, q, seqs, params, out);
  }
};

}  // namespace

const Backend& cpu_backend() {
  static const CpuBackend backend;
  return backend;
}

// The only backend built today; a build with another picks here which runs
// when the loader names none.
const Backend& default_backend() { return cpu_backend(); }

}  // namespace kvlm
