// Attention over BF16 KV storage, compiled once per CPU path (ops_impl.h).
//
// The dot products are VDPBF16PS's: a 32-bit lane holds a pair of BF16
// elements, and each lane adds the product of its odd elements and then the
// product of its even ones to an f32 accumulator. BF16 products are exact in
// f32, so each add rounds once; sums that come out subnormal are flushed to
// zero, and the inputs are never subnormal (stores and roundings flush them).
// So a score is the query (rounded to BF16) against a key, over dimension
// pairs (2j+1, then 2j) in order, and an output element the softmax weights
// (rounded to BF16) against the values, over slot pairs in order.
//
// With AVX512-BF16 (the avx512 path on Zen 4/5, Sapphire Rapids and later)
// one instruction does 32 of those multiply-adds, twice what an f32 FMA does,
// and attention at long contexts is compute-bound (docs/performance.md, "Depth"). Every
// other path, and block shapes the vector kernel does not take, run the same
// chain one element at a time under flush-to-zero: the same bits
// (attention_test: SimdPathsGiveTheSameBits), and as slow as they sound.
#include <bit>
#include <cstdint>
#include <cstring>
#include <span>

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include "backend/cpu/attention_impl.h"
#include "backend/cpu/attention_parts.h"
#include "backend/cpu/cpu_path.h"
#include "backend/cpu/local_vector.h"
#include "backend/cpu/ops_impl.h"
#include "backend/cpu/simd.h"

namespace kvlm::cpu::KVLM_SIMD_NS {
namespace {

#if KVLM_AVX2 && defined(__AVX512F__)
#define KVLM_BF16_DOT 1
// The vector kernels' functions: the avx512 path's flags leave AVX512-BF16
// out (not every AVX-512 CPU has it), so only these may use it, and only
// when kHasBf16Dot says the CPU does.
#define KVLM_TARGET_BF16 __attribute__((target("avx512bf16")))
const bool kHasBf16Dot = cpu_has_avx512_bf16();
#else
#define KVLM_BF16_DOT 0
#endif

// One slot pair of a range: its values (dimension 0), its weights (one per
// head) and the lanes to load; a slot outside the range loads as zero.
struct ValuePair {
  const uint8_t* v;
  const uint32_t* w;
  uint32_t keep;
};

struct Bf16Scratch {
  LocalVector<float> scores;       // score rows of one pass (make_score_rows)
  LocalVector<BlockPart> parts;
  LocalVector<KeyVec> key_vecs;
  LocalVector<ValuePair> value_pairs;
  LocalVector<uint32_t> queries;   // [head_dim / 2][num_q] pairs: dims 2j (low half) and 2j+1
  LocalVector<uint32_t> weights;   // [parts][block_size / 2][kMaxGroupPass] pairs: slots 2i (low half)
                                   // and 2i+1, the heads side by side so one pointer reaches them all
};
thread_local Bf16Scratch t_bf16;

// f32_to_bf16_flush (fp16.h) as an inline function of this path's namespace:
// called per element by the packing loops, and an inline kvlm:: function
// compiled here could leave a weak AVX-512 copy (local_vector.h).
inline uint32_t to_bf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7F800000u) == 0) return (u >> 16) & 0x8000u;                   // zero, subnormal
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return ((u >> 16) | 64u) & 0xFFFFu;  // quiet NaN
  return (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
}

inline float lo_bf16(uint32_t pair) { return std::bit_cast<float>(pair << 16); }
inline float hi_bf16(uint32_t pair) { return std::bit_cast<float>(pair & 0xFFFF0000u); }

inline uint32_t load_pair(const uint8_t* p, int64_t index) {
  uint32_t v;
  std::memcpy(&v, p + 4 * index, sizeof(v));
  return v;
}

// acc plus the odd product, then the even one: one VDPBF16PS lane.
inline float dot_pair(uint32_t a, uint32_t b, float acc) {
  acc = madd(hi_bf16(a), hi_bf16(b), acc);
  return madd(lo_bf16(a), lo_bf16(b), acc);
}

