// GGUF reader on the real files of ../shared and on broken copies: every
// malformed file is refused with kvlm::Error naming the offset, never a crash.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "common/error.h"
#include "common/mapped_file.h"
#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "support/test_support.h"

namespace kvlm {
namespace {

std::string write_bytes(const std::vector<uint8_t>& bytes, const std::string& name) {
  std::string path = test::temp_dir() + "/" + name;
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return path;
}

std::vector<uint8_t> file_bytes(const std::string& path) {
  std::string s = read_file_bytes(path);
  return std::vector<uint8_t>(s.begin(), s.end());
}

// Opens `bytes` as a GGUF file; returns the error it was refused with.
std::optional<Error> open_error(const std::vector<uint8_t>& bytes, const std::string& name = "bad.gguf") {
  std::string path = write_bytes(bytes, name);
  try {
    GgufFile::open(path);
  } catch (const Error& e) {
    return e;
  }
  return std::nullopt;
}

// A small valid file: two metadata keys and two F32 tensors.
GgufWriter small_writer() {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.block_count", 1);
  std::vector<uint8_t> a(4 * 8 * 2, 1), b(4 * 8, 2);
  w.add_tensor("a", {8, 2}, DType::kF32, a);
  w.add_tensor("b", {8}, DType::kF32, b);
  return w;
}

template <typename T>
void poke(std::vector<uint8_t>& bytes, size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof(T));
}

// Byte offsets inside small_writer()'s file.
constexpr size_t kTensorCountAt = 8;
constexpr size_t kKvCountAt = 16;
constexpr size_t kFirstKeyLenAt = 24;
// key "general.architecture" (20 bytes) -> its type at 24 + 8 + 20.
constexpr size_t kFirstTypeAt = 52;

TEST(GgufReal, Stories260K) {
  auto f = GgufFile::open(test::shared_path("models/stories260K.gguf"));
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->tensors().size(), 48u);
  EXPECT_EQ(f->metadata().entries().size(), 19u);
  EXPECT_EQ(f->metadata().require_string("general.architecture"), "llama");
  EXPECT_EQ(f->metadata().require_int("llama.context_length"), 2048);
  EXPECT_EQ(f->metadata().require_string_array("tokenizer.ggml.tokens").size(), 512u);
  EXPECT_NEAR(f->metadata().require_float("llama.attention.layer_norm_rms_epsilon"), 1e-5, 1e-9);
  const GgufTensor& emb = f->require_tensor("token_embd.weight");
  EXPECT_EQ(emb.dims, (std::vector<int64_t>{64, 512}));
  EXPECT_EQ(emb.dtype, DType::kF32);
  EXPECT_EQ(emb.num_bytes, 64u * 512 * 4);
  EXPECT_EQ(f->data_offset() % f->alignment(), 0u);
}

TEST(GgufReal, EveryModelAndVocabOpens) {
  const char* files[] = {
      "models/llama-2-tiny-random.gguf", "models/synth-tiny-F32.gguf", "models/synth-tiny-F16.gguf",
      "models/synth-tiny-Q8_0.gguf", "models/synth-tiny-Q4_0.gguf", "models/synth-tiny-Q4_K.gguf",
      "models/synth-tiny-Q6_K.gguf", "models/synth-gpt2-F16.gguf", "models/synth-qwen2-F32.gguf",
      "models/synth-gemma2-F32.gguf", "vocab/ggml-vocab-gpt-2.gguf", "vocab/ggml-vocab-llama-spm.gguf",
      "vocab/ggml-vocab-phi-3.gguf", "vocab/ggml-vocab-deepseek-coder.gguf",
      "vocab/ggml-vocab-falcon.gguf", "vocab/ggml-vocab-starcoder.gguf"};
  for (const char* rel : files) {
    SCOPED_TRACE(rel);
    auto f = GgufFile::open(test::shared_path(rel));
    EXPECT_TRUE(f->metadata().has("tokenizer.ggml.tokens"));
  }
}

TEST(GgufReal, QuantizedTypesAreRead) {
  struct Case { const char* file; DType dtype; };
  for (auto c : {Case{"models/synth-tiny-Q8_0.gguf", DType::kQ8_0}, Case{"models/synth-tiny-Q4_0.gguf", DType::kQ4_0},
                 Case{"models/synth-tiny-Q4_K.gguf", DType::kQ4_K}, Case{"models/synth-tiny-Q6_K.gguf", DType::kQ6_K},
                 Case{"models/synth-tiny-F16.gguf", DType::kF16}}) {
    auto f = GgufFile::open(test::shared_path(c.file));
    const GgufTensor& q = f->require_tensor("blk.0.attn_q.weight");
    EXPECT_EQ(q.dtype, c.dtype) << c.file;
    EXPECT_EQ(q.num_bytes, row_bytes(c.dtype, 256) * 256) << c.file;
  }
}

