// The public element-wise ops (ops.h): each runs the active CPU path's copy
// (ops_impl.h), picked once per call from a table.
#include "backend/cpu/ops.h"
#include "backend/cpu/ops_impl.h"
#include "common/assert.h"

namespace kvlm {
namespace cpu {
namespace {

#define KVLM_OPS_TABLE(ns)                                                                                       \
  OpsKernels {                                                                                                  \
    &ns::rms_norm, &ns::layer_norm, &ns::rope, &ns::softmax, &ns::swiglu, &ns::geglu, &ns::gelu, &ns::soft_cap, \
        &ns::add_inplace, &ns::add_bias, &ns::scale_inplace, &ns::dot_f32, &ns::axpy_f32, &ns::paged_attention  \
  }

constexpr OpsKernels kScalarOps = KVLM_OPS_TABLE(base);
#if defined(__x86_64__)
constexpr OpsKernels kAvx2Ops = KVLM_OPS_TABLE(avx2);
constexpr OpsKernels kAvx512Ops = KVLM_OPS_TABLE(avx512);
#endif

// The table of a path (AVX-VNNI runs the avx2 copies: ops_impl.h).
const OpsKernels& table_for(CpuPath path) {
  switch (path) {
#if defined(__x86_64__)
    case CpuPath::kAvx2:
    case CpuPath::kAvxVnni: return kAvx2Ops;
    case CpuPath::kAvx512: return kAvx512Ops;
#endif
    default: return kScalarOps;
  }
}

}  // namespace

const OpsKernels& ops_kernels_for(CpuPath path) {
  KVLM_ASSERT(cpu_path_supported(path), "ops: kernels of a CPU path this CPU cannot run");
  return table_for(path);
}

// active_cpu_path() is only ever a supported path: no check per call.
const OpsKernels& ops_kernels() { return table_for(active_cpu_path()); }

}  // namespace cpu

void rms_norm(const float* x, const float* w, float* y, int64_t num_rows, int64_t n, float eps) {
  cpu::ops_kernels().rms_norm(x, w, y, num_rows, n, eps);
}
void layer_norm(const float* x, const float* w, const float* b, float* y, int64_t num_rows, int64_t n, float eps) {
  cpu::ops_kernels().layer_norm(x, w, b, y, num_rows, n, eps);
}
void rope(float* x, const int32_t* positions, int64_t num_tokens, int64_t num_heads, int64_t head_dim,
          const RopeParams& p) {
  cpu::ops_kernels().rope(x, positions, num_tokens, num_heads, head_dim, p);
}
void softmax(float* x, int64_t num_rows, int64_t n) { cpu::ops_kernels().softmax(x, num_rows, n); }
void swiglu(const float* gate, const float* up, float* out, int64_t n) { cpu::ops_kernels().swiglu(gate, up, out, n); }
void geglu(const float* gate, const float* up, float* out, int64_t n) { cpu::ops_kernels().geglu(gate, up, out, n); }
void gelu(float* x, int64_t n) { cpu::ops_kernels().gelu(x, n); }
void soft_cap(float* x, int64_t n, float cap) { cpu::ops_kernels().soft_cap(x, n, cap); }
void add_inplace(float* y, const float* x, int64_t n) { cpu::ops_kernels().add_inplace(y, x, n); }
void add_bias(float* y, const float* b, int64_t num_rows, int64_t n) {
  cpu::ops_kernels().add_bias(y, b, num_rows, n);
}
void scale_inplace(float* x, int64_t n, float s) { cpu::ops_kernels().scale_inplace(x, n, s); }
float dot_f32(const float* a, const float* b, int64_t n) { return cpu::ops_kernels().dot_f32(a, b, n); }
void axpy_f32(float a, const float* x, float* y, int64_t n) { cpu::ops_kernels().axpy_f32(a, x, y, n); }

}  // namespace kvlm