// MXCSR's flush-to-zero and denormals-are-zero on this thread while it
// lives, so the f32 chains flush as VDPBF16PS does. Only around the chains:
// the softmax between them runs with the thread's usual settings.
class FlushSubnormals {
 public:
#if defined(__SSE__)
  FlushSubnormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | 0x8040u); }
  ~FlushSubnormals() { _mm_setcsr(saved_); }

 private:
  unsigned saved_;
#endif
};

// ---- The element-by-element chains (every path) ----

// rows[g][part.at + o] = (q_g . key o) * scale for the slots of each part.
void score_chain(const KvLayout& layout, std::span<const BlockPart> parts, const uint32_t* qp, int num_q, float scale,
                 float* const* rows) {
  const int64_t half = layout.head_dim / 2, bs = layout.block_size;
  {
    // Slots innermost: their chains are independent, so the compiler runs
    // them side by side in vectors (one slot at a time waited on each add).
    FlushSubnormals flush;
    for (const BlockPart& part : parts)
      for (int g = 0; g < num_q; ++g) {
        float* row = rows[g] + part.at;
        for (int64_t o = part.o0; o < part.o1; ++o) row[o] = 0.f;
        for (int64_t j = 0; j < half; ++j) {
          const uint32_t q = qp[j * num_q + g];
          const uint8_t* keys = part.k + 4 * j * bs;
          for (int64_t o = part.o0; o < part.o1; ++o) row[o] = dot_pair(load_pair(keys, o), q, row[o]);
        }
      }
  }
  for (const BlockPart& part : parts)  // the scale outside the flush, as the vector kernel applies it
    for (int g = 0; g < num_q; ++g)
      for (int64_t o = part.o0; o < part.o1; ++o) rows[g][part.at + o] *= scale;
}

// The pairs [i0, i1) of a part that hold its slots [o0, o1).
inline int32_t first_pair(const BlockPart& part) { return part.o0 / 2; }
inline int32_t end_pair(const BlockPart& part) { return (part.o1 + 1) / 2; }

// The weights of head g for slots 2i and 2i+1 of part b (zero for slots
// outside [o0, o1)) are w[weight_index(layout, b, i) + g].
inline int64_t weight_index(const KvLayout& layout, size_t b, int32_t i) {
  return (static_cast<int64_t>(b) * (layout.block_size / 2) + i) * kMaxGroupPass;
}

void pack_weights_scalar(const KvLayout& layout, std::span<const BlockPart> parts, const float* const* rows,
                         int num_q, uint32_t* w) {
  for (size_t b = 0; b < parts.size(); ++b) {
    const BlockPart& part = parts[b];
    for (int32_t i = first_pair(part); i < end_pair(part); ++i)
      for (int g = 0; g < num_q; ++g) {
        const int32_t s = 2 * i;
        const float lo = s >= part.o0 ? rows[g][part.at + s] : 0.f;
        const float hi = s + 1 < part.o1 ? rows[g][part.at + s + 1] : 0.f;
        w[weight_index(layout, b, i) + g] = to_bf16(lo) | to_bf16(hi) << 16;
      }
  }
}

// The lanes of value pair i to keep: a slot outside [o0, o1) is zeroed, as
// the vector kernel loads it (whatever the pool held there, even a NaN, adds +0).
inline uint32_t pair_keep(const BlockPart& part, int32_t i) {
  uint32_t keep = ~0u;
  if (i == first_pair(part) && (part.o0 & 1)) keep &= 0xFFFF0000u;
  if (i == end_pair(part) - 1 && (part.o1 & 1)) keep &= 0x0000FFFFu;
  return keep;
}

// outs[g][c] += the weighted values, slot pairs in order (outs start at zero).
void accumulate_chain(const KvLayout& layout, std::span<const BlockPart> parts, const uint32_t* w, int num_q,
                      float* const* outs) {
  FlushSubnormals flush;
  const int64_t hd = layout.head_dim;
  for (int g = 0; g < num_q; ++g)
    for (size_t b = 0; b < parts.size(); ++b) {
      const BlockPart& part = parts[b];
      for (int32_t i = first_pair(part); i < end_pair(part); ++i) {
        const uint32_t weights = w[weight_index(layout, b, i) + g], keep = pair_keep(part, i);
        const uint8_t* values = part.v + 4 * i * hd;
        float* out = outs[g];
        // Dimensions innermost: independent chains, which vectorize.
        for (int64_t c = 0; c < hd; ++c) out[c] = dot_pair(load_pair(values, c) & keep, weights, out[c]);
      }
    }
}

