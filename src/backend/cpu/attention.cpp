#include "backend/cpu/attention.h"


#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/fp16.h"
#include "backend/quant.h"
#include "backend/thread_pool.h"
#include "backend/threads.h"
#include "common/assert.h"

namespace kvlm {
namespace {

uint8_t* slot_row(const KvLayout& layout, uint8_t* base, int64_t slot, int32_t kv_head) {
  int64_t block = slot / layout.block_size;
  int64_t offset = slot % layout.block_size;
  return base + static_cast<size_t>(block) * layout.block_bytes() +
         static_cast<size_t>(kv_head) * layout.head_stride() +
         static_cast<size_t>(offset) * layout.row_bytes();
}

// Physical slot of logical slot s of a sequence.
int64_t physical_slot(const KvLayout& layout, const AttentionSeq& seq, int64_t s) {
  return static_cast<int64_t>(seq.block_table[static_cast<size_t>(s / layout.block_size)]) *
             layout.block_size + s % layout.block_size;
}

void load_row(const KvLayout& layout, const uint8_t* src, float* dst) {
  switch (layout.dtype) {
    case DType::kF32: std::memcpy(dst, src, sizeof(float) * layout.head_dim); break;
    case DType::kF16: fp16_to_f32_row(reinterpret_cast<const uint16_t*>(src), dst, layout.head_dim); break;
    default: dequantize_row(layout.dtype, src, dst, layout.head_dim); break;
  }
}

// Converts the rows of logical slots [lo, hi) of one KV head to f32, one run
// of contiguous slots per block. dst: [hi - lo, head_dim].
void gather_rows(const KvLayout& layout, uint8_t* base, const AttentionSeq& seq, int32_t kv_head, int64_t lo,
                 int64_t hi, float* dst) {
  const int64_t hd = layout.head_dim;
  for (int64_t s = lo; s < hi;) {
    const int64_t offset = s % layout.block_size;
    const int64_t count = std::min<int64_t>(hi - s, layout.block_size - offset);
    const uint8_t* src = slot_row(layout, base, physical_slot(layout, seq, s), kv_head);
    switch (layout.dtype) {
      case DType::kF32: std::memcpy(dst, src, sizeof(float) * hd * count); break;
      case DType::kF16: fp16_to_f32_row(reinterpret_cast<const uint16_t*>(src), dst, hd * count); break;
      default: dequantize_row(layout.dtype, src, dst, hd * count); break;
    }
    dst += hd * count;
    s += count;
  }
}

void transpose(const float* src, int64_t rows, int64_t cols, float* dst) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
}

// Fused multiply-add in vector and scalar code alike, so a score does not
// depend on whether its key fell in a vector lane or in the tail.
inline float madd(float a, float b, float c) {
#if defined(__FMA__)
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

// scores[j] = scale * sum_c q[c] * kt[c * stride + j] for j < n: eight keys
// per vector, the head dimension summed in order for every key.
void score_keys(const float* q, const float* kt, int64_t stride, int64_t hd, int64_t n, float scale,
                float* scores) {
  int64_t j = 0;
#if defined(__AVX2__) && defined(__FMA__)
  for (; j + 8 <= n; j += 8) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t c = 0; c < hd; ++c)
      acc = _mm256_fmadd_ps(_mm256_set1_ps(q[c]), _mm256_loadu_ps(kt + c * stride + j), acc);
    _mm256_storeu_ps(scores + j, _mm256_mul_ps(acc, _mm256_set1_ps(scale)));
  }
#endif
  for (; j < n; ++j) {
    float acc = 0.f;
    for (int64_t c = 0; c < hd; ++c) acc = madd(q[c], kt[c * stride + j], acc);
    scores[j] = acc * scale;
  }
}

// out[c] = sum_j p[j] * v[j * hd + c], keys in order for every element.
void weighted_sum(const float* p, const float* v, int64_t n, int64_t hd, float* out) {
  int64_t c = 0;
#if defined(__AVX2__) && defined(__FMA__)
  for (; c + 8 <= hd; c += 8) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t j = 0; j < n; ++j) acc = _mm256_fmadd_ps(_mm256_set1_ps(p[j]), _mm256_loadu_ps(v + j * hd + c), acc);
    _mm256_storeu_ps(out + c, acc);
  }
#endif
  for (; c < hd; ++c) {
    float acc = 0.f;
    for (int64_t j = 0; j < n; ++j) acc = madd(p[j], v[j * hd + c], acc);
    out[c] = acc;
  }
}

