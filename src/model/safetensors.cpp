#include "model/safetensors.h"

#include <algorithm>
#include <cstring>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/printable.h"

namespace kvlm {
namespace {

using Json = nlohmann::json;

// A header larger than this is no checkpoint kvlm can hold (the largest real
// ones, thousands of tensors, take a few hundred KiB).
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;
constexpr size_t kMaxDims = 4;

template <typename... Args>
[[noreturn]] void corrupt(const std::string& path, fmt::format_string<Args...> f, Args&&... args) {
  throw Error(ErrorCode::kCorrupt,
              fmt::format("{}: {}", path, printable(fmt::format(f, std::forward<Args>(args)...), 1024)));
}

DType parse_dtype(const std::string& path, const std::string& name, const Json& v) {
  if (!v.is_string()) corrupt(path, "tensor '{}': dtype is not a string", name);
  const std::string& s = v.get_ref<const std::string&>();
  if (s == "F32") return DType::kF32;
  if (s == "F16") return DType::kF16;
  if (s == "BF16") return DType::kBF16;
  throw_error(ErrorCode::kUnsupported, "{}: tensor '{}' has dtype {}; kvlm reads F32, F16 and BF16 checkpoints",
              path, printable(name), printable(s));
}

uint64_t parse_u64(const std::string& path, const std::string& name, const Json& v, std::string_view what) {
  if (!v.is_number_unsigned()) corrupt(path, "tensor '{}': {} is not an unsigned integer", name, what);
  return v.get<uint64_t>();
}

SafetensorsTensor parse_tensor(const std::string& path, const std::string& name, const Json& info,
                               const uint8_t* data, uint64_t data_size) {
  if (!info.is_object()) corrupt(path, "tensor '{}': its entry is not an object", name);
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!info.contains(key)) corrupt(path, "tensor '{}': no '{}'", name, key);
  SafetensorsTensor t;
  t.name = name;
  t.dtype = parse_dtype(path, name, info["dtype"]);
  const Json& shape = info["shape"];
  if (!shape.is_array() || shape.size() > kMaxDims) corrupt(path, "tensor '{}': shape is not a list of up to {} sizes", name, kMaxDims);
  uint64_t num_elements = 1;
  for (const Json& d : shape) {
    const uint64_t dim = parse_u64(path, name, d, "a shape entry");
    if (dim == 0 || dim > (uint64_t{1} << 40) || num_elements > (uint64_t{1} << 50) / dim)
      corrupt(path, "tensor '{}': shape {} is absurd", name, shape.dump());
    num_elements *= dim;
    t.shape.push_back(static_cast<int64_t>(dim));
  }
  const Json& offsets = info["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2) corrupt(path, "tensor '{}': data_offsets is not [begin, end]", name);
  const uint64_t begin = parse_u64(path, name, offsets[0], "data_offsets[0]");
  const uint64_t end = parse_u64(path, name, offsets[1], "data_offsets[1]");
  if (begin > end || end > data_size)
    corrupt(path, "tensor '{}': data [{}, {}) lies outside the {} bytes of tensor data", name, begin, end, data_size);
  t.num_bytes = static_cast<size_t>(end - begin);
  if (t.num_bytes != num_elements * dtype_info(t.dtype).block_bytes)
    corrupt(path, "tensor '{}': {} bytes for {} {} values", name, t.num_bytes, num_elements, dtype_info(t.dtype).name);
  t.data = data + begin;
  return t;
}

// Tensors must not share bytes: a header that points two tensors at one
// range would load without complaint and give a wrong model.
void check_disjoint(const std::string& path, std::vector<SafetensorsTensor>& tensors, const uint8_t* data) {
  std::vector<const SafetensorsTensor*> order;
  for (const auto& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->data < b->data; });
  for (size_t i = 0; i + 1 < order.size(); ++i)
    if (order[i]->data + order[i]->num_bytes > order[i + 1]->data)
      corrupt(path, "tensors '{}' and '{}' overlap at data offset {}", order[i]->name, order[i + 1]->name,
              order[i + 1]->data - data);
}

}  // namespace

int64_t SafetensorsTensor::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  auto out = std::unique_ptr<SafetensorsFile>(new SafetensorsFile());
  out->file_ = MappedFile::open(path);
  const uint8_t* bytes = out->file_->data();
  const size_t size = out->file_->size();
  uint64_t header_size = 0;
  if (size < 8) corrupt(path, "{} bytes: too short for a safetensors header", size);
  std::memcpy(&header_size, bytes, 8);
  if (header_size > kMaxHeaderBytes || header_size > size - 8)
    corrupt(path, "header of {} bytes does not fit the file of {} bytes", header_size, size);
  Json header = Json::parse(bytes + 8, bytes + 8 + header_size, nullptr, false);
  if (!header.is_object()) corrupt(path, "the header is not a JSON object");
  const uint8_t* data = bytes + 8 + header_size;
  const uint64_t data_size = size - 8 - header_size;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    out->index_.emplace(name, out->tensors_.size());
    out->tensors_.push_back(parse_tensor(path, name, info, data, data_size));
  }
  check_disjoint(path, out->tensors_, data);
  return out;
}

const SafetensorsTensor* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace kvlm