#if KVLM_BF16_DOT
// ---- AVX512-BF16: 16 slots (scores) or 16 dimensions (values) a vector ----

// A pair of BF16 values in every 32-bit lane, as VDPBF16PS's second operand.
// Clang 16 crashes (a segfault in code generation) folding a broadcast load
// into VDPBF16PS; the empty asm keeps the broadcast in a register, where GCC
// puts it anyway.
KVLM_TARGET_BF16 inline __m512bh broadcast_pair(uint32_t pair) {
  __m512i v = _mm512_set1_epi32(static_cast<int>(pair));
#if defined(__clang__)
  __asm__("" : "+v"(v));
#endif
  return (__m512bh)v;
}

// Scores of NumQ heads for NumV 16-slot key vectors, as score_vecs16
// (attention_kernels.cpp) does for F16, a dimension pair per step.
template <int NumQ, int NumV>
KVLM_TARGET_BF16 void score_vecs_bf16(const KeyVec* vecs, const uint8_t* const* pf, int64_t half, int64_t pair_bytes,
                                      const uint32_t* qp, float scale, float* const* rows) {
  __m512 acc[NumV][NumQ];
  for (int j = 0; j < NumV; ++j)
    for (int g = 0; g < NumQ; ++g) acc[j][g] = _mm512_setzero_ps();
  for (int64_t d = 0; d < half; ++d) {
    __m512i k[NumV];
    for (int j = 0; j < NumV; ++j) {
      _mm_prefetch(reinterpret_cast<const char*>(pf[j] + d * pair_bytes), _MM_HINT_T1);
      k[j] = _mm512_loadu_si512(vecs[j].k + d * pair_bytes);
    }
    for (int g = 0; g < NumQ; ++g) {
      const __m512bh qb = broadcast_pair(qp[d * NumQ + g]);
      for (int j = 0; j < NumV; ++j) acc[j][g] = _mm512_dpbf16_ps(acc[j][g], (__m512bh)k[j], qb);
    }
  }
  const __m512 sv = _mm512_set1_ps(scale);
  for (int j = 0; j < NumV; ++j)
    for (int g = 0; g < NumQ; ++g) _mm512_storeu_ps(rows[g] + vecs[j].at, _mm512_mul_ps(acc[j][g], sv));
}

template <int NumQ>
KVLM_TARGET_BF16 void score_all_bf16(const KvLayout& layout, std::span<const KeyVec> vecs, const uint32_t* qp,
                                     float scale, float* const* rows) {
  const int64_t half = layout.head_dim / 2, pair_bytes = 4 * static_cast<int64_t>(layout.block_size);
  const size_t nv = vecs.size();
  auto ahead = [&](size_t i) { return vecs[std::min(i + kPrefetchAhead, nv - 1)].k; };
  size_t i = 0;
  for (; i + 2 <= nv; i += 2) {
    const uint8_t* pf[2] = {ahead(i), ahead(i + 1)};
    score_vecs_bf16<NumQ, 2>(&vecs[i], pf, half, pair_bytes, qp, scale, rows);
  }
  if (i < nv) {
    const uint8_t* pf[1] = {ahead(i)};
    score_vecs_bf16<NumQ, 1>(&vecs[i], pf, half, pair_bytes, qp, scale, rows);
  }
}

