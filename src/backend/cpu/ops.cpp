// The element-wise and row-wise kernels of one CPU path (ops_impl.h): this
// file is compiled once per path. Each function handles 8 lanes at a time
// with AVX2/FMA and finishes the tail (or everything, on the scalar path)
// with the scalar code of reference_ops.cpp.
#include "backend/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/cpu/local_vector.h"
#include "backend/cpu/ops_impl.h"
#include "backend/cpu/reference_ops.h"
#include "backend/cpu/simd.h"

namespace kvlm::cpu::KVLM_SIMD_NS {
namespace {

#if KVLM_AVX2
// Sums for the norms in f64 lanes, as ggml accumulates them: a model-sized
// row of large activations loses too much in f32 (the mean feeds every output).
// Both consume whole groups of 8 from index 0 and leave i at the tail.
double sum_pd(const float* x, int64_t n, int64_t& i) {
  __m256d acc[2] = {_mm256_setzero_pd(), _mm256_setzero_pd()};
  for (i = 0; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    acc[0] = _mm256_add_pd(acc[0], _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
    acc[1] = _mm256_add_pd(acc[1], _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(acc[0], acc[1]));
  return (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
}

// sum of (x[i] - c)^2.
double sum_sq_pd(const float* x, int64_t n, double c, int64_t& i) {
  const __m256d cv = _mm256_set1_pd(c);
  __m256d acc[2] = {_mm256_setzero_pd(), _mm256_setzero_pd()};
  for (i = 0; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256d lo = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), cv);
    const __m256d hi = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), cv);
    acc[0] = _mm256_fmadd_pd(lo, lo, acc[0]);
    acc[1] = _mm256_fmadd_pd(hi, hi, acc[1]);
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(acc[0], acc[1]));
  return (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
}

inline __m256 silu_ps(__m256 g) {
  const __m256 e = simd::exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), g));
  return _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.f), e));
}

inline __m256 gelu_ps(__m256 x) {
  const __m256 x2 = _mm256_mul_ps(x, x);
  const __m256 inner = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.79788456080286535588f), x),
                                     _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), x2, _mm256_set1_ps(1.f)));
  const __m256 t = simd::tanh_ps(inner);
  return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x), _mm256_add_ps(_mm256_set1_ps(1.f), t));
}

// Element-wise ops must give an element the same bits wherever it sits: the
// activations are [num_tokens, hidden] flat arrays, and whether a token's
// element falls in the SIMD body or the tail depends on the tokens before it
// (hidden = 172 in stories260K). So the tail runs the same vector code on a
// zero-padded copy, never a scalar twin with other rounding (std::exp/tanh).
template <typename F>
void unary_ps(const float* x, float* y, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, f(_mm256_loadu_ps(x + i)));
  if (i == n) return;
  alignas(32) float buf[8] = {};
  std::copy(x + i, x + n, buf);
  _mm256_store_ps(buf, f(_mm256_load_ps(buf)));
  std::copy(buf, buf + (n - i), y + i);
}

// The maximum of x[0 .. i), i = n rounded down to 8, as one chain of
// mv = max(mv, x[i .. i + 8)) and hmax give it. Without a NaN that is the
// maximum of the set, whatever the order (a tie of +0 and -0 may come out as
// either zero; x - max then differs at most in the sign of a zero, and
// e^(x - max) is the same for every x), so
// four chains run side by side instead of waiting on one (softmax over long
// attention rows). With a NaN the one chain's answer depends on where the NaN
// sits: the row is taken again that way.
float max_groups8(const float* x, int64_t n, int64_t& i) {
  const __m256 lowest = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 m[4] = {lowest, lowest, lowest, lowest};
  __m256 nan = _mm256_setzero_ps();
  for (i = 0; i + 32 <= n; i += 32) {
    for (int j = 0; j < 4; ++j) {
      const __m256 v = _mm256_loadu_ps(x + i + 8 * j);
      m[j] = _mm256_max_ps(m[j], v);
      nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    }
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    m[0] = _mm256_max_ps(m[0], v);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  }
  if (_mm256_movemask_ps(nan) == 0) return simd::hmax(_mm256_max_ps(_mm256_max_ps(m[0], m[1]), _mm256_max_ps(m[2], m[3])));
  __m256 mv = lowest;
  for (i = 0; i + 8 <= n; i += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(x + i));
  return simd::hmax(mv);
}

