// Paged attention's public entry points (attention.h): the KV writes and
// reads, the byte work of evictions, the scalar reference, and
// paged_attention(), which runs the active CPU path's kernel
// (attention_kernels.cpp, ops_impl.h).
#include "backend/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <vector>

#include "backend/cpu/attention_impl.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/ops_impl.h"
#include "backend/fp16.h"
#include "backend/quant.h"
#include "common/assert.h"

namespace kvlm {

using cpu::KVLM_SIMD_NS::block_head;
using cpu::KVLM_SIMD_NS::block_of;
using cpu::KVLM_SIMD_NS::check_layout;
using cpu::KVLM_SIMD_NS::key_at;
using cpu::KVLM_SIMD_NS::key_index;
using cpu::KVLM_SIMD_NS::kMaxQ8Blocks;
using cpu::KVLM_SIMD_NS::q8_key_quant_offset;
using cpu::KVLM_SIMD_NS::q4_key_lane_offset;
using cpu::KVLM_SIMD_NS::q8_key_scale_offset;
using cpu::KVLM_SIMD_NS::value_index;
using cpu::KVLM_SIMD_NS::visible_range;

namespace {
uint16_t* half_block(uint8_t* block) { return reinterpret_cast<uint16_t*>(block); }

// Slot o's Q4_0 key: quantized as a row (quantize_row's rounding), its
// nibbles then placed in their lanes (attention.h, KvLayout).
void store_q4_0_key(const KvLayout& layout, uint8_t* kb, int64_t o, const float* src) {
  BlockQ4_0 row[kMaxQ8Blocks];
  quantize_row(DType::kQ4_0, src, row, layout.head_dim);
  for (int64_t b = 0; b < layout.head_dim / 32; ++b) {
    std::memcpy(kb + q8_key_scale_offset(layout, b, o), &row[b].d, sizeof(uint16_t));
    uint8_t nibble[32];  // the block's quants in dimension order (quant.h: low nibbles first)
    for (int i = 0; i < 16; ++i) nibble[i] = row[b].qs[i] & 15, nibble[i + 16] = row[b].qs[i] >> 4;
    for (int64_t j = 0; j < 4; ++j) {
      uint8_t* lane = kb + q4_key_lane_offset(layout, 4 * b + j, o);
      for (int i = 0; i < 4; ++i) lane[i] = static_cast<uint8_t>(nibble[8 * j + i] | nibble[8 * j + 4 + i] << 4);
    }
  }
}

// Slot o's Q4_0 key, from one head's K block kb, as a Q4_0 row.
void load_q4_0_key(const KvLayout& layout, const uint8_t* kb, int64_t o, BlockQ4_0* row) {
  for (int64_t b = 0; b < layout.head_dim / 32; ++b) {
    std::memcpy(&row[b].d, kb + q8_key_scale_offset(layout, b, o), sizeof(uint16_t));
    uint8_t nibble[32];
    for (int64_t j = 0; j < 4; ++j) {
      const uint8_t* lane = kb + q4_key_lane_offset(layout, 4 * b + j, o);
      for (int i = 0; i < 4; ++i) nibble[8 * j + i] = lane[i] & 15, nibble[8 * j + 4 + i] = lane[i] >> 4;
    }
    for (int i = 0; i < 16; ++i) row[b].qs[i] = static_cast<uint8_t>(nibble[i] | nibble[i + 16] << 4);
  }
}

// Slot o's key, from f32, into one head's K block kb: every KV dtype (kv_write,
// kv_rotate_key).
void store_key(const KvLayout& layout, uint8_t* kb, int64_t o, const float* src) {
  const int64_t hd = layout.head_dim;
  switch (layout.dtype) {
    case DType::kF32:
      for (int64_t c = 0; c < hd; ++c) reinterpret_cast<float*>(kb)[key_index(layout, c, o)] = src[c];
      break;
    case DType::kF16:
      for (int64_t c = 0; c < hd; ++c) half_block(kb)[key_index(layout, c, o)] = f32_to_fp16(src[c]);
      break;
    case DType::kBF16:
      for (int64_t c = 0; c < hd; ++c) half_block(kb)[key_index(layout, c, o)] = f32_to_bf16_flush(src[c]);
      break;
    case DType::kQ4_0: store_q4_0_key(layout, kb, o, src); break;
    default: {  // Q8_0: quantized as a row, then scattered into its lanes
      KVLM_ASSERT(layout.keys_q8_0(), "KV key dtype");
      BlockQ8_0 row[kMaxQ8Blocks];
      quantize_row(DType::kQ8_0, src, row, hd);
      for (int64_t b = 0; b < hd / 32; ++b) {
        std::memcpy(kb + q8_key_scale_offset(layout, b, o), &row[b].d, sizeof(uint16_t));
        for (int64_t i = 0; i < 32; ++i) kb[q8_key_quant_offset(layout, 32 * b + i, o)] = static_cast<uint8_t>(row[b].qs[i]);
      }
      break;
    }
  }
}

// Slot o's Q8_0 key, from one head's K block kb, as a Q8_0 row.
void load_q8_0_key(const KvLayout& layout, const uint8_t* kb, int64_t o, BlockQ8_0* row) {
  for (int64_t b = 0; b < layout.head_dim / 32; ++b) {
    std::memcpy(&row[b].d, kb + q8_key_scale_offset(layout, b, o), sizeof(uint16_t));
    for (int64_t i = 0; i < 32; ++i) row[b].qs[i] = static_cast<int8_t>(kb[q8_key_quant_offset(layout, 32 * b + i, o)]);
  }
}

// Slot o's value, from f32, into one head's V block vb: every KV dtype.
void store_value(const KvLayout& layout, uint8_t* vb, int64_t o, const float* src) {
  const int64_t hd = layout.head_dim;
  uint8_t* row = vb + o * layout.row_bytes();  // (BF16 pairs slots: element by element)
  switch (layout.dtype) {
    case DType::kF32: std::memcpy(row, src, sizeof(float) * hd); break;
    case DType::kF16: f32_to_fp16_row(src, half_block(row), hd); break;
    case DType::kBF16:
      for (int64_t c = 0; c < hd; ++c) half_block(vb)[value_index(layout, c, o)] = f32_to_bf16_flush(src[c]);
      break;
    default: quantize_row(layout.dtype, src, row, hd); break;
  }
}

// What BF16 attention computes with: x rounded to BF16 (attention.h).
float round_bf16(float x) { return bf16_to_f32(f32_to_bf16_flush(x)); }
}  // namespace

void kv_write(const KvLayout& layout, const KvLayer& layer, const float* k, const float* v, const int64_t* slots,
              int64_t num_tokens) {
  check_layout(layout, nullptr);
  const int64_t hd = layout.head_dim;
  const int32_t bs = layout.block_size;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int64_t block = slots[t] / bs, o = slots[t] % bs;
    for (int32_t h = 0; h < layout.num_kv_heads; ++h) {
      const float* ks = k + (t * layout.num_kv_heads + h) * hd;
      const float* vs = v + (t * layout.num_kv_heads + h) * hd;
      store_key(layout, block_head(layout, layer.k, block, h), o, ks);
      store_value(layout, block_head(layout, layer.v, block, h), o, vs);
    }
  }
}