// pack_weights_scalar with VCVTNEPS2BF16, which rounds as to_bf16 does: 16
// slots of each head at a time, 8 pairs, turned into 8 pairs of 8 heads
// (heads past num_q get zeros, never read).
KVLM_TARGET_BF16 void pack_weights_bf16(const KvLayout& layout, std::span<const BlockPart> parts,
                                        const float* const* rows, int num_q, uint32_t* w) {
  for (size_t b = 0; b < parts.size(); ++b) {
    const BlockPart& part = parts[b];
    for (int32_t a = part.o0 / 16 * 16; a < part.o1; a += 16) {
      const int32_t from = std::max(a, part.o0) - a, to = std::min(a + 16, part.o1) - a;
      const __mmask16 in_range = static_cast<__mmask16>(((1u << to) - 1u) & ~((1u << from) - 1u));
      __m256i heads[kMaxGroupPass];
      for (int g = 0; g < kMaxGroupPass; ++g) {
        const __m512 p = g < num_q ? _mm512_maskz_loadu_ps(in_range, rows[g] + part.at + a) : _mm512_setzero_ps();
        heads[g] = (__m256i)_mm512_cvtneps_pbh(p);
      }
      simd::transpose8_epi32(heads);  // heads[i]: pair a/2 + i of every head
      for (int i = 0; i < 8; ++i)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(w + weight_index(layout, b, a / 2 + i)), heads[i]);
    }
  }
}

// The pairs of parts in order: one flat list, with each range's edges
// worked out once for all the dimension chunks that walk it.
void collect_value_pairs(const KvLayout& layout, std::span<const BlockPart> parts, const uint32_t* w,
                         LocalVector<ValuePair>& out) {
  const int64_t pair_bytes = 4 * static_cast<int64_t>(layout.head_dim);
  out.clear();
  for (size_t b = 0; b < parts.size(); ++b) {
    const BlockPart& part = parts[b];
    const int32_t i0 = first_pair(part), i1 = end_pair(part);
    for (int32_t i = i0; i < i1; ++i) {
      uint32_t keep = ~0u;
      if (i == i0 && (part.o0 & 1)) keep &= 0xAAAAAAAAu;      // slot 2i is before the range
      if (i == i1 - 1 && (part.o1 & 1)) keep &= 0x55555555u;  // slot 2i+1 is past it
      out.push_back({part.v + i * pair_bytes, w + weight_index(layout, b, i), keep});
    }
  }
}

// out[g][c .. c + 16 NumC) += the weighted values of pairs [p0, p1), in
// order, as accumulate_parts16 does for F16 with slots.
template <int NumQ, int NumC>
KVLM_TARGET_BF16 void accumulate_pairs_bf16(std::span<const ValuePair> pairs, size_t p0, size_t p1, int64_t c,
                                            float* const* out) {
  constexpr size_t kAhead = 8 * kPrefetchAhead;  // pairs: kPrefetchAhead blocks of 16 slots
  __m512 acc[NumC][NumQ];
  for (int j = 0; j < NumC; ++j)
    for (int g = 0; g < NumQ; ++g) acc[j][g] = _mm512_loadu_ps(out[g] + c + 16 * j);
  for (size_t p = p0; p < p1; ++p) {
    const uint8_t* pf = pairs[std::min(p + kAhead, pairs.size() - 1)].v + 4 * c;
    for (int64_t l = 0; l < 64 * NumC; l += 64) _mm_prefetch(reinterpret_cast<const char*>(pf + l), _MM_HINT_T1);
    const ValuePair& pair = pairs[p];
    __m512i v[NumC];
    // A plain load and then the mask (the whole pair lies inside its block):
    // with a masked load, which GCC 12 treats as touching memory, it stored
    // every accumulator to the stack on each step (10% of the kernel's time).
    for (int j = 0; j < NumC; ++j) v[j] = _mm512_maskz_mov_epi16(pair.keep, _mm512_loadu_si512(pair.v + 4 * c + 64 * j));
    for (int g = 0; g < NumQ; ++g) {
      const __m512bh wb = broadcast_pair(pair.w[g]);
      for (int j = 0; j < NumC; ++j) acc[j][g] = _mm512_dpbf16_ps(acc[j][g], (__m512bh)v[j], wb);
    }
  }
  for (int j = 0; j < NumC; ++j)
    for (int g = 0; g < NumQ; ++g) _mm512_storeu_ps(out[g] + c + 16 * j, acc[j][g]);
}