template <typename F>
void binary_ps(const float* a, const float* b, float* y, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, f(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  if (i == n) return;
  alignas(32) float ba[8] = {}, bb[8] = {};
  std::copy(a + i, a + n, ba);
  std::copy(b + i, b + n, bb);
  _mm256_store_ps(ba, f(_mm256_load_ps(ba), _mm256_load_ps(bb)));
  std::copy(ba, ba + (n - i), y + i);
}
#endif

}  // namespace

void rms_norm(const float* x, const float* w, float* y, int64_t num_rows, int64_t n, float eps) {
  for (int64_t r = 0; r < num_rows; ++r, x += n, y += n) {
    int64_t i = 0;
    double ss = 0.0;
#if KVLM_AVX2
    ss = sum_sq_pd(x, n, 0.0, i);
#endif
    for (; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
    const float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
    i = 0;
#if KVLM_AVX2
    const __m256 sv = _mm256_set1_ps(scale);
    for (; i + 8 <= n; i += 8) {
      _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), sv), _mm256_loadu_ps(w + i)));
    }
#endif
    for (; i < n; ++i) y[i] = x[i] * scale * w[i];
  }
}

void layer_norm(const float* x, const float* w, const float* b, float* y, int64_t num_rows,
                int64_t n, float eps) {
  for (int64_t r = 0; r < num_rows; ++r, x += n, y += n) {
    int64_t i = 0;
    double s = 0.0;
#if KVLM_AVX2
    s = sum_pd(x, n, i);
#endif
    for (; i < n; ++i) s += x[i];
    const double mean = s / static_cast<double>(n);
    double var = 0.0;
    i = 0;
#if KVLM_AVX2
    var = sum_sq_pd(x, n, mean, i);
#endif
    for (; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
    const float scale = static_cast<float>(1.0 / std::sqrt(var / static_cast<double>(n) + eps));
    const float mean_f = static_cast<float>(mean);
    i = 0;
#if KVLM_AVX2
    const __m256 mv = _mm256_set1_ps(mean_f);
    const __m256 sv = _mm256_set1_ps(scale);
    for (; i + 8 <= n; i += 8) {
      const __m256 v = _mm256_mul_ps(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv), sv), _mm256_loadu_ps(w + i));
      _mm256_storeu_ps(y + i, b != nullptr ? _mm256_add_ps(v, _mm256_loadu_ps(b + i)) : v);
    }
#endif
    for (; i < n; ++i) y[i] = (x[i] - mean_f) * scale * w[i] + (b != nullptr ? b[i] : 0.f);
  }
}