TEST(GgufWriter, RoundTrip) {
  auto path = write_bytes(small_writer().serialize(), "small.gguf");
  auto f = GgufFile::open(path);
  EXPECT_EQ(f->metadata().require_int("llama.block_count"), 1);
  ASSERT_EQ(f->tensors().size(), 2u);
  EXPECT_EQ(f->tensors()[1].data[0], 2);
  EXPECT_EQ(f->tensors()[0].num_bytes, 64u);
}

// A streamed tensor lands byte for byte where serialize() puts a stored one.
TEST(GgufWriter, StreamingMatchesSerialize) {
  GgufWriter stored = small_writer();
  std::vector<uint8_t> big(3 * row_bytes(DType::kQ8_0, 64));
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 7);
  stored.add_tensor("big", {64, 3}, DType::kQ8_0, big);
  GgufWriter streamed = small_writer();
  streamed.declare_tensor("big", {64, 3}, DType::kQ8_0);
  const std::string path = test::temp_dir() + "/streamed.gguf";
  const uint64_t size = streamed.write_streaming(path, [&](size_t index, const GgufWriter::ByteSinkFn& sink) {
    EXPECT_EQ(index, 0u);
    sink(big.data(), 5);  // pieces of any size
    sink(big.data() + 5, big.size() - 5);
  });
  const auto want = stored.serialize();
  EXPECT_EQ(size, want.size());
  EXPECT_EQ(test::read_file(path), std::string(want.begin(), want.end()));
}

TEST(GgufCorrupt, MissingFileIsNotFound) {
  try {
    GgufFile::open("/nonexistent/model.gguf");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  }
}

void expect_corrupt(const std::vector<uint8_t>& bytes, const std::string& fragment) {
  auto err = open_error(bytes);
  ASSERT_TRUE(err.has_value()) << "accepted a file that should fail with: " << fragment;
  EXPECT_EQ(err->code(), ErrorCode::kCorrupt) << err->what();
  EXPECT_NE(std::string(err->what()).find(fragment), std::string::npos) << err->what();
  EXPECT_NE(std::string(err->what()).find("offset"), std::string::npos) << err->what();
}

TEST(GgufCorrupt, HeaderFields) {
  const auto good = small_writer().serialize();
  auto b = good;
  b[0] = 'X';
  expect_corrupt(b, "bad magic");
  b = good;
  poke<uint32_t>(b, 4, 1);
  expect_corrupt(b, "unsupported GGUF version 1");
  b = good;
  poke<uint64_t>(b, kTensorCountAt, 1ull << 40);
  expect_corrupt(b, "tensor count");
  b = good;
  poke<uint64_t>(b, kKvCountAt, ~0ull);
  expect_corrupt(b, "metadata count");
  b = good;
  poke<uint64_t>(b, kFirstKeyLenAt, 1ull << 50);
  expect_corrupt(b, "string length");
  b = good;
  poke<uint32_t>(b, kFirstTypeAt, 77);
  expect_corrupt(b, "unknown value type 77");
}

TEST(GgufCorrupt, ArraysAndValues) {
  GgufWriter w = small_writer();
  w.set_i32_array("arr", {1, 2, 3});
  w.set_bool("flag", true);
  auto good = w.serialize();
  // Find the array's count field: after key "arr" (8 + 3 bytes), type u32, elem type u32.
  std::string needle = "arr";
  size_t at = std::search(good.begin(), good.end(), needle.begin(), needle.end()) - good.begin();
  size_t count_at = at + 3 + 4 + 4;
  auto b = good;
  poke<uint64_t>(b, count_at, 1ull << 40);
  expect_corrupt(b, "cannot fit");
  b = good;
  // 3 i32 items take 12 bytes; a count whose items fit only as single bytes
  // is refused too (the bytes left cover about 40 one-byte items, not 4-byte ones).
  poke<uint64_t>(b, count_at, (good.size() - count_at - 8) / 2);
  expect_corrupt(b, "cannot fit");
  b = good;
  poke<uint32_t>(b, at + 3 + 4, 99);
  expect_corrupt(b, "unknown array element type 99");
  needle = "flag";
  at = std::search(good.begin(), good.end(), needle.begin(), needle.end()) - good.begin();
  b = good;
  b[at + 4 + 4] = 7;
  expect_corrupt(b, "neither 0 nor 1");
}

