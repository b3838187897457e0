#include "model/gguf.h"

#include <algorithm>
#include <cstring>

#include "common/assert.h"
#include "common/error.h"
#include "common/printable.h"

namespace kvlm {
namespace {

// Limits that no real file comes near; they stop a hostile header from making
// us allocate or loop without bound before the end-of-file checks catch it.
constexpr uint64_t kMaxStringBytes = 1ull << 30;
constexpr uint64_t kMaxArrayItems = 1ull << 28;
// Metadata values in the whole file. Each costs about 48 bytes in memory
// whatever its size on disk, so a file of many one-byte items could ask for
// 48x its size; the largest vocabularies (256k tokens, their scores, types
// and merges) hold about a million.
constexpr uint64_t kMaxMetadataValues = 1ull << 23;

// The fewest bytes one value of `type` takes in the file (an array: its
// element type and count), so a count can be checked before allocating.
uint64_t min_value_bytes(MetaType type) {
  switch (type) {
    case MetaType::kU8: case MetaType::kI8: case MetaType::kBool: return 1;
    case MetaType::kU16: case MetaType::kI16: return 2;
    case MetaType::kU32: case MetaType::kI32: case MetaType::kF32: return 4;
    case MetaType::kU64: case MetaType::kI64: case MetaType::kF64: case MetaType::kString: return 8;
    case MetaType::kArray: return 12;
  }
  return 1;
}
constexpr uint32_t kMaxDims = 4;
constexpr int kMaxArrayDepth = 8;

}  // namespace

// Sequential bounds-checked reader over the mapped bytes.
class GgufParser {
 public:
  GgufParser(const uint8_t* data, size_t size, std::string path)
      : data_(data), size_(size), path_(std::move(path)) {}

  template <typename... Args>
  [[noreturn]] void fail(uint64_t at, fmt::format_string<Args...> f, Args&&... args) const {
    // The reason may quote names and keys from the file: printable() keeps
    // their bytes from cutting the message at a NUL or breaking UTF-8.
    throw Error(ErrorCode::kCorrupt, fmt::format("{}: offset {}: {}", path_, at,
                                                 printable(fmt::format(f, std::forward<Args>(args)...), 1024)));
  }

  void need(uint64_t n, std::string_view what) const {
    if (n > size_ - pos_) fail(pos_, "truncated: {} needs {} bytes, {} left", what, n, size_ - pos_);
  }