void rope(float* x, const int32_t* positions, int64_t num_tokens, int64_t num_heads,
          int64_t head_dim, const RopeParams& p) {
  const int64_t rot_dim = rope_rot_dim(p, head_dim);
  const int64_t half = rot_dim / 2;
  LocalVector<float> cs(static_cast<size_t>(half));
  LocalVector<float> sn(static_cast<size_t>(half));
  // kNormal: cos and +-sin repeated per pair, so a pair swap and two FMAs rotate 4 pairs.
  LocalVector<float> cos_pairs(static_cast<size_t>(rot_dim));
  LocalVector<float> sin_pairs(static_cast<size_t>(rot_dim));
  for (int64_t t = 0; t < num_tokens; ++t) {
    rope_angles(positions[t], p, rot_dim, cs.data(), sn.data());
    if (p.style == RopeStyle::kNormal) {
      for (int64_t i = 0; i < half; ++i) {
        cos_pairs[2 * i] = cos_pairs[2 * i + 1] = cs[i];
        sin_pairs[2 * i] = -sn[i];
        sin_pairs[2 * i + 1] = sn[i];
      }
    }
    for (int64_t h = 0; h < num_heads; ++h) {
      float* v = x + (t * num_heads + h) * head_dim;
      int64_t i = 0;
      if (p.style == RopeStyle::kNormal) {
#if KVLM_AVX2
        for (; i + 8 <= rot_dim; i += 8) {
          const __m256 a = _mm256_loadu_ps(v + i);
          const __m256 swapped = _mm256_permute_ps(a, 0xB1);  // (x1, x0, x3, x2, ...)
          const __m256 r = _mm256_fmadd_ps(swapped, _mm256_loadu_ps(sin_pairs.data() + i),
                                           _mm256_mul_ps(a, _mm256_loadu_ps(cos_pairs.data() + i)));
          _mm256_storeu_ps(v + i, r);
        }
#endif
        for (; i < rot_dim; i += 2) {
          const float a = v[i];
          const float b = v[i + 1];
          v[i] = a * cs[i / 2] - b * sn[i / 2];
          v[i + 1] = a * sn[i / 2] + b * cs[i / 2];
        }
      } else {
#if KVLM_AVX2
        for (; i + 8 <= half; i += 8) {
          const __m256 a = _mm256_loadu_ps(v + i);
          const __m256 b = _mm256_loadu_ps(v + half + i);
          const __m256 c = _mm256_loadu_ps(cs.data() + i);
          const __m256 s = _mm256_loadu_ps(sn.data() + i);
          _mm256_storeu_ps(v + i, _mm256_fmsub_ps(a, c, _mm256_mul_ps(b, s)));
          _mm256_storeu_ps(v + half + i, _mm256_fmadd_ps(a, s, _mm256_mul_ps(b, c)));
        }
#endif
        for (; i < half; ++i) {
          const float a = v[i];
          const float b = v[i + half];
          v[i] = a * cs[i] - b * sn[i];
          v[i + half] = a * sn[i] + b * cs[i];
        }
      }
    }
  }
}

#if KVLM_AVX2
namespace {
// e^(x - max) over x[0 .. i), i = n rounded down to 8, stored in place, and
// its sum. Chunk k of 8 values goes into chain k % 2 (8 lanes each), the two
// chains added lane by lane at the end: the AVX-512 loop keeps both chains in
// one zmm (low half even chunks, high half odd), one add per 16 values where
// a single 8-lane chain took two extracts and two adds (a probe of 8 rows of
// 4,096: e^x and its sum 9.0 -> 7.8 cycles per 16 values on a Zen 5), and
// the AVX2 loop keeps them in two ymm: the same bits.
__m256 exp_sum_chains(float* x, int64_t n, float max, int64_t& i) {
  __m256 even = _mm256_setzero_ps(), odd = _mm256_setzero_ps();
  i = 0;
#if defined(__AVX512F__) && defined(__AVX512DQ__)
  const __m512 mv16 = _mm512_set1_ps(max);
  __m512 both = _mm512_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    const __m512 e = simd::exp_ps16<true>(_mm512_sub_ps(_mm512_loadu_ps(x + i), mv16));  // x <= max
    _mm512_storeu_ps(x + i, e);
    both = _mm512_add_ps(both, e);
  }
  even = _mm512_castps512_ps256(both);
  odd = _mm512_maskz_extractf32x8_ps(0xFF, both, 1);
#endif
  const __m256 mv = _mm256_set1_ps(max);
  for (; i + 8 <= n; i += 8) {
    const __m256 e = simd::exp_ps<true>(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv));
    _mm256_storeu_ps(x + i, e);
    if ((i / 8) % 2 == 0) {
      even = _mm256_add_ps(even, e);
    } else {
      odd = _mm256_add_ps(odd, e);
    }
  }
  return _mm256_add_ps(even, odd);
}
}  // namespace
#endif