void kv_read_key(const KvLayout& layout, const KvLayer& layer, int64_t slot, int32_t kv_head, float* out) {
  const int64_t o = slot % layout.block_size;
  const uint8_t* kb = block_head(layout, layer.k, slot / layout.block_size, kv_head);
  if (layout.keys_q8_0()) {
    BlockQ8_0 row[kMaxQ8Blocks];
    load_q8_0_key(layout, kb, o, row);
    dequantize_row(DType::kQ8_0, row, out, layout.head_dim);
  } else if (layout.kv_q4_0()) {
    BlockQ4_0 row[kMaxQ8Blocks];
    load_q4_0_key(layout, kb, o, row);
    dequantize_row(DType::kQ4_0, row, out, layout.head_dim);
  } else {
    for (int64_t c = 0; c < layout.head_dim; ++c) out[c] = key_at(layout, kb, c, o);
  }
}

void kv_read_value(const KvLayout& layout, const KvLayer& layer, int64_t slot, int32_t kv_head, float* out) {
  if (layout.pairs_bf16()) {
    const auto* v16 = reinterpret_cast<const uint16_t*>(block_head(layout, layer.v, slot / layout.block_size, kv_head));
    for (int64_t c = 0; c < layout.head_dim; ++c) out[c] = bf16_to_f32(v16[value_index(layout, c, slot % layout.block_size)]);
    return;
  }
  const uint8_t* vb = block_head(layout, layer.v, slot / layout.block_size, kv_head) +
                      (slot % layout.block_size) * layout.row_bytes();
  dequantize_row(layout.dtype, vb, out, layout.head_dim);
}

