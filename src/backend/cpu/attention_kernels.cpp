// The paged attention kernel of one CPU path (ops_impl.h): this file is
// compiled once per path; attention.cpp holds the public entry points, the
// KV writes and reads, and the reference.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <span>
#include <type_traits>

#include "backend/cpu/attention.h"
#include "backend/cpu/attention_impl.h"
#include "backend/cpu/attention_parts.h"
#include "backend/cpu/local_vector.h"
#include "backend/cpu/ops_impl.h"
#include "backend/cpu/simd.h"
#include "backend/thread_pool.h"
#include "backend/threads.h"
#include "common/assert.h"

// Bit-for-bit rule: a query's output depends only on its own visible slots,
// each score summed over the head dimension in order with fused multiply-adds
// and each output element summed over the slots in order. Whether a query
// runs in a decode step, a prefill chunk or beside other sequences, and
// whether a key sits in a vector lane or a scalar tail, the bits are the
// same; so batching, chunked prefill, prefix hits and preemption never change
// a generated token.

namespace kvlm::cpu::KVLM_SIMD_NS {
namespace {

// The SIMD parts need AVX2 and FMA (KVLM_AVX2, simd.h: only in a per-ISA copy).
#define KVLM_ATTN_AVX2 KVLM_AVX2
// AVX-512 handles 16 slots (one block of the default size) or 16 head
// dimensions per vector; the per-lane arithmetic is the same FMA chain as
// AVX2's, so both give the same bits.
#if KVLM_ATTN_AVX2 && defined(__AVX512F__)
#define KVLM_ATTN_AVX512 1
#else
#define KVLM_ATTN_AVX512 0
#endif

#if KVLM_ATTN_AVX2
inline __m256 load8(const KvLayout& layout, const uint8_t* p, int64_t idx) {
  if (layout.dtype == DType::kF32) return _mm256_loadu_ps(reinterpret_cast<const float*>(p) + idx);
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(p) + idx)));
}
#endif

#if KVLM_ATTN_AVX2
// (The vector parts take the number of heads as a template argument: see
// with_num_q, attention_parts.h.)

// Scores of NumQ heads for the 8 slots from o of one transposed K block.
template <int NumQ>
void score8(const KvLayout& layout, const uint8_t* kb, const float* const* qs, int64_t o, float scale, __m256* res) {
  __m256 acc[NumQ];
  for (int g = 0; g < NumQ; ++g) acc[g] = _mm256_setzero_ps();
  for (int64_t c = 0; c < layout.head_dim; ++c) {
    const __m256 k = load8(layout, kb, c * layout.block_size + o);
    for (int g = 0; g < NumQ; ++g) acc[g] = _mm256_fmadd_ps(_mm256_set1_ps(qs[g][c]), k, acc[g]);
  }
  for (int g = 0; g < NumQ; ++g) res[g] = _mm256_mul_ps(acc[g], _mm256_set1_ps(scale));
}

// out[g][c .. c+8) += sum over slots o in [o0, o1), in order, of p[g][o - o0] * v[o][c ..].
template <int NumQ>
void accumulate8(const KvLayout& layout, const uint8_t* vb, int64_t o0, int64_t o1, int64_t c, const float* const* p,
                 float* const* out) {
  __m256 acc[NumQ];
  for (int g = 0; g < NumQ; ++g) acc[g] = _mm256_loadu_ps(out[g] + c);
  for (int64_t o = o0; o < o1; ++o) {
    const __m256 v = load8(layout, vb, o * layout.head_dim + c);
    for (int g = 0; g < NumQ; ++g) acc[g] = _mm256_fmadd_ps(_mm256_set1_ps(p[g][o - o0]), v, acc[g]);
  }
  for (int g = 0; g < NumQ; ++g) _mm256_storeu_ps(out[g] + c, acc[g]);
}

