#include "backend/cpu/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/fp16.h"
#include "backend/quant.h"
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

  // Work items: (sequence, query row, KV head). One item reads each visible K
  // and V row once and serves every query head of its GQA group.
  struct Item {
    int32_t seq;
    int32_t row;  // query row within the sequence
    int32_t kv_head;
  };
  std::vector<Item> items;
  int64_t work = 0;  // multiply-adds, to decide whether threads pay off
  for (int32_t s = 0; s < static_cast<int32_t>(seqs.size()); ++s) {
    for (int32_t i = 0; i < seqs[s].num_tokens; ++i) {
      for (int32_t h = 0; h < num_kv; ++h) items.push_back({s, i, h});
      work += 2 * static_cast<int64_t>(seqs[s].num_context - seqs[s].num_tokens + i + 1) * hd * params.num_heads;
    }
  }
  // Waking a team costs microseconds; tiny steps (small models, short
  // contexts) run faster on the calling thread alone.
  constexpr int64_t kMinParallelWork = 1 << 16;
  const int team = work < kMinParallelWork ? 1 : num_threads();

#pragma omp parallel num_threads(team) if (team > 1)
  {
    std::vector<float> scores;  // [group][visible]
    std::vector<float> row(hd);
#pragma omp for schedule(dynamic, 4)
    for (size_t it = 0; it < items.size(); ++it) {
      const Item item = items[it];
      const AttentionSeq& seq = seqs[item.seq];
      int64_t lo, hi;
      visible_range(seq, item.row, params.window, &lo, &hi);
      const int64_t n = hi - lo;
      const int64_t token = seq.token_begin + item.row;
      scores.assign(static_cast<size_t>(group * n), 0.f);

      // Scores: one K row, `group` query heads.
      for (int64_t s = lo; s < hi; ++s) {
        load_row(layout, slot_row(layout, layer.k, physical_slot(layout, seq, s), item.kv_head),
                 row.data());
        for (int32_t g = 0; g < group; ++g) {
          const float* qh = q + (token * params.num_heads + item.kv_head * group + g) * hd;
          scores[g * n + (s - lo)] = dot_f32(qh, row.data(), hd) * params.scale;
        }
      }
      if (params.softcap > 0.f) soft_cap(scores.data(), group * n, params.softcap);
      softmax(scores.data(), group, n);

      // Weighted sum of V rows.
      for (int32_t g = 0; g < group; ++g)
        std::memset(out + (token * params.num_heads + item.kv_head * group + g) * hd, 0,
                    sizeof(float) * hd);
      for (int64_t s = lo; s < hi; ++s) {
        load_row(layout, slot_row(layout, layer.v, physical_slot(layout, seq, s), item.kv_head),
                 row.data());
        for (int32_t g = 0; g < group; ++g) {
          float* oh = out + (token * params.num_heads + item.kv_head * group + g) * hd;
          axpy_f32(scores[g * n + (s - lo)], row.data(), oh, hd);
        }
      }
    }
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