void kv_deviation(const KvLayout& layout, const KvLayer& layer, const float* k, const float* v,
                  const int64_t* slots, int64_t num_tokens, float* out) {
  const int32_t hd = layout.head_dim;
  std::vector<float> stored(static_cast<size_t>(hd));
  auto distance = [&](const float* x) {
    double d = 0;
    for (int32_t c = 0; c < hd; ++c) d += static_cast<double>(x[c] - stored[c]) * (x[c] - stored[c]);
    return d;
  };
  for (int64_t t = 0; t < num_tokens; ++t) {
    double sum = 0;
    for (int32_t h = 0; h < layout.num_kv_heads; ++h) {
      const int64_t row = (t * layout.num_kv_heads + h) * hd;
      kv_read_key(layout, layer, slots[t], h, stored.data());
      sum += distance(k + row);
      kv_read_value(layout, layer, slots[t], h, stored.data());
      sum += distance(v + row);
    }
    out[t] = static_cast<float>(sum);
  }
}

void paged_attention(const KvLayout& layout, const KvLayer& layer, const float* q,
                     std::span<const AttentionSeq> seqs, const AttentionParams& params, float* out) {
  check_layout(layout, &params);
  cpu::ops_kernels().paged_attention(layout, layer, q, seqs, params, out);
}

void paged_attention_reference(const KvLayout& layout, const KvLayer& layer, const float* q,
                               std::span<const AttentionSeq> seqs, const AttentionParams& params, float* out) {
  check_layout(layout, &params);
  const int32_t hd = layout.head_dim;
  const int32_t group = params.num_heads / layout.num_kv_heads;
  const bool bf16 = layout.pairs_bf16();
  std::vector<float> krow(hd), vrow(hd), qrow(hd);
  std::vector<BlockQ8_0> qblocks(static_cast<size_t>(hd / 32));
  for (const AttentionSeq& seq : seqs) {
    for (int32_t i = 0; i < seq.num_tokens; ++i) {
      int64_t lo, hi;
      visible_range(seq, i, params.window, &lo, &hi);
      const int64_t token = seq.token_begin + i;
      for (int32_t h = 0; h < params.num_heads; ++h) {
        const int32_t kvh = h / group;
        const float* qh = q + (token * params.num_heads + h) * hd;
        if (bf16) {
          for (int32_t c = 0; c < hd; ++c) qrow[c] = round_bf16(qh[c]);
          qh = qrow.data();
        } else if (layout.query_q8_0()) {  // the query as the int8 dot products take it
          quantize_row(DType::kQ8_0, qh, qblocks.data(), hd);
          dequantize_row(DType::kQ8_0, qblocks.data(), qrow.data(), hd);
          qh = qrow.data();
        }
        std::vector<double> w;
        double max_score = -INFINITY;
        for (int64_t s = lo; s < hi; ++s) {
          const int64_t slot = block_of(layout, seq, s) * layout.block_size + s % layout.block_size;
          kv_read_key(layout, layer, slot, kvh, krow.data());
          double d = 0;
          for (int32_t c = 0; c < hd; ++c) d += static_cast<double>(qh[c]) * krow[c];
          d *= params.scale;
          if (params.softcap > 0.f) d = params.softcap * std::tanh(d / params.softcap);
          w.push_back(d);
          max_score = std::max(max_score, d);
        }
        double sum = 0;
        for (double& x : w) sum += (x = std::exp(x - max_score));
        if (seq.attn_stats) {
          float* stat_row = seq.attn_stats + (static_cast<int64_t>(i) * layout.num_kv_heads + kvh) * seq.num_context;
          for (int64_t s = lo; s < hi; ++s) stat_row[s] += static_cast<float>(w[s - lo] / sum);
        }
        if (bf16) {  // the weights as the BF16 dot product takes them
          for (double& x : w) x = round_bf16(static_cast<float>(x / sum));
          sum = 1.0;
        }
        std::vector<double> acc(hd, 0.0);
        for (int64_t s = lo; s < hi; ++s) {
          const int64_t slot = block_of(layout, seq, s) * layout.block_size + s % layout.block_size;
          kv_read_value(layout, layer, slot, kvh, vrow.data());
          for (int32_t c = 0; c < hd; ++c) acc[c] += w[s - lo] / sum * vrow[c];
        }
        float* oh = out + (token * params.num_heads + h) * hd;
        for (int32_t c = 0; c < hd; ++c) oh[c] = static_cast<float>(acc[c]);
      }
    }
  }
}