// Many one-byte values cost far more memory than file bytes: the file-wide
// cap on metadata values refuses them before the memory is spent.
TEST(GgufCorrupt, TooManyMetadataValuesAreRefused) {
  GgufWriter w = small_writer();
  w.set_i32_array("arr", {1, 2, 3});
  auto good = w.serialize();
  std::string needle = "arr";
  size_t at = std::search(good.begin(), good.end(), needle.begin(), needle.end()) - good.begin();
  size_t elem_at = at + 3 + 4, count_at = elem_at + 4;
  // The same array as 9,000,000 u8 items, every byte present in the file.
  constexpr uint64_t kCount = 9'000'000;
  std::vector<uint8_t> b(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(count_at + 8));
  poke<uint32_t>(b, elem_at, 0);  // u8
  poke<uint64_t>(b, count_at, kCount);
  b.resize(b.size() + kCount, 0);
  b.insert(b.end(), good.begin() + static_cast<std::ptrdiff_t>(count_at + 8 + 12), good.end());
  auto e = open_error(b);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->code(), ErrorCode::kCorrupt);
  EXPECT_NE(std::string(e->what()).find("more than 8388608 metadata values"), std::string::npos) << e->what();
}

TEST(GgufCorrupt, TensorInfos) {
  // Tensor "a": name length at the start of the tensor infos.
  auto good = small_writer().serialize();
  std::string name = std::string("\x01\0\0\0\0\0\0\0", 8) + "a";
  size_t at = std::search(good.begin(), good.end(), name.begin(), name.end()) - good.begin();
  size_t dims_at = at + 9, dim0_at = dims_at + 4, type_at = dim0_at + 16, offset_at = type_at + 4;
  auto b = good;
  poke<uint32_t>(b, dims_at, 0);
  expect_corrupt(b, "0 dimensions");
  b = good;
  poke<uint32_t>(b, dims_at, 9);
  expect_corrupt(b, "9 dimensions");
  b = good;
  poke<uint64_t>(b, dim0_at, 1ull << 62);
  expect_corrupt(b, "absurd");
  b = good;
  poke<uint64_t>(b, dim0_at, 1ull << 30);  // plausible but past the end of the file
  expect_corrupt(b, "past the end of the file");
  b = good;
  poke<uint32_t>(b, type_at, 1234);
  expect_corrupt(b, "unknown tensor type 1234");
  b = good;
  poke<uint64_t>(b, offset_at, 3);
  expect_corrupt(b, "not aligned");
  b = good;
  poke<uint64_t>(b, offset_at, 1ull << 40);
  expect_corrupt(b, "past the end of the file");
  b = good;
  poke<uint32_t>(b, type_at, 8);  // Q8_0 needs rows of 32
  expect_corrupt(b, "not a multiple");
}

TEST(GgufCorrupt, UnsupportedTensorTypeNamesIt) {
  auto good = small_writer().serialize();
  std::string name = std::string("\x01\0\0\0\0\0\0\0", 8) + "a";
  size_t at = std::search(good.begin(), good.end(), name.begin(), name.end()) - good.begin();
  auto b = good;
  poke<uint32_t>(b, at + 9 + 4 + 16, 3);  // Q4_1
  auto err = open_error(b);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code(), ErrorCode::kUnsupported);
  EXPECT_NE(std::string(err->what()).find("Q4_1"), std::string::npos) << err->what();
}

TEST(GgufCorrupt, EveryTruncationOfARealHeaderIsRefused) {
  auto bytes = file_bytes(test::shared_path("models/stories260K.gguf"));
  auto f = GgufFile::open(test::shared_path("models/stories260K.gguf"));
  const size_t header_end = f->data_offset();
  // Every cut inside the first KiB, then every 97th byte to the end of the header,
  // then a few inside the tensor data.
  std::vector<size_t> cuts;
  for (size_t n = 0; n < 1024; ++n) cuts.push_back(n);
  for (size_t n = 1024; n < header_end; n += 97) cuts.push_back(n);
  for (size_t n : {header_end + 1, bytes.size() / 2, bytes.size() - 1}) cuts.push_back(n);
  for (size_t n : cuts) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + n);
    auto err = open_error(cut, "truncated.gguf");
    ASSERT_TRUE(err.has_value()) << "accepted a file truncated to " << n << " bytes";
    EXPECT_EQ(err->code(), ErrorCode::kCorrupt) << n << ": " << err->what();
  }
}

TEST(GgufCorrupt, RandomHeaderMutationsNeverCrash) {
  auto bytes = file_bytes(test::shared_path("models/stories260K.gguf"));
  auto f = GgufFile::open(test::shared_path("models/stories260K.gguf"));
  const size_t header_end = f->data_offset();
  std::mt19937 rng(1234);
  int refused = 0;
  for (int i = 0; i < 300; ++i) {
    auto b = bytes;
    int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) b[rng() % header_end] = static_cast<uint8_t>(rng());
    // Either it opens (the mutation hit a harmless byte, e.g. inside a token
    // string) or it is refused with a kvlm::Error; anything else fails the test.
    auto err = open_error(b, "mutated.gguf");
    if (err) ++refused;
  }
  EXPECT_GT(refused, 0);
}

}  // namespace
}  // namespace kvlm
