// Run-time dispatch of the element-wise ops (ops.h) and of paged attention
// (attention.h), as matmul does it (matmul_impl.h): ops.cpp and
// attention_kernels.cpp are compiled once plain, as the scalar path
// (namespace kvlm::cpu::base), and once more per ISA path with that path's
// flags (backend/CMakeLists.txt; namespaces kvlm::cpu::avx2 and
// kvlm::cpu::avx512). The public functions of ops.h and paged_attention()
// call the copy of the active CpuPath (cpu_path.h), so a KVLM_NATIVE=OFF
// build runs its attention and norms with the widest vectors the CPU has,
// and KVLM_CPU_PATH=scalar really runs scalar code. The AVX-VNNI path takes
// the avx2 copy: nothing here uses int8 dot products.
#pragma once

#include <cstdint>
#include <span>

#include "backend/cpu/attention.h"
#include "backend/cpu/cpu_path.h"
#include "backend/cpu/ops.h"

namespace kvlm::cpu {

// One path's copy of every function in ops.h, and its paged_attention.
#define KVLM_DECLARE_OPS_KERNELS                                                                                 \
  void rms_norm(const float* x, const float* w, float* y, int64_t num_rows, int64_t n, float eps);              \
  void layer_norm(const float* x, const float* w, const float* b, float* y, int64_t num_rows, int64_t n,        \
                  float eps);                                                                                   \
  void rope(float* x, const int32_t* positions, int64_t num_tokens, int64_t num_heads, int64_t head_dim,        \
            const RopeParams& p);                                                                               \
  void softmax(float* x, int64_t num_rows, int64_t n);                                                          \
  void swiglu(const float* gate, const float* up, float* out, int64_t n);                                       \
  void geglu(const float* gate, const float* up, float* out, int64_t n);                                        \
  void gelu(float* x, int64_t n);                                                                               \
  void soft_cap(float* x, int64_t n, float cap);                                                                \
  void add_inplace(float* y, const float* x, int64_t n);                                                        \
  void add_bias(float* y, const float* b, int64_t num_rows, int64_t n);                                         \
  void scale_inplace(float* x, int64_t n, float s);                                                             \
  float dot_f32(const float* a, const float* b, int64_t n);                                                     \
  void axpy_f32(float a, const float* x, float* y, int64_t n);                                                  \
  void paged_attention(const KvLayout& layout, const KvLayer& layer, const float* q,                            \
                       std::span<const AttentionSeq> seqs, const AttentionParams& params, float* out);

namespace base {
KVLM_DECLARE_OPS_KERNELS
}
#if KVLM_HAVE_ISA_PATHS
namespace avx2 {
KVLM_DECLARE_OPS_KERNELS
}
namespace avx512 {
KVLM_DECLARE_OPS_KERNELS
}
#endif

// The table of one path's copies.
struct OpsKernels {
  decltype(&base::rms_norm) rms_norm;
  decltype(&base::layer_norm) layer_norm;
  decltype(&base::rope) rope;
  decltype(&base::softmax) softmax;
  decltype(&base::swiglu) swiglu;
  decltype(&base::geglu) geglu;
  decltype(&base::gelu) gelu;
  decltype(&base::soft_cap) soft_cap;
  decltype(&base::add_inplace) add_inplace;
  decltype(&base::add_bias) add_bias;
  decltype(&base::scale_inplace) scale_inplace;
  decltype(&base::dot_f32) dot_f32;
  decltype(&base::axpy_f32) axpy_f32;
  decltype(&base::paged_attention) paged_attention;
};

// The copies `path` runs (it must be supported), and those of the active path.
const OpsKernels& ops_kernels_for(CpuPath path);
const OpsKernels& ops_kernels();

}  // namespace kvlm::cpu