void softmax(float* x, int64_t num_rows, int64_t n) {
  for (int64_t r = 0; r < num_rows; ++r, x += n) {
    int64_t i = 0;
    float max = -std::numeric_limits<float>::infinity();
#if KVLM_AVX2
    max = max_groups8(x, n, i);
#endif
    for (; i < n; ++i) max = std::max(max, x[i]);
    double total = 0.0;  // the scalar path adds one term at a time: keep the sum exact enough
    i = 0;
#if KVLM_AVX2
    total = simd::hsum(exp_sum_chains(x, n, max, i));
#endif
    for (; i < n; ++i) {
      x[i] = std::exp(x[i] - max);
      total += x[i];
    }
    scale_inplace(x, n, static_cast<float>(1.0 / total));
  }
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
#if KVLM_AVX2
  binary_ps(gate, up, out, n, [](__m256 g, __m256 u) { return _mm256_mul_ps(silu_ps(g), u); });
#else
  for (int64_t i = 0; i < n; ++i) out[i] = ref::silu(gate[i]) * up[i];
#endif
}

void geglu(const float* gate, const float* up, float* out, int64_t n) {
#if KVLM_AVX2
  binary_ps(gate, up, out, n, [](__m256 g, __m256 u) { return _mm256_mul_ps(gelu_ps(g), u); });
#else
  for (int64_t i = 0; i < n; ++i) out[i] = ref::gelu_tanh(gate[i]) * up[i];
#endif
}

void gelu(float* x, int64_t n) {
#if KVLM_AVX2
  unary_ps(x, x, n, [](__m256 v) { return gelu_ps(v); });
#else
  for (int64_t i = 0; i < n; ++i) x[i] = ref::gelu_tanh(x[i]);
#endif
}

void soft_cap(float* x, int64_t n, float cap) {
#if KVLM_AVX2
  const __m256 cv = _mm256_set1_ps(cap);
  unary_ps(x, x, n, [cv](__m256 v) { return _mm256_mul_ps(cv, simd::tanh_ps(_mm256_div_ps(v, cv))); });
#else
  for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] / cap);
#endif
}

void add_inplace(float* y, const float* x, int64_t n) {
  int64_t i = 0;
#if KVLM_AVX2
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(x + i)));
#endif
  for (; i < n; ++i) y[i] += x[i];
}

void add_bias(float* y, const float* b, int64_t num_rows, int64_t n) {
  for (int64_t r = 0; r < num_rows; ++r) add_inplace(y + r * n, b, n);
}

void scale_inplace(float* x, int64_t n, float s) {
  int64_t i = 0;
#if KVLM_AVX2
#if defined(__AVX512F__)
  const __m512 sv16 = _mm512_set1_ps(s);  // lane by lane: the same products
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), sv16));
#endif
  const __m256 sv = _mm256_set1_ps(s);
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), sv));
#endif
  for (; i < n; ++i) x[i] *= s;
}

float dot_f32(const float* a, const float* b, int64_t n) {
  int64_t i = 0;
  float total = 0.f;
#if KVLM_AVX2
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (; i + 32 <= n; i += 32) {
    for (int k = 0; k < 4; ++k) {
      acc[k] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8 * k), _mm256_loadu_ps(b + i + 8 * k), acc[k]);
    }
  }
  for (; i + 8 <= n; i += 8) acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc[0]);
  total = simd::hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
#endif
  for (; i < n; ++i) total += a[i] * b[i];
  return total;
}

void axpy_f32(float a, const float* x, float* y, int64_t n) {
  int64_t i = 0;
#if KVLM_AVX2
  const __m256 av = _mm256_set1_ps(a);
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  }
#endif
  for (; i < n; ++i) y[i] += a * x[i];
}

}  // namespace kvlm::cpu::KVLM_SIMD_NS
