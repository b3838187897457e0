// matmul(): prepares the activations once (f32 as is, or quantized to Q8_0 /
// Q8_K), then hands chunks of output rows to the compute threads on demand;
// a chunk's weight rows meet every token (in L2-sized token chunks) through
// the dtype's kernel, so decode reads each weight once per step.
#include "backend/cpu/matmul.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/matmul_impl.h"
#include "backend/cpu/simd.h"
#include "backend/quant.h"
#include "backend/quant_impl.h"
#include "backend/thread_pool.h"
#include "backend/threads.h"
#include "common/assert.h"

namespace kvlm {
namespace cpu {
namespace {

#if KVLM_AVX2
// Round half away from zero (C's roundf), the rounding of quantize_row_q8_0_ref.
inline __m256 round_half_away(__m256 v) {
  const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 frac = simd::abs_ps(_mm256_sub_ps(v, t));  // exact
  const __m256 up = _mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
  const __m256 one = _mm256_or_ps(_mm256_and_ps(v, _mm256_set1_ps(-0.f)), _mm256_set1_ps(1.f));
  return _mm256_add_ps(t, _mm256_and_ps(up, one));
}

// 32 int32 lanes (in four vectors, in order) -> 32 int8, saturating.
inline __m256i pack_to_i8(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ab = _mm256_packs_epi32(a, b);
  const __m256i cd = _mm256_packs_epi32(c, d);
  // packs works per 128-bit lane; the permute puts the four groups back in order.
  return _mm256_permutevar8x32_epi32(_mm256_packs_epi16(ab, cd), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}
#endif

}  // namespace

void quantize_act_q8_0(const float* x, int64_t cols, int8_t* qs, float* d) {
  const int64_t num_blocks = cols / 32;
  for (int64_t b = 0; b < num_blocks; ++b) {
    const float* xb = x + 32 * b;
#if KVLM_AVX2
    __m256 v[4];
    for (int k = 0; k < 4; ++k) v[k] = _mm256_loadu_ps(xb + 8 * k);
    const __m256 m = _mm256_max_ps(_mm256_max_ps(simd::abs_ps(v[0]), simd::abs_ps(v[1])),
                                   _mm256_max_ps(simd::abs_ps(v[2]), simd::abs_ps(v[3])));
    const float amax = simd::hmax(m);
#else
    float amax = 0.f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(xb[j]));
#endif
    const float scale = amax / 127.f;
    const float id = scale != 0.f ? 1.f / scale : 0.f;
    d[b] = fp16_to_f32(f32_to_fp16(scale));  // the block stores d as fp16
#if KVLM_AVX2
    const __m256 idv = _mm256_set1_ps(id);
    __m256i q[4];
    for (int k = 0; k < 4; ++k) q[k] = _mm256_cvtps_epi32(round_half_away(_mm256_mul_ps(v[k], idv)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs + 32 * b), pack_to_i8(q[0], q[1], q[2], q[3]));
#else
    for (int j = 0; j < 32; ++j) qs[32 * b + j] = static_cast<int8_t>(std::round(xb[j] * id));
#endif
  }
}

void quantize_act_q8_k(const float* x, int64_t cols, ActBlockQ8K* out) {
  const int64_t num_blocks = cols / 256;
  for (int64_t b = 0; b < num_blocks; ++b, x += 256) {
    ActBlockQ8K& o = out[b];
#if KVLM_AVX2
    __m256 m = _mm256_setzero_ps();
    for (int j = 0; j < 256; j += 8) m = _mm256_max_ps(m, simd::abs_ps(_mm256_loadu_ps(x + j)));
    const float amax = simd::hmax(m);
#else
    float amax = 0.f;
    for (int j = 0; j < 256; ++j) amax = std::max(amax, std::fabs(x[j]));
#endif
    if (amax == 0.f) {
      std::fill(std::begin(o.qs), std::end(o.qs), int8_t{0});
      std::fill(std::begin(o.bsums), std::end(o.bsums), int16_t{0});
      std::fill(std::begin(o.bsum_pairs), std::end(o.bsum_pairs), int16_t{0});
      o.d = 0.f;
      continue;
    }
    // The reference keeps the first value of largest magnitude (its sign sets iscale's).
    int j_max = 0;
    while (std::fabs(x[j_max]) != amax) ++j_max;
    const float iscale = -127.f / x[j_max];
#if KVLM_AVX2
    const __m256 isv = _mm256_set1_ps(iscale);
    const __m256i cap = _mm256_set1_epi32(127);
    for (int j = 0; j < 256; j += 32) {
      __m256i q[4];
      for (int k = 0; k < 4; ++k) {
        const __m256 v = _mm256_mul_ps(isv, _mm256_loadu_ps(x + j + 8 * k));
        q[k] = _mm256_min_epi32(cap, _mm256_cvtps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
      }
      _mm256_store_si256(reinterpret_cast<__m256i*>(o.qs + j), pack_to_i8(q[0], q[1], q[2], q[3]));
    }
#else
    for (int j = 0; j < 256; ++j) o.qs[j] = static_cast<int8_t>(std::min(127, detail::nearest_int(iscale * x[j])));
#endif
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += o.qs[16 * g + j];
      o.bsums[g] = static_cast<int16_t>(sum);
    }
    for (int j = 0; j < 8; ++j) o.bsum_pairs[j] = static_cast<int16_t>(o.bsums[2 * j] + o.bsums[2 * j + 1]);
    o.d = 1.f / iscale;
  }
}

namespace {

enum class ActKind { kF32, kQ8_0, kQ8_K };

struct KernelInfo {
  RowRangeKernel fn;
  ActKind act;
};

KernelInfo kernel_for(DType t) {
  switch (t) {
    case DType::kF32: return {kernel_f32, ActKind::kF32};
    case DType::kF16: return {kernel_f16, ActKind::kF32};
    case DType::kBF16: return {kernel_bf16, ActKind::kF32};
    case DType::kQ8_0: return {kernel_q8_0, ActKind::kQ8_0};
    case DType::kQ4_0: return {kernel_q4_0, ActKind::kQ8_0};
    case DType::kQ4_K: return {kernel_q4_k, ActKind::kQ8_K};
    case DType::kQ6_K: return {kernel_q6_k, ActKind::kQ8_K};
    case DType::kQ8_K: break;
  }
  KVLM_ASSERT(false, "matmul: Q8_K is an activation type, not a weight type");
  return {nullptr, ActKind::kF32};
}

// Quantized activations of the calling thread, reused across calls so a
// forward pass allocates only while the buffers grow to their largest size.
struct ActScratch {
  std::vector<int8_t> q8_qs;       // [num_tokens, cols]
  std::vector<float> q8_d;         // [num_tokens, cols / 32]
  std::vector<ActBlockQ8K> q8k;    // [num_tokens, cols / 256]
};
thread_local ActScratch t_scratch;

// Below this many multiply-adds the fork/join of a parallel region costs more
// than it saves.
constexpr int64_t kMinParallelWork = 1 << 17;
// Activations of one token chunk should stay in L2 while weight rows stream.
constexpr int64_t kActChunkBytes = 192 * 1024;
// Up to this many activation values are quantized by the calling thread alone.
constexpr int64_t kSerialActElements = 16 * 1024;
// Weights handed to a thread at a time (see matmul()).
constexpr int64_t kRowChunkBytes = 96 * 1024;

}  // namespace
}  // namespace cpu

void matmul(const WeightMatrix& w, const float* x, int64_t num_tokens, float* y) {
  using namespace cpu;
  if (num_tokens <= 0 || w.rows <= 0) return;  // e.g. a step where no row needs logits
  KVLM_ASSERT(w.data != nullptr && x != nullptr && y != nullptr, "matmul: null buffer");
  KVLM_ASSERT(w.cols % dtype_info(w.dtype).block_size == 0, "matmul: cols not a multiple of the block size");
  const KernelInfo kernel = kernel_for(w.dtype);
  const int64_t cols = w.cols;

  MatmulActs acts;
  acts.cols = cols;
  int64_t act_bytes_per_token = cols * 4;
  ActScratch& scratch = t_scratch;
  switch (kernel.act) {
    case ActKind::kF32:
      acts.f32 = x;
      break;
    case ActKind::kQ8_0:
      if (scratch.q8_qs.size() < static_cast<size_t>(num_tokens * cols)) {
        scratch.q8_qs.resize(num_tokens * cols);
        scratch.q8_d.resize(num_tokens * cols / 32);
      }
      acts.q8_qs = scratch.q8_qs.data();
      acts.q8_d = scratch.q8_d.data();
      act_bytes_per_token = cols + cols / 8;
      break;
    case ActKind::kQ8_K:
      if (scratch.q8k.size() < static_cast<size_t>(num_tokens * cols / 256)) {
        scratch.q8k.resize(num_tokens * cols / 256);
      }
      acts.q8k = scratch.q8k.data();
      act_bytes_per_token = cols / 256 * static_cast<int64_t>(sizeof(ActBlockQ8K));
      break;
  }
  int64_t chunk = std::max<int64_t>(8, kActChunkBytes / std::max<int64_t>(1, act_bytes_per_token));
  chunk = std::min(num_tokens, chunk / 8 * 8);

  const int64_t work = w.rows * cols * num_tokens;
  const int num_threads_used =
      work < kMinParallelWork ? 1 : static_cast<int>(std::min<int64_t>(num_threads(), w.rows));
  // Row chunks of about kRowChunkBytes of weights (they stay in L2 while the
  // token chunks pass over them), and at least 8 chunks per thread.
  const int64_t weight_row_bytes = static_cast<int64_t>(row_bytes(w.dtype, cols));
  int64_t rows_per_chunk = std::max<int64_t>(1, kRowChunkBytes / weight_row_bytes);
  rows_per_chunk = std::min(rows_per_chunk, (w.rows + 8 * num_threads_used - 1) / (8 * num_threads_used));
  rows_per_chunk = std::max<int64_t>(rows_per_chunk, 4);
  const int64_t num_row_chunks = (w.rows + rows_per_chunk - 1) / rows_per_chunk;

  auto quantize_token = [&](int64_t t) {
    if (kernel.act == ActKind::kQ8_0) {
      quantize_act_q8_0(x + t * cols, cols, scratch.q8_qs.data() + t * cols, scratch.q8_d.data() + t * (cols / 32));
    } else if (kernel.act == ActKind::kQ8_K) {
      quantize_act_q8_k(x + t * cols, cols, scratch.q8k.data() + t * (cols / 256));
    }
  };
  // A few tokens are quantized before forking: one barrier fewer per call.
  const bool quantize_in_parallel = kernel.act != ActKind::kF32 && num_tokens * cols > kSerialActElements;
  if (kernel.act != ActKind::kF32 && !quantize_in_parallel) {
    for (int64_t t = 0; t < num_tokens; ++t) quantize_token(t);
  }

  if (quantize_in_parallel) {
    parallel_for(num_tokens, [&](int64_t t, int) { quantize_token(t); });
  }
  // Every activation row is ready here. Rows go out in small chunks on
  // demand, so a thread that the OS preempts (other work shares these cores)
  // delays the step by one chunk, not by its whole share.
  auto run_chunk = [&](int64_t rc, int) {
    const int64_t row_begin = rc * rows_per_chunk;
    const int64_t row_end = std::min(w.rows, row_begin + rows_per_chunk);
    for (int64_t t0 = 0; t0 < num_tokens; t0 += chunk) {
      kernel.fn(w, acts, row_begin, row_end, t0, std::min(num_tokens, t0 + chunk), y);
    }
  };
  if (num_threads_used > 1) {
    parallel_for(num_row_chunks, run_chunk);
  } else {
    for (int64_t rc = 0; rc < num_row_chunks; ++rc) run_chunk(rc, 0);
  }
}

void get_row(const WeightMatrix& w, int64_t row, float* out) {
  KVLM_ASSERT(row >= 0 && row < w.rows, "get_row: row out of range");
  const size_t bytes = row_bytes(w.dtype, w.cols);
  dequantize_row(w.dtype, static_cast<const uint8_t*>(w.data) + static_cast<size_t>(row) * bytes, out, w.cols);
}

}  // namespace kvlm