  template <typename T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(std::string_view what) {
    uint64_t at = pos_;
    uint64_t len = read<uint64_t>(what);
    if (len > kMaxStringBytes) fail(at, "{}: string length {} is absurd", what, len);
    need(len, what);
    std::string s(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return s;
  }

  MetaValue read_value(MetaType type, const std::string& key, int depth) {
    if (++num_values_ > kMaxMetadataValues)
      fail(pos_, "metadata '{}': more than {} metadata values in the file", key, kMaxMetadataValues);
    MetaValue v;
    v.type = type;
    switch (type) {
      case MetaType::kU8: v.value = uint64_t{read<uint8_t>(key)}; break;
      case MetaType::kI8: v.value = int64_t{read<int8_t>(key)}; break;
      case MetaType::kU16: v.value = uint64_t{read<uint16_t>(key)}; break;
      case MetaType::kI16: v.value = int64_t{read<int16_t>(key)}; break;
      case MetaType::kU32: v.value = uint64_t{read<uint32_t>(key)}; break;
      case MetaType::kI32: v.value = int64_t{read<int32_t>(key)}; break;
      case MetaType::kU64: v.value = read<uint64_t>(key); break;
      case MetaType::kI64: v.value = read<int64_t>(key); break;
      case MetaType::kF32: v.value = double{read<float>(key)}; break;
      case MetaType::kF64: v.value = read<double>(key); break;
      case MetaType::kBool: {
        uint64_t at = pos_;
        uint8_t b = read<uint8_t>(key);
        if (b > 1) fail(at, "metadata '{}': bool value {} is neither 0 nor 1", key, b);
        v.value = int64_t{b};
        break;
      }
      case MetaType::kString: v.value = read_string(key); break;
      case MetaType::kArray: {
        if (depth >= kMaxArrayDepth) fail(pos_, "metadata '{}': arrays nested too deep", key);
        uint64_t at = pos_;
        uint32_t elem = read<uint32_t>(key);
        if (elem > static_cast<uint32_t>(MetaType::kF64))
          fail(at, "metadata '{}': unknown array element type {}", key, elem);
        v.elem_type = static_cast<MetaType>(elem);
        uint64_t count_at = pos_;
        uint64_t count = read<uint64_t>(key);
        // Every element takes at least min_value_bytes, so a count needing
        // more than the bytes left is a lie we can refuse before allocating.
        if (count > kMaxArrayItems || count > (size_ - pos_) / min_value_bytes(v.elem_type))
          fail(count_at, "metadata '{}': array of {} items cannot fit in the file", key, count);
        if (count > kMaxMetadataValues - std::min(num_values_, kMaxMetadataValues))
          fail(count_at, "metadata '{}': array of {} items makes more than {} metadata values in the file", key,
               count, kMaxMetadataValues);
        std::vector<MetaValue> items;
        items.reserve(count);
        for (uint64_t i = 0; i < count; ++i) items.push_back(read_value(v.elem_type, key, depth + 1));
        v.value = std::move(items);
        break;
      }
    }
    return v;
  }

  // A GGUF file: header, metadata (general.alignment among it), tensor
  // infos, then the aligned data section the infos point into.
  std::unique_ptr<GgufFile> parse(std::unique_ptr<MappedFile> file) {
    auto out = std::unique_ptr<GgufFile>(new GgufFile());
    const HeaderCounts counts = read_header(*out);
    const uint64_t alignment_at = read_metadata(*out, counts.num_kv);
    set_alignment(*out, alignment_at);
    const std::vector<uint64_t> info_offsets = read_tensor_infos(*out, counts.num_tensors);
    place_tensor_data(*out, info_offsets);
    check_regions(*out, info_offsets);
    out->path_ = file->path();
    out->file_ = std::move(file);
    return out;
  }

  struct HeaderCounts {
    uint64_t num_tensors = 0;
    uint64_t num_kv = 0;
  };

  // Magic, version and the two counts, each checked against the bytes left
  // so a lying count fails here rather than after a huge reserve.
  HeaderCounts read_header(GgufFile& out) {
    uint32_t magic = read<uint32_t>("magic");
    if (std::memcmp(&magic, "GGUF", 4) != 0) fail(0, "bad magic (not a GGUF file)");
    uint64_t at = pos_;
    out.version_ = read<uint32_t>("version");
    if (out.version_ != 2 && out.version_ != 3)
      fail(at, "unsupported GGUF version {} (kvlm reads versions 2 and 3)", out.version_);
    HeaderCounts counts;
    at = pos_;
    counts.num_tensors = read<uint64_t>("tensor count");
    if (counts.num_tensors > (size_ - pos_) / 24)  // each tensor info takes >= 24 bytes
      fail(at, "tensor count {} cannot fit in the file", counts.num_tensors);
    at = pos_;
    counts.num_kv = read<uint64_t>("metadata count");
    if (counts.num_kv > (size_ - pos_) / 12)  // each key/value takes >= 12 bytes
      fail(at, "metadata count {} cannot fit in the file", counts.num_kv);
    return counts;
  }

  // The key/value pairs. Returns where general.alignment's type is (0: not
  // given), for set_alignment's errors.
  uint64_t read_metadata(GgufFile& out, uint64_t num_kv) {
    uint64_t alignment_at = 0;
    for (uint64_t i = 0; i < num_kv; ++i) {
      std::string key = read_string("metadata key");
      uint64_t type_at = pos_;
      uint32_t type = read<uint32_t>("metadata type");
      if (type > static_cast<uint32_t>(MetaType::kF64))
        fail(type_at, "metadata '{}': unknown value type {}", key, type);
      if (out.metadata_.has(key)) fail(type_at, "duplicate metadata key '{}'", key);
      if (key == "general.alignment") alignment_at = type_at;
      MetaValue v = read_value(static_cast<MetaType>(type), key, 0);
      out.metadata_.set(std::move(key), std::move(v));
    }
    return alignment_at;
  }

  void set_alignment(GgufFile& out, uint64_t alignment_at) const {
    const MetaValue* a = out.metadata_.find("general.alignment");
    if (!a) return;
    if (!a->is_integer())
      fail(alignment_at, "general.alignment must be an unsigned integer, not a {}", meta_type_name(a->type));
    const int64_t align = a->as_int("general.alignment");
    if (align <= 0 || (align & (align - 1)) != 0 || align > (1 << 20))
      fail(alignment_at, "general.alignment {} is not a power of two up to 2^20", align);
    out.alignment_ = static_cast<uint64_t>(align);
  }

  // Every tensor's info, names unique. Returns where each info starts, for
  // the errors of the checks that come after.
  std::vector<uint64_t> read_tensor_infos(GgufFile& out, uint64_t num_tensors) {
    out.tensors_.reserve(num_tensors);
    std::vector<uint64_t> info_offsets;
    for (uint64_t i = 0; i < num_tensors; ++i) {
      info_offsets.push_back(pos_);
      GgufTensor t = read_tensor_info(out.alignment_);
      if (out.tensor_index_.count(t.name)) fail(info_offsets.back(), "duplicate tensor name '{}'", t.name);
      out.tensor_index_.emplace(t.name, out.tensors_.size());
      out.tensors_.push_back(std::move(t));
    }
    return info_offsets;
  }

  // One tensor's name, shape, type and data offset (relative to the data
  // section); its byte count follows from the type and shape.
  GgufTensor read_tensor_info(uint64_t alignment) {
    GgufTensor t;
    t.name = read_string("tensor name");
    uint64_t dims_at = pos_;
    uint32_t num_dims = read<uint32_t>("tensor dims");
    if (num_dims == 0 || num_dims > kMaxDims)
      fail(dims_at, "tensor '{}': {} dimensions (1 to {} allowed)", t.name, num_dims, kMaxDims);
    uint64_t num_elements = 1;
    for (uint32_t d = 0; d < num_dims; ++d) {
      uint64_t dim_at = pos_;
      uint64_t dim = read<uint64_t>("tensor dim");
      if (dim == 0 || dim > (1ull << 40) || num_elements > (1ull << 50) / dim)
        fail(dim_at, "tensor '{}': dimension {} = {} is absurd", t.name, d, dim);
      num_elements *= dim;
      t.dims.push_back(static_cast<int64_t>(dim));
    }
    uint64_t type_at = pos_;
    uint32_t ggml_type = read<uint32_t>("tensor type");
    auto dtype = dtype_from_ggml(ggml_type);
    if (!dtype) {
      if (ggml_type > 64) fail(type_at, "tensor '{}': unknown tensor type {}", t.name, ggml_type);
      throw_error(ErrorCode::kUnsupported,
                  "{}: tensor '{}' has type {} ({}); kvlm reads F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K",
                  path_, printable(t.name), ggml_type_name(ggml_type), ggml_type);
    }
    t.dtype = *dtype;
    const DTypeInfo& info = dtype_info(t.dtype);
    if (t.dims[0] % info.block_size != 0)
      fail(type_at, "tensor '{}': row length {} is not a multiple of the {} block size {}", t.name,
           t.dims[0], info.name, info.block_size);
    t.num_bytes = row_bytes(t.dtype, t.dims[0]) * (num_elements / static_cast<uint64_t>(t.dims[0]));
    uint64_t off_at = pos_;
    t.offset = read<uint64_t>("tensor offset");
    if (t.offset % alignment != 0)
      fail(off_at, "tensor '{}': data offset {} is not aligned to {}", t.name, t.offset, alignment);
    return t;
  }

  // The data section starts at the first aligned offset after the infos;
  // every tensor's bytes must lie inside the file.
  void place_tensor_data(GgufFile& out, const std::vector<uint64_t>& info_offsets) const {
    uint64_t data_offset = (pos_ + out.alignment_ - 1) / out.alignment_ * out.alignment_;
    if (!out.tensors_.empty() && data_offset > size_)
      fail(pos_, "data section starts at {} past the end of the file ({} bytes)", data_offset, size_);
    out.data_offset_ = data_offset;
    for (size_t i = 0; i < out.tensors_.size(); ++i) {
      GgufTensor& t = out.tensors_[i];
      uint64_t avail = size_ - data_offset;
      if (t.offset > avail || t.num_bytes > avail - t.offset)
        fail(info_offsets[i], "tensor '{}': data [{}, {}) lies past the end of the file ({} bytes)",
             t.name, data_offset + t.offset, data_offset + t.offset + t.num_bytes, size_);
      t.data = data_ + data_offset + t.offset;
    }
  }

  // Each tensor's bytes, for its type and shape, must end before the next
  // tensor's begin: a type or shape changed in the table (Q4_K relabelled
  // F16 needs 3.6x the bytes) would otherwise read its neighbours' data as
  // its own and load "fine" with garbage weights.
  void check_regions(const GgufFile& f, const std::vector<uint64_t>& info_offsets) const {
    std::vector<size_t> order(f.tensors_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return f.tensors_[a].offset < f.tensors_[b].offset; });
    for (size_t k = 0; k + 1 < order.size(); ++k) {
      const GgufTensor& t = f.tensors_[order[k]];
      const GgufTensor& next = f.tensors_[order[k + 1]];
      if (t.offset + t.num_bytes > next.offset)
        fail(info_offsets[order[k]],
             "tensor '{}': a {} {} needs {} bytes from data offset {}, past the start of tensor '{}' at {} "
             "(a wrong type or shape?)",
             t.name, dtype_info(t.dtype).name, t.shape_string(), t.num_bytes, t.offset, next.name, next.offset);
    }
  }

