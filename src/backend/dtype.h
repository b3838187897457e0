// Element types of weights, activations and the KV cache, with GGUF's block
// layouts. A row of n elements of a quantized type is n / block_size blocks
// stored back to back; n must be a multiple of block_size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace kvlm {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kQ8_0,  // 32 values: fp16 scale + 32 x int8                      (34 bytes)
  kQ4_0,  // 32 values: fp16 scale + 16 bytes of 4-bit, offset 8     (18 bytes)
  kQ4_K,  // 256 values: fp16 d, dmin, 12 bytes of 6-bit scales/mins, 128 bytes 4-bit (144 bytes)
  kQ6_K,  // 256 values: 128 bytes low 4 bits, 64 bytes high 2 bits, 16 int8 scales, fp16 d (210 bytes)
  kQ8_K,  // 256 values: f32 d, 256 x int8, 16 x int16 block sums (292 bytes); activations only
};

struct DTypeInfo {
  std::string_view name;   // "F32", "Q4_K", ...
  int32_t block_size;      // elements per block (1 for float types)
  int32_t block_bytes;     // bytes per block
  uint32_t ggml_type;      // id in GGUF tensor infos
};

const DTypeInfo& dtype_info(DType t);
inline std::string_view dtype_name(DType t) { return dtype_info(t).name; }
inline bool is_quantized(DType t) { return dtype_info(t).block_size > 1; }

// GGUF tensor type id -> DType; nullopt for types kvlm does not read.
std::optional<DType> dtype_from_ggml(uint32_t ggml_type);
// "f16", "Q8_0", ... (case-insensitive) -> DType.
std::optional<DType> dtype_from_name(std::string_view name);
// Name of any GGML type id, known to kvlm or not (for error messages).
std::string_view ggml_type_name(uint32_t ggml_type);

// Bytes taken by a row of `num_elements` (a multiple of the block size).
inline size_t row_bytes(DType t, int64_t num_elements) {
  const DTypeInfo& info = dtype_info(t);
  return static_cast<size_t>(num_elements / info.block_size) * static_cast<size_t>(info.block_bytes);
}

}  // namespace kvlm
