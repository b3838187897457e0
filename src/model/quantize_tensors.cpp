#include "model/quantize_tensors.h"

#include <vector>

#include "backend/quant.h"
#include "common/assert.h"
#include "common/error.h"

namespace kvlm {
namespace {

// The source file and the converted bytes.
struct ConvertedOwner : TensorOwner {
  std::unique_ptr<GgufFile> source;
  std::vector<std::vector<uint8_t>> buffers;
};

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Row by row through f32, each source range (one per expert when sliced) in order.
std::vector<uint8_t> convert(const GgufTensor& t, DType type) {
  const int64_t cols = t.dims[0];
  const size_t src_row = row_bytes(t.dtype, cols), dst_row = row_bytes(type, cols);
  std::vector<uint8_t> out(static_cast<size_t>(t.num_elements() / cols) * dst_row);
  std::vector<float> row(static_cast<size_t>(cols));
  size_t r = 0;
  for (const auto& [data, size] : t.byte_ranges()) {
    for (size_t off = 0; off < size; off += src_row, ++r) {
      dequantize_row(t.dtype, data + off, row.data(), cols);
      quantize_row(type, row.data(), out.data() + r * dst_row, cols);
    }
  }
  return out;
}

}  // namespace

bool converts_to(const GgufTensor& t, DType type) {
  if (t.dims.size() < 2 || !ends_with(t.name, ".weight") || t.dtype == type) return false;
  if (t.name.find("ffn_gate_inp") != std::string::npos) return false;
  return t.dims[0] % dtype_info(type).block_size == 0;
}

std::unique_ptr<GgufFile> convert_tensors(std::unique_ptr<GgufFile> in, std::optional<DType> type) {
  KVLM_ASSERT(type != DType::kQ8_K, "Q8_K is an activation type");
  auto owner = std::make_unique<ConvertedOwner>();
  std::vector<GgufTensor> tensors;
  for (const GgufTensor& t : in->tensors()) {
    GgufTensor out = t;
    std::optional<DType> to;
    if (type && converts_to(t, *type)) to = type;
    if (t.dims.size() == 1 && (t.dtype == DType::kF16 || t.dtype == DType::kBF16)) to = DType::kF32;
    if (to) {
      std::vector<uint8_t>& bytes = owner->buffers.emplace_back(convert(t, *to));
      out.dtype = *to;
      out.data = bytes.data();
      out.num_bytes = bytes.size();
      out.slices.clear();
    }
    tensors.push_back(std::move(out));
  }
  Metadata metadata = in->metadata();
  const std::string source = in->path();
  owner->source = std::move(in);
  return GgufFile::from_parts(source, std::move(metadata), std::move(tensors), std::move(owner));
}

DType parse_weight_type(const std::string& name, bool floats_too) {
  const std::optional<DType> t = dtype_from_name(name);
  const bool quant = t && (*t == DType::kQ8_0 || *t == DType::kQ4_0 || *t == DType::kQ4_K);
  const bool flt = t && (*t == DType::kF32 || *t == DType::kF16 || *t == DType::kBF16);
  if (quant || (floats_too && flt)) return *t;
  throw_error(ErrorCode::kInvalidArgument, "weight type '{}' is not one of {}q8_0, q4_0, q4_k", name,
              floats_too ? "f32, f16, bf16, " : "");
}

}  // namespace kvlm