void kv_copy_block(const KvLayout& layout, const KvLayer& layer, int64_t src_block, int64_t dst_block) {
  const size_t n = layout.block_bytes();
  std::memcpy(layer.k + static_cast<size_t>(dst_block) * n, layer.k + static_cast<size_t>(src_block) * n, n);
  std::memcpy(layer.v + static_cast<size_t>(dst_block) * n, layer.v + static_cast<size_t>(src_block) * n, n);
}

namespace {
// One slot's elements in a block whose slots are strided (F32/F16 keys,
// BF16 keys and values): index(layout, c, offset) places element c.
template <typename T, typename Index>
void move_elements(const KvLayout& layout, Index index, const uint8_t* src_block, uint8_t* dst_block,
                   int64_t src_offset, int64_t dst_offset) {
  const T* src = reinterpret_cast<const T*>(src_block);
  T* dst = reinterpret_cast<T*>(dst_block);
  for (int64_t c = 0; c < layout.head_dim; ++c) dst[index(layout, c, dst_offset)] = src[index(layout, c, src_offset)];
}
}  // namespace

void kv_move_slot(const KvLayout& layout, const KvLayer& layer, int64_t src_slot, int64_t dst_slot) {
  const int32_t bs = layout.block_size;
  const size_t row = layout.row_bytes();
  for (int32_t h = 0; h < layout.num_kv_heads; ++h) {
    const int64_t so = src_slot % bs, d = dst_slot % bs;
    const uint8_t* kb_src = block_head(layout, layer.k, src_slot / bs, h);
    uint8_t* kb_dst = block_head(layout, layer.k, dst_slot / bs, h);
    const uint8_t* vb_src = block_head(layout, layer.v, src_slot / bs, h);
    uint8_t* vb_dst = block_head(layout, layer.v, dst_slot / bs, h);
    switch (layout.dtype) {
      case DType::kF32: move_elements<float>(layout, key_index, kb_src, kb_dst, so, d); break;
      case DType::kF16:
      case DType::kBF16: move_elements<uint16_t>(layout, key_index, kb_src, kb_dst, so, d); break;
      case DType::kQ4_0:  // the scales, then the lanes
        for (int64_t b = 0; b < layout.head_dim / 32; ++b)
          std::memcpy(kb_dst + q8_key_scale_offset(layout, b, d), kb_src + q8_key_scale_offset(layout, b, so), 2);
        for (int64_t j = 0; j < layout.head_dim / 8; ++j)
          std::memcpy(kb_dst + q4_key_lane_offset(layout, j, d), kb_src + q4_key_lane_offset(layout, j, so), 4);
        break;
      default: {  // Q8_0: the scales, then the quants
        KVLM_ASSERT(layout.keys_q8_0(), "KV key dtype");
        for (int64_t b = 0; b < layout.head_dim / 32; ++b)
          std::memcpy(kb_dst + q8_key_scale_offset(layout, b, d), kb_src + q8_key_scale_offset(layout, b, so), 2);
        for (int64_t c = 0; c < layout.head_dim; c += 4)
          std::memcpy(kb_dst + q8_key_quant_offset(layout, c, d), kb_src + q8_key_quant_offset(layout, c, so), 4);
        break;
      }
    }
    if (layout.pairs_bf16()) {
      move_elements<uint16_t>(layout, value_index, vb_src, vb_dst, so, d);
    } else {
      std::memcpy(vb_dst + d * row, vb_src + so * row, row);
    }
  }
}

void kv_rotate_key(const KvLayout& layout, const KvLayer& layer, int64_t slot, int32_t delta, const RopeParams& rope_params) {
  const int32_t bs = layout.block_size;
  const int64_t hd = layout.head_dim, o = slot % bs;
  std::vector<float> keys(static_cast<size_t>(layout.num_kv_heads * hd));
  for (int32_t h = 0; h < layout.num_kv_heads; ++h) kv_read_key(layout, layer, slot, h, keys.data() + h * hd);
  // A shift only rotates: the stored key was already scaled by attn_factor
  // when it was written, and scaling it again would change its length.
  RopeParams rotation = rope_params;
  rotation.attn_factor = 1.f;
  rope(keys.data(), &delta, 1, layout.num_kv_heads, hd, rotation);
  for (int32_t h = 0; h < layout.num_kv_heads; ++h)
    store_key(layout, block_head(layout, layer.k, slot / bs, h), o, keys.data() + h * hd);
}

}  // namespace kvlm