 private:
  const uint8_t* data_;
  size_t size_;
  uint64_t pos_ = 0;
  uint64_t num_values_ = 0;  // metadata values read so far (kMaxMetadataValues)
  std::string path_;
};

int64_t GgufTensor::num_elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::string GgufTensor::shape_string() const {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

const uint8_t* GgufTensor::slice(int64_t i, int64_t n) const {
  KVLM_ASSERT(n > 0 && i >= 0 && i < n && dims.back() % n == 0, "slice index out of range");
  if (!slices.empty()) {
    KVLM_ASSERT(static_cast<int64_t>(slices.size()) == n, "a sliced tensor's own slices only");
    return slices[static_cast<size_t>(i)];
  }
  return data + static_cast<size_t>(i) * (num_bytes / static_cast<size_t>(n));
}

std::vector<std::pair<const uint8_t*, size_t>> GgufTensor::byte_ranges() const {
  if (slices.empty()) return {{data, num_bytes}};
  std::vector<std::pair<const uint8_t*, size_t>> ranges;
  for (const uint8_t* s : slices) ranges.emplace_back(s, num_bytes / slices.size());
  return ranges;
}

std::unique_ptr<GgufFile> GgufFile::from_parts(std::string source, Metadata metadata, std::vector<GgufTensor> tensors,
                                               std::unique_ptr<TensorOwner> owner) {
  auto out = std::unique_ptr<GgufFile>(new GgufFile());
  out->path_ = std::move(source);
  out->version_ = 3;
  out->metadata_ = std::move(metadata);
  out->owner_ = std::move(owner);
  for (GgufTensor& t : tensors) {
    if (!out->tensor_index_.emplace(t.name, out->tensors_.size()).second)
      throw_error(ErrorCode::kCorrupt, "{}: duplicate tensor name '{}'", out->path_, t.name);
    out->tensors_.push_back(std::move(t));
  }
  return out;
}

std::unique_ptr<GgufFile> GgufFile::open(const std::string& path) {
  auto file = MappedFile::open(path);
  GgufParser parser(file->data(), file->size(), path);
  return parser.parse(std::move(file));
}

const GgufTensor* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensor& GgufFile::require_tensor(std::string_view name) const {
  const GgufTensor* t = find_tensor(name);
  if (t == nullptr) throw_error(ErrorCode::kCorrupt, "{}: missing tensor '{}'", path(), name);
  return *t;
}

}  // namespace kvlm