template <int NumQ>
KVLM_TARGET_BF16 void accumulate_all_bf16(int64_t head_dim, std::span<const ValuePair> pairs, float* const* out) {
  constexpr size_t kSpan = 64;  // pairs whose values (16 KiB at TinyLlama's shape) stay in L1 across the chunks
  for (size_t p0 = 0; p0 < pairs.size(); p0 += kSpan) {
    const size_t p1 = std::min(pairs.size(), p0 + kSpan);
    int64_t c = 0;
    for (; c + 32 <= head_dim; c += 32) accumulate_pairs_bf16<NumQ, 2>(pairs, p0, p1, c, out);
    if (c < head_dim) accumulate_pairs_bf16<NumQ, 1>(pairs, p0, p1, c, out);
  }
}

// Whether the vector kernels take this layout: whole 16-slot key vectors and
// 16-dimension value vectors.
bool use_bf16_dot(const KvLayout& layout) {
  return kHasBf16Dot && layout.block_size % 16 == 0 && layout.head_dim % 16 == 0;
}
#endif  // KVLM_BF16_DOT

// The queries as dimension pairs, [head_dim / 2][num_q].
void pack_queries(const float* const* qs, int num_q, int64_t head_dim, LocalVector<uint32_t>& qp) {
  qp.resize(static_cast<size_t>(head_dim / 2 * num_q));
  for (int64_t j = 0; j < head_dim / 2; ++j)
    for (int g = 0; g < num_q; ++g) qp[j * num_q + g] = to_bf16(qs[g][2 * j]) | to_bf16(qs[g][2 * j + 1]) << 16;
}

void score(const KvLayout& layout, Bf16Scratch& sc, int num_q, float scale, float* const* rows) {
#if KVLM_BF16_DOT
  if (use_bf16_dot(layout)) {
    sc.key_vecs.clear();
    for (const BlockPart& part : sc.parts)
      for (int32_t a = part.o0 / 16 * 16; a < part.o1; a += 16) sc.key_vecs.push_back({part.k + 4 * a, part.at + a});
    with_num_q(num_q, [&]<int N>() { score_all_bf16<N>(layout, sc.key_vecs, sc.queries.data(), scale, rows); });
    return;
  }
#endif
  score_chain(layout, sc.parts, sc.queries.data(), num_q, scale, rows);
}

void accumulate(const KvLayout& layout, Bf16Scratch& sc, const float* const* rows, int num_q, float* const* outs) {
  sc.weights.resize(static_cast<size_t>(weight_index(layout, sc.parts.size(), 0)));
#if KVLM_BF16_DOT
  if (use_bf16_dot(layout)) {
    pack_weights_bf16(layout, sc.parts, rows, num_q, sc.weights.data());
    collect_value_pairs(layout, sc.parts, sc.weights.data(), sc.value_pairs);
    with_num_q(num_q, [&]<int N>() { accumulate_all_bf16<N>(layout.head_dim, sc.value_pairs, outs); });
    return;
  }
#endif
  pack_weights_scalar(layout, sc.parts, rows, num_q, sc.weights.data());
  accumulate_chain(layout, sc.parts, sc.weights.data(), num_q, outs);
}

}  // namespace

void attend_bf16(const KvLayout& layout, const KvLayer& layer, const AttentionSeq& seq, int32_t kv_head, int64_t lo,
                 int64_t hi, const float* const* qs, int num_q, const AttentionParams& params, float* const* outs,
                 float* stat_row) {
  Bf16Scratch& sc = t_bf16;
  const int64_t n = hi - lo;
  float* rows[kMaxGroupPass];
  make_score_rows(sc.scores, num_q, n, rows);
  collect_parts(layout, layer, seq, kv_head, lo, hi, sc.parts);
  pack_queries(qs, num_q, layout.head_dim, sc.queries);
  score(layout, sc, num_q, params.scale, rows);
  weigh_scores(rows, num_q, n, lo, params, stat_row, outs, layout.head_dim);
  accumulate(layout, sc, rows, num_q, outs);
}

}  // namespace kvlm::cpu::KVLM_SIMD_NS