void check_layout(const KvLayout& layout, const AttentionParams* params) {
  KVLM_ASSERT(layout.dtype == DType::kF32 || layout.dtype == DType::kF16 ||
                  layout.dtype == DType::kQ8_0,
              "KV dtype must be F32, F16 or Q8_0");
  KVLM_ASSERT(layout.head_dim % dtype_info(layout.dtype).block_size == 0,
              "head_dim must be a multiple of the KV dtype block size");
  if (params) KVLM_ASSERT(params->num_heads % layout.num_kv_heads == 0, "GQA head ratio");
}

// Visible logical slots [lo, hi) of query row i of a sequence.
void visible_range(const AttentionSeq& seq, int32_t i, int32_t window, int64_t* lo, int64_t* hi) {
  *hi = seq.num_context - seq.num_tokens + i + 1;
  *lo = window > 0 ? std::max<int64_t>(0, *hi - window) : 0;
}

}  // namespace

void kv_write(const KvLayout& layout, const KvLayer& layer, const float* k, const float* v,
              const int64_t* slots, int64_t num_tokens) {
  check_layout(layout, nullptr);
  const int64_t hd = layout.head_dim;
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int32_t h = 0; h < layout.num_kv_heads; ++h) {
      const float* ks = k + (t * layout.num_kv_heads + h) * hd;
      const float* vs = v + (t * layout.num_kv_heads + h) * hd;
      uint8_t* kd = slot_row(layout, layer.k, slots[t], h);
      uint8_t* vd = slot_row(layout, layer.v, slots[t], h);
      switch (layout.dtype) {
        case DType::kF32:
          std::memcpy(kd, ks, sizeof(float) * hd);
          std::memcpy(vd, vs, sizeof(float) * hd);
          break;
        case DType::kF16:
          f32_to_fp16_row(ks, reinterpret_cast<uint16_t*>(kd), hd);
          f32_to_fp16_row(vs, reinterpret_cast<uint16_t*>(vd), hd);
          break;
        default:
          quantize_row(layout.dtype, ks, kd, hd);
          quantize_row(layout.dtype, vs, vd, hd);
          break;
      }
    }
  }
}

void kv_read_row(const KvLayout& layout, const uint8_t* base, int64_t slot, int32_t kv_head,
                 float* out) {
  load_row(layout, slot_row(layout, const_cast<uint8_t*>(base), slot, kv_head), out);
}

