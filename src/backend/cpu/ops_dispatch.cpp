// The public element-wise ops (ops.h): each runs the active CPU path's copy
// (ops_impl.h), picked once per call from a table, and large ones are split
// across the compute threads.
#include <algorithm>

#include "backend/cpu/ops.h"
#include "backend/cpu/ops_impl.h"
#include "backend/thread_pool.h"
#include "backend/threads.h"
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
// Only the copies this build holds (KVLM_ISA_PATHS; avxvnni implies avx2).
#if KVLM_HAVE_ISA_PATHS && defined(KVLM_BUILT_AVX2)
constexpr OpsKernels kAvx2Ops = KVLM_OPS_TABLE(avx2);
#endif
#if KVLM_HAVE_ISA_PATHS && defined(KVLM_BUILT_AVX512)
constexpr OpsKernels kAvx512Ops = KVLM_OPS_TABLE(avx512);
#endif

// The table of a path (AVX-VNNI runs the avx2 copies: ops_impl.h).
const OpsKernels& table_for(CpuPath path) {
  switch (path) {
#if KVLM_HAVE_ISA_PATHS && defined(KVLM_BUILT_AVX2)
    case CpuPath::kAvx2:
    case CpuPath::kAvxVnni: return kAvx2Ops;
#endif
#if KVLM_HAVE_ISA_PATHS && defined(KVLM_BUILT_AVX512)
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

// Element-wise work of at least this many values is cut into one piece per
// compute thread (prefill rows, a decode batch's FFN): the pieces are whole
// rows, or runs of a multiple of 64 values, and an element's bits do not
// depend on where its piece starts (ops.cpp: tails run the vector code on a
// padded copy), so the result is the same as in one call. Called from inside
// a parallel task, parallel_for runs the pieces in turn.
constexpr int64_t kSplitElements = 32 * 1024;

// fn(begin, end) over [0, count) units of unit_elements values each.
template <typename Fn>
void split_work(int64_t count, int64_t unit_elements, Fn&& fn) {
  const int threads = num_threads();
  if (threads < 2 || count < 2 || count * unit_elements < kSplitElements) {
    fn(int64_t{0}, count);
    return;
  }
  const int64_t pieces = std::min<int64_t>(threads, count);
  const int64_t per_piece = (count + pieces - 1) / pieces;
  parallel_for(pieces, [&](int64_t p, int) {
    const int64_t begin = p * per_piece;
    if (begin < count) fn(begin, std::min(count, begin + per_piece));
  });
}

// The same over n values in runs of 64.
template <typename Fn>
void split_values(int64_t n, Fn&& fn) {
  constexpr int64_t kRun = 64;
  split_work((n + kRun - 1) / kRun, kRun, [&](int64_t b, int64_t e) { fn(b * kRun, std::min(n, e * kRun)); });
}

}  // namespace cpu

void rms_norm(const float* x, const float* w, float* y, int64_t num_rows, int64_t n, float eps) {
  cpu::split_work(num_rows, n, [&](int64_t r0, int64_t r1) {
    cpu::ops_kernels().rms_norm(x + r0 * n, w, y + r0 * n, r1 - r0, n, eps);
  });
}
void layer_norm(const float* x, const float* w, const float* b, float* y, int64_t num_rows, int64_t n, float eps) {
  cpu::split_work(num_rows, n, [&](int64_t r0, int64_t r1) {
    cpu::ops_kernels().layer_norm(x + r0 * n, w, b, y + r0 * n, r1 - r0, n, eps);
  });
}
void rope(float* x, const int32_t* positions, int64_t num_tokens, int64_t num_heads, int64_t head_dim,
          const RopeParams& p) {
  const int64_t row = num_heads * head_dim;
  cpu::split_work(num_tokens, row, [&](int64_t t0, int64_t t1) {
    cpu::ops_kernels().rope(x + t0 * row, positions + t0, t1 - t0, num_heads, head_dim, p);
  });
}
void softmax(float* x, int64_t num_rows, int64_t n) {
  cpu::split_work(num_rows, n, [&](int64_t r0, int64_t r1) { cpu::ops_kernels().softmax(x + r0 * n, r1 - r0, n); });
}
void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  cpu::split_values(n, [&](int64_t b, int64_t e) { cpu::ops_kernels().swiglu(gate + b, up + b, out + b, e - b); });
}
void geglu(const float* gate, const float* up, float* out, int64_t n) {
  cpu::split_values(n, [&](int64_t b, int64_t e) { cpu::ops_kernels().geglu(gate + b, up + b, out + b, e - b); });
}
void gelu(float* x, int64_t n) {
  cpu::split_values(n, [&](int64_t b, int64_t e) { cpu::ops_kernels().gelu(x + b, e - b); });
}
void soft_cap(float* x, int64_t n, float cap) {
  cpu::split_values(n, [&](int64_t b, int64_t e) { cpu::ops_kernels().soft_cap(x + b, e - b, cap); });
}
void add_inplace(float* y, const float* x, int64_t n) {
  cpu::split_values(n, [&](int64_t b, int64_t e) { cpu::ops_kernels().add_inplace(y + b, x + b, e - b); });
}
void add_bias(float* y, const float* b, int64_t num_rows, int64_t n) {
  cpu::split_work(num_rows, n, [&](int64_t r0, int64_t r1) {
    cpu::ops_kernels().add_bias(y + r0 * n, b, r1 - r0, n);
  });
}
void scale_inplace(float* x, int64_t n, float s) {
  cpu::split_values(n, [&](int64_t b, int64_t e) { cpu::ops_kernels().scale_inplace(x + b, e - b, s); });
}
float dot_f32(const float* a, const float* b, int64_t n) { return cpu::ops_kernels().dot_f32(a, b, n); }
void axpy_f32(float a, const float* x, float* y, int64_t n) { cpu::ops_kernels().axpy_f32(a, x, y, n); }

}  // namespace kvlm
