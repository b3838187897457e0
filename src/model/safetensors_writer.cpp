#include "model/safetensors_writer.h"

#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/assert.h"
#include "common/error.h"

namespace kvlm {

void SafetensorsWriter::add(const std::string& name, DType dtype, std::vector<int64_t> shape,
                            std::vector<uint8_t> data) {
  KVLM_ASSERT(dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16,
              "safetensors: float tensors only");
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  KVLM_ASSERT(row_bytes(dtype, n) == data.size(), "safetensors: data size does not match the shape");
  for (const Tensor& t : tensors_) KVLM_ASSERT(t.name != name, "safetensors: duplicate tensor name");
  tensors_.push_back(Tensor{name, dtype, std::move(shape), std::move(data)});
}

std::vector<uint8_t> SafetensorsWriter::serialize() const {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  size_t offset = 0;
  for (const Tensor& t : tensors_) {
    header[t.name] = {{"dtype", std::string(dtype_name(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  std::string text = header.dump();
  // The data then starts 8-aligned, as the Python writer keeps it.
  text.append((8 - text.size() % 8) % 8, ' ');
  std::vector<uint8_t> out(8 + text.size() + offset);
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<uint8_t>(n >> (8 * i));
  std::memcpy(out.data() + 8, text.data(), text.size());
  size_t at = 8 + text.size();
  for (const Tensor& t : tensors_) {
    if (!t.data.empty()) std::memcpy(out.data() + at, t.data.data(), t.data.size());
    at += t.data.size();
  }
  return out;
}

void SafetensorsWriter::write(const std::string& path) const {
  const std::vector<uint8_t> bytes = serialize();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out.good()) throw_error(ErrorCode::kInvalidArgument, "{}: cannot write the safetensors file", path);
}

}  // namespace kvlm