void paged_attention(const KvLayout& layout, const KvLayer& layer, const float* q,
                     std::span<const AttentionSeq> seqs, const AttentionParams& params, float* out) {
  check_layout(layout, &params);
  const int32_t hd = layout.head_dim;
  const int32_t num_kv = layout.num_kv_heads;
  const int32_t group = params.num_heads / num_kv;  // query heads per KV head

  // Work items: (sequence, KV head, chunk of query rows). An item converts the
  // K and V rows its queries can see to f32 once, then serves every query row
  // of the chunk and every query head of the GQA group. Each query's result
  // depends only on its own visible slots, summed in slot order, so chunking
  // (prefill, prefix hits, batching) never changes a bit of the output.
  constexpr int32_t kRowsPerItem = 32;
  struct Item {
    int32_t seq;
    int32_t kv_head;
    int32_t row_begin, row_end;  // query rows within the sequence
  };
  std::vector<Item> items;
  int64_t work = 0;  // multiply-adds, to decide whether threads pay off
  for (int32_t s = 0; s < static_cast<int32_t>(seqs.size()); ++s) {
    const AttentionSeq& seq = seqs[s];
    for (int32_t r = 0; r < seq.num_tokens; r += kRowsPerItem)
      for (int32_t h = 0; h < num_kv; ++h) items.push_back({s, h, r, std::min(seq.num_tokens, r + kRowsPerItem)});
    work += 2 * static_cast<int64_t>(seq.num_tokens) * seq.num_context * hd * params.num_heads;
  }
  // Waking a team costs microseconds; tiny steps (small models, short
  // contexts) run faster on the calling thread alone.
  constexpr int64_t kMinParallelWork = 1 << 16;
  const int team = work < kMinParallelWork ? 1 : num_threads();

  struct Scratch {
    std::vector<float> keys, values;  // [visible, head_dim] f32 copies
    std::vector<float> keys_t;        // [head_dim, visible] keys transposed
    std::vector<float> scores;        // [visible]
  };
  std::vector<Scratch> scratch(static_cast<size_t>(team));
  auto run_item = [&](int64_t it, int worker) {
      std::vector<float>& keys = scratch[worker].keys;
      std::vector<float>& values = scratch[worker].values;
      std::vector<float>& keys_t = scratch[worker].keys_t;
      std::vector<float>& scores = scratch[worker].scores;
      const Item item = items[it];
      const AttentionSeq& seq = seqs[item.seq];
      int64_t lo_first, hi_first, lo_last, hi_last;
      visible_range(seq, item.row_begin, params.window, &lo_first, &hi_first);
      visible_range(seq, item.row_end - 1, params.window, &lo_last, &hi_last);
      const int64_t base = lo_first;  // first slot any row of the chunk sees
      const int64_t span = hi_last - base;
      keys.resize(static_cast<size_t>(span * hd));
      keys_t.resize(static_cast<size_t>(span * hd));
      values.resize(static_cast<size_t>(span * hd));
      gather_rows(layout, layer.k, seq, item.kv_head, base, hi_last, keys.data());
      gather_rows(layout, layer.v, seq, item.kv_head, base, hi_last, values.data());

      transpose(keys.data(), span, hd, keys_t.data());

      for (int32_t i = item.row_begin; i < item.row_end; ++i) {
        int64_t lo, hi;
        visible_range(seq, i, params.window, &lo, &hi);
        const int64_t n = hi - lo;
        const int64_t token = seq.token_begin + i;
        scores.resize(static_cast<size_t>(n));
        for (int32_t g = 0; g < group; ++g) {
          const int64_t head = token * params.num_heads + item.kv_head * group + g;
          score_keys(q + head * hd, keys_t.data() + (lo - base), span, hd, n, params.scale, scores.data());
          if (params.softcap > 0.f) soft_cap(scores.data(), n, params.softcap);
          softmax(scores.data(), 1, n);
          weighted_sum(scores.data(), &values[(lo - base) * hd], n, hd, out + head * hd);
        }
      }
  };
  if (team > 1) {
    parallel_for(static_cast<int64_t>(items.size()), run_item);
  } else {
    for (size_t it = 0; it < items.size(); ++it) run_item(static_cast<int64_t>(it), 0);
  }
}

void paged_attention_reference(const KvLayout& layout, const KvLayer& layer, const float* q,
                               std::span<const AttentionSeq> seqs, const AttentionParams& params,
                               float* out) {
  check_layout(layout, &params);
  const int32_t hd = layout.head_dim;
  const int32_t group = params.num_heads / layout.num_kv_heads;
  std::vector<float> krow(hd), vrow(hd);
  for (const AttentionSeq& seq : seqs) {
    for (int32_t i = 0; i < seq.num_tokens; ++i) {
      int64_t lo, hi;
      visible_range(seq, i, params.window, &lo, &hi);
      const int64_t token = seq.token_begin + i;
      for (int32_t h = 0; h < params.num_heads; ++h) {
        const int32_t kvh = h / group;
        const float* qh = q + (token * params.num_heads + h) * hd;
        std::vector<double> w;
        double max_score = -INFINITY;
        for (int64_t s = lo; s < hi; ++s) {
          load_row(layout, slot_row(layout, layer.k, physical_slot(layout, seq, s), kvh), krow.data());
          double d = 0;
          for (int32_t c = 0; c < hd; ++c) d += static_cast<double>(qh[c]) * krow[c];
          d *= params.scale;
          if (params.softcap > 0.f) d = params.softcap * std::tanh(d / params.softcap);
          w.push_back(d);
          max_score = std::max(max_score, d);
        }
        double sum = 0;
        for (double& x : w) sum += (x = std::exp(x - max_score));
        std::vector<double> acc(hd, 0.0);
        for (int64_t s = lo; s < hi; ++s) {
          load_row(layout, slot_row(layout, layer.v, physical_slot(layout, seq, s), kvh), vrow.data());
          for (int32_t c = 0; c < hd; ++c) acc[c] += w[s - lo] / sum * vrow[c];
        }
        float* oh = out + (token * params.num_heads + h) * hd;
        for (int32_t c = 0; c < hd; ++c) oh[c] = static_cast<float>(acc[c]);
      }
    }
  }
}

}  // namespace kvlm