#if KVLM_ATTN_AVX512
// 16 stored elements from p as f32; T: float (F32 storage) or uint16_t (F16).
template <typename T>
inline __m512 load16(const T* p) {
  if constexpr (std::is_same_v<T, float>) {
    return _mm512_loadu_ps(p);
  } else {
    // maskz with every lane set: the plain form trips GCC 12's -Wmaybe-uninitialized.
    return _mm512_maskz_cvtph_ps(0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
}

// fn.template operator()<T>() with T the element type of F32/F16 storage:
// the inner loops are compiled once per type, with no test of the type in them.
template <typename Fn>
void with_kv_type(const KvLayout& layout, Fn&& fn) {
  if (layout.dtype == DType::kF32) {
    fn.template operator()<float>();
  } else {
    fn.template operator()<uint16_t>();
  }
}
#endif

#endif

// Scores of up to kMaxGroupPass query heads against the keys at offsets
// [o0, o1) of one transposed K block: out[g][o - o0] (scaled).
void score_block(const KvLayout& layout, const uint8_t* kb, const float* const* qs, int num_q, int64_t o0,
                 int64_t o1, float scale, float* const* out) {
  const int64_t hd = layout.head_dim;
  int64_t o = o0;
#if KVLM_ATTN_AVX2
  // Vectors of 8 slots from o0; the last may reach past o1 inside the block
  // (valid memory, lanes discarded).
  for (; o + 8 <= layout.block_size && o < o1; o += 8) {
    __m256 res[kMaxGroupPass];
    with_num_q(num_q, [&]<int N>() { score8<N>(layout, kb, qs, o, scale, res); });
    alignas(32) float lanes[8];
    const int64_t n = std::min<int64_t>(8, o1 - o);
    for (int g = 0; g < num_q; ++g) {
      _mm256_store_ps(lanes, res[g]);
      std::memcpy(out[g] + (o - o0), lanes, sizeof(float) * n);
    }
  }
#endif
  for (; o < o1; ++o) {
    for (int g = 0; g < num_q; ++g) {
      float acc = 0.f;
      for (int64_t c = 0; c < hd; ++c) acc = madd(qs[g][c], key_at(layout, kb, c, o), acc);
      out[g][o - o0] = acc * scale;
    }
  }
}

// out[g][c] += p[g][j] * v[j][c] for the value rows [o0, o1) of one block
// (row-major), every head g of the pass; each out[g][c] still sums its slots
// in order, so the bits do not depend on how many heads share the pass.
void accumulate_block(const KvLayout& layout, const uint8_t* vb, int64_t o0, int64_t o1, const float* const* p,
                      int num_q, float* const* out) {
  const int64_t hd = layout.head_dim;
  int64_t c = 0;
#if KVLM_ATTN_AVX2
  for (; c + 8 <= hd; c += 8) with_num_q(num_q, [&]<int N>() { accumulate8<N>(layout, vb, o0, o1, c, p, out); });
#endif
  for (; c < hd; ++c) {
    for (int g = 0; g < num_q; ++g) {
      float acc = out[g][c];
      for (int64_t o = o0; o < o1; ++o) {
        const int64_t idx = o * hd + c;
        const float v = layout.dtype == DType::kF32 ? reinterpret_cast<const float*>(vb)[idx]
                                                    : fp16_to_f32(reinterpret_cast<const uint16_t*>(vb)[idx]);
        acc = madd(p[g][o - o0], v, acc);
      }
      out[g][c] = acc;
    }
  }
}

// Per-thread buffers of one paged_attention call.
struct Scratch {
  LocalVector<float> scores;        // score rows of one pass (padded: kRowPad)
  LocalVector<BlockPart> parts;
  LocalVector<KeyVec> key_vecs;
  LocalVector<float> queries;       // the pass's queries interleaved (score_parts16)
};

// The calling thread's buffers, kept across calls (and layers), so a decode
// step allocates (and the kernel zeroes fresh pages) only while they grow.
thread_local Scratch t_scratch;

#if KVLM_ATTN_AVX512
// The 16-slot path: F32/F16 storage whose blocks are whole 16-slot vectors
// (block_size and head_dim multiples of 16; the default block is 16). At long
// contexts a decode step reads every key and value once per layer, so this is
// where decode time goes; measured on TinyLlama's shape at 4,096 tokens
// (bench_attention). Every lane still runs the chains of score_block and
// accumulate_block, in the same order; only the loops around them differ.

// Scores of NumQ heads for NumV key vectors: each broadcast query element
// feeds NumV keys, which halves the broadcasts per multiply-add against one
// vector at a time. pf: a vector each to prefetch, one line per dimension.
// qi: the queries interleaved, [head_dim][NumQ], so that one pointer reaches
// every broadcast (eight query pointers left the loop short of registers).
template <typename T, int NumQ, int NumV>
void score_vecs16(const KvLayout& layout, const KeyVec* vecs, const uint8_t* const* pf, const float* qi, float scale,
                  float* const* rows) {
  const int64_t stride = layout.block_size;
  const int64_t dim_bytes = stride * static_cast<int64_t>(sizeof(T));
  const T* keys[NumV];
  __m512 acc[NumV][NumQ];
  for (int j = 0; j < NumV; ++j) {
    keys[j] = reinterpret_cast<const T*>(vecs[j].k);
    for (int g = 0; g < NumQ; ++g) acc[j][g] = _mm512_setzero_ps();
  }
  for (int64_t c = 0; c < layout.head_dim; ++c) {
    __m512 k[NumV];
    for (int j = 0; j < NumV; ++j) {
      _mm_prefetch(reinterpret_cast<const char*>(pf[j] + c * dim_bytes), _MM_HINT_T1);
      k[j] = load16(keys[j] + c * stride);
    }
    for (int g = 0; g < NumQ; ++g) {
      const __m512 qb = _mm512_set1_ps(qi[c * NumQ + g]);
      for (int j = 0; j < NumV; ++j) acc[j][g] = _mm512_fmadd_ps(qb, k[j], acc[j][g]);
    }
  }
  const __m512 sv = _mm512_set1_ps(scale);
  for (int j = 0; j < NumV; ++j)
    for (int g = 0; g < NumQ; ++g) _mm512_storeu_ps(rows[g] + vecs[j].at, _mm512_mul_ps(acc[j][g], sv));
}

void score_parts16(const KvLayout& layout, std::span<const BlockPart> parts, LocalVector<KeyVec>& vecs,
                   LocalVector<float>& qi, const float* const* qs, int num_q, float scale, float* const* rows) {
  qi.resize(static_cast<size_t>(layout.head_dim * num_q));
  for (int64_t c = 0; c < layout.head_dim; ++c)
    for (int g = 0; g < num_q; ++g) qi[c * num_q + g] = qs[g][c];
  const size_t esize = kv_elem_bytes(layout);
  vecs.clear();
  for (const BlockPart& part : parts)
    for (int32_t a = part.o0 / 16 * 16; a < part.o1; a += 16) vecs.push_back({part.k + a * esize, part.at + a});
  const size_t nv = vecs.size();
  auto ahead = [&](size_t i) { return vecs[std::min(i + kPrefetchAhead, nv - 1)].k; };
  with_kv_type(layout, [&]<typename T>() {
    with_num_q(num_q, [&]<int N>() {
      size_t i = 0;
      for (; i + 2 <= nv; i += 2) {
        const uint8_t* pf[2] = {ahead(i), ahead(i + 1)};
        score_vecs16<T, N, 2>(layout, &vecs[i], pf, qi.data(), scale, rows);
      }
      if (i < nv) {
        const uint8_t* pf[1] = {ahead(i)};
        score_vecs16<T, N, 1>(layout, &vecs[i], pf, qi.data(), scale, rows);
      }
    });
  });
}

// out[g][c .. c + 16 NumC) += the weighted value rows of parts [b0, b1), in
// slot order: NumC dimension chunks per pass, so each broadcast weight feeds
// NumC value vectors. w[g]: head g's weights, indexed as the score rows.
template <typename T, int NumQ, int NumC>
void accumulate_parts16(const KvLayout& layout, std::span<const BlockPart> parts, size_t b0, size_t b1, int64_t c,
                        const float* const* w, float* const* out) {
  const int64_t hd = layout.head_dim;
  constexpr int64_t esize = sizeof(T);
  __m512 acc[NumC][NumQ];
  for (int j = 0; j < NumC; ++j)
    for (int g = 0; g < NumQ; ++g) acc[j][g] = _mm512_loadu_ps(out[g] + c + 16 * j);
  for (size_t b = b0; b < b1; ++b) {
    const BlockPart& part = parts[b];
    const T* values = reinterpret_cast<const T*>(part.v) + c;
    // The same rows and chunk of the block kPrefetchAhead on.
    const uint8_t* pf = parts[std::min(b + kPrefetchAhead, parts.size() - 1)].v + c * esize;
    for (int64_t o = part.o0; o < part.o1; ++o) {
      for (int64_t l = 0; l < 16 * NumC * esize; l += 64)
        _mm_prefetch(reinterpret_cast<const char*>(pf + o * hd * esize + l), _MM_HINT_T1);
      __m512 v[NumC];
      for (int j = 0; j < NumC; ++j) v[j] = load16(values + o * hd + 16 * j);
      for (int g = 0; g < NumQ; ++g) {
        const __m512 pb = _mm512_set1_ps(w[g][part.at + o]);
        for (int j = 0; j < NumC; ++j) acc[j][g] = _mm512_fmadd_ps(pb, v[j], acc[j][g]);
      }
    }
  }
  for (int j = 0; j < NumC; ++j)
    for (int g = 0; g < NumQ; ++g) _mm512_storeu_ps(out[g] + c + 16 * j, acc[j][g]);
}

void accumulate_all16(const KvLayout& layout, std::span<const BlockPart> parts, const float* const* w, int num_q,
                      float* const* out) {
  // Blocks per span: their values (16 KiB at TinyLlama's shape) stay in L1
  // while the passes over the dimension chunks go through them.
  constexpr size_t kSpan = 8;
  const int64_t hd = layout.head_dim;
  with_kv_type(layout, [&]<typename T>() {
    with_num_q(num_q, [&]<int N>() {
      for (size_t b0 = 0; b0 < parts.size(); b0 += kSpan) {
        const size_t b1 = std::min(parts.size(), b0 + kSpan);
        int64_t c = 0;
        for (; c + 32 <= hd; c += 32) accumulate_parts16<T, N, 2>(layout, parts, b0, b1, c, w, out);
        if (c < hd) accumulate_parts16<T, N, 1>(layout, parts, b0, b1, c, w, out);
      }
    });
  });
}
#endif  // KVLM_ATTN_AVX512

// Whether attend_direct takes the 16-slot path.
bool use_vec16(const KvLayout& layout) {
  return KVLM_ATTN_AVX512 && layout.keys_transposed() && layout.block_size % 16 == 0 && layout.head_dim % 16 == 0;
}

// One query row, up to kMaxGroupPass heads of one GQA group, F32/F16 storage
// read in place. stat_row: see add_weights.
void attend_direct(const KvLayout& layout, const KvLayer& layer, const AttentionSeq& seq, int32_t kv_head,
                   int64_t lo, int64_t hi, const float* const* qs, int num_q, const AttentionParams& params,
                   Scratch& sc, float* const* outs, float* stat_row) {
  const int64_t n = hi - lo;
  float* rows[kMaxGroupPass];
  make_score_rows(sc.scores, num_q, n, rows);
  collect_parts(layout, layer, seq, kv_head, lo, hi, sc.parts);
  const bool vec16 = use_vec16(layout);
#if KVLM_ATTN_AVX512
  if (vec16) score_parts16(layout, sc.parts, sc.key_vecs, sc.queries, qs, num_q, params.scale, rows);
#endif
  for (const BlockPart& part : sc.parts) {
    if (vec16) break;
    float* dst[kMaxGroupPass];
    for (int g = 0; g < num_q; ++g) dst[g] = rows[g] + part.at + part.o0;
    score_block(layout, part.k, qs, num_q, part.o0, part.o1, params.scale, dst);
  }
  weigh_scores(rows, num_q, n, lo, params, stat_row, outs, layout.head_dim);
#if KVLM_ATTN_AVX512
  if (vec16) {
    accumulate_all16(layout, sc.parts, rows, num_q, outs);
  }
#endif
  for (const BlockPart& part : sc.parts) {
    if (vec16) break;
    const float* p[kMaxGroupPass];
    for (int g = 0; g < num_q; ++g) p[g] = rows[g] + part.at + part.o0;
    accumulate_block(layout, part.v, part.o0, part.o1, p, num_q, outs);
  }
}

}  // namespace

namespace {
// A unit of paged_attention's work: query rows [row_begin, row_end) of one
// sequence against one KV head, for the query heads [head_begin, head_end) of
// that KV head's group (numbered within the group).
struct Item {
  int32_t seq;
  int32_t kv_head;
  int32_t row_begin, row_end;
  int32_t head_begin, head_end;
};

// Parts to cut each KV head's group of query heads into, so that the threads
// share a step with fewer items than threads (decode with one or two KV
// heads, or four on three threads) more evenly. A cut costs another read of
// the KV head's keys and values, so it is made only where it shortens the
// busiest thread's share (in heads). Heads are independent, so a cut never
// changes a bit.
int32_t group_parts(int64_t num_items, int32_t group, int num_workers) {
  auto busiest = [&](int32_t parts) {
    return (num_items * parts + num_workers - 1) / num_workers * ((group + parts - 1) / parts);
  };
  int32_t best = 1;
  for (int32_t parts = 2; parts <= group; ++parts)
    if (busiest(parts) < busiest(best)) best = parts;
  return best;
}

// Items a parallel task runs, consecutive ones together. One short item a
// task cost more in hand-off than the second thread saved: eight sequences
// of 40 tokens (32 items of ~40 K multiply-adds, the attention of a batch-8
// decode step of short chats) took 31-33 us a layer on two threads one item
// a task, 30 us on one thread, and 21-24 us with tasks of 7 items
// (bench_attention BM_DecodeAttentionBatch/40, Zen 5, 3 alternated runs;
// /72: 35-38 -> 28-33 us). Tasks keep at least kMinTaskWork multiply-adds
// where there is enough work, and there are never fewer tasks than threads:
// one long sequence still gets one task per item.
int64_t items_per_task(int64_t num_items, int64_t work, int num_workers) {
  constexpr int64_t kMinTaskWork = 1 << 18;
  const int64_t tasks = std::min(num_items, std::max<int64_t>(num_workers, work / kMinTaskWork));
  return (num_items + tasks - 1) / tasks;
}

LocalVector<Item> make_items(std::span<const AttentionSeq> seqs, int32_t num_kv, int32_t group, int32_t parts) {
  constexpr int32_t kRowsPerItem = 16;
  LocalVector<Item> items;
  for (int32_t s = 0; s < static_cast<int32_t>(seqs.size()); ++s)
    for (int32_t r = 0; r < seqs[s].num_tokens; r += kRowsPerItem)
      for (int32_t h = 0; h < num_kv; ++h)
        for (int32_t p = 0; p < parts; ++p)
          items.push_back({s, h, r, std::min(seqs[s].num_tokens, r + kRowsPerItem), group * p / parts,
                           group * (p + 1) / parts});
  return items;
}

void run_item(const KvLayout& layout, const KvLayer& layer, const float* q, const AttentionSeq& seq, const Item& item,
              const AttentionParams& params, Scratch& sc, float* out) {
  const int32_t hd = layout.head_dim;
  const int32_t num_kv = layout.num_kv_heads;
  const int32_t group = params.num_heads / num_kv;
  for (int32_t i = item.row_begin; i < item.row_end; ++i) {
    int64_t lo, hi;
    visible_range(seq, i, params.window, &lo, &hi);
    const int64_t token = seq.token_begin + i;
    float* stat_row = seq.attn_stats ? seq.attn_stats + (static_cast<int64_t>(i) * num_kv + item.kv_head) * seq.num_context
                                     : nullptr;
    for (int32_t g0 = item.head_begin; g0 < item.head_end; g0 += kMaxGroupPass) {
      const int num_q = std::min(kMaxGroupPass, item.head_end - g0);
      const float* qs[kMaxGroupPass];
      float* outs[kMaxGroupPass];
      for (int g = 0; g < num_q; ++g) {
        const int64_t head = token * params.num_heads + item.kv_head * group + g0 + g;
        qs[g] = q + head * hd;
        outs[g] = out + head * hd;
      }
      if (layout.pairs_bf16()) {
        attend_bf16(layout, layer, seq, item.kv_head, lo, hi, qs, num_q, params, outs, stat_row);
      } else if (layout.keys_q8_0()) {
        attend_q8_0(layout, layer, seq, item.kv_head, lo, hi, qs, num_q, params, outs, stat_row);
      } else if (layout.kv_q4_0()) {
        attend_q4_0(layout, layer, seq, item.kv_head, lo, hi, qs, num_q, params, outs, stat_row);
      } else {
        attend_direct(layout, layer, seq, item.kv_head, lo, hi, qs, num_q, params, sc, outs, stat_row);
      }
    }
  }
}
}  // namespace

void paged_attention(const KvLayout& layout, const KvLayer& layer, const float* q,
                     std::span<const AttentionSeq> seqs, const AttentionParams& params, float* out) {
  // (The layout was checked by kvlm::paged_attention, attention.cpp.)
  const int32_t num_kv = layout.num_kv_heads;
  const int32_t group = params.num_heads / num_kv;  // query heads per KV head
  int64_t work = 0;  // multiply-adds, to decide whether threads pay off
  bool any_stats = false;
  for (const AttentionSeq& seq : seqs) {
    work += 2 * static_cast<int64_t>(seq.num_tokens) * seq.num_context * layout.head_dim * params.num_heads;
    any_stats = any_stats || seq.attn_stats;
  }
  // Waking threads costs microseconds; tiny steps run faster on one thread.
  constexpr int64_t kMinParallelWork = 1 << 16;
  const bool parallel = work >= kMinParallelWork && num_threads() > 1;
  LocalVector<Item> items = make_items(seqs, num_kv, group, 1);
  // Statistics add a group's heads in head order into one row: keep groups whole.
  if (parallel && !any_stats) {
    const int32_t parts = group_parts(static_cast<int64_t>(items.size()), group, num_threads());
    if (parts > 1) items = make_items(seqs, num_kv, group, parts);
  }
  auto run = [&](int64_t it, int) {
    const Item& item = items[static_cast<size_t>(it)];
    run_item(layout, layer, q, seqs[item.seq], item, params, t_scratch, out);
  };
  if (parallel) {
    const auto num_items = static_cast<int64_t>(items.size());
    const int64_t per_task = items_per_task(num_items, work, num_threads());
    parallel_for((num_items + per_task - 1) / per_task, [&](int64_t task, int worker) {
      for (int64_t it = task * per_task; it < std::min(num_items, (task + 1) * per_task); ++it) run(it, worker);
    });
  } else {
    for (size_t it = 0; it < items.size(); ++it) run(static_cast<int64_t>(it), 0);
  }
}

}  // namespace kvlm::cpu::KVLM_SIMD_NS
