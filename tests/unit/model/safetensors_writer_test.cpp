// The safetensors writer, read back by the reader: every tensor's name,
// dtype, shape and bytes, and the header's 8-byte alignment.
#include <gtest/gtest.h>

#include <cstring>

#include "model/safetensors.h"
#include "model/safetensors_writer.h"
#include "support/test_support.h"

namespace kvlm {
namespace {

std::vector<uint8_t> bytes_of(size_t n, uint8_t first) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(first + i * 7);
  return v;
}

TEST(SafetensorsWriter, RoundTripsThroughTheReader) {
  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  w.add("z.first", DType::kF32, {2, 3}, bytes_of(24, 1));
  w.add("a.second", DType::kBF16, {5}, bytes_of(10, 50));
  w.add("m.third", DType::kF16, {1, 2, 2}, bytes_of(8, 90));
  const std::string path = test::temp_path("writer.safetensors");
  w.write(path);

  const std::string file = test::read_file(path);
  uint64_t header = 0;
  std::memcpy(&header, file.data(), 8);
  EXPECT_EQ(header % 8, 0u);
  EXPECT_EQ(file.size(), 8 + header + 24 + 10 + 8);

  auto f = SafetensorsFile::open(path);
  ASSERT_EQ(f->tensors().size(), 3u);
  struct Want {
    const char* name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  for (const Want& want : {Want{"z.first", DType::kF32, {2, 3}, bytes_of(24, 1)},
                           Want{"a.second", DType::kBF16, {5}, bytes_of(10, 50)},
                           Want{"m.third", DType::kF16, {1, 2, 2}, bytes_of(8, 90)}}) {
    const SafetensorsTensor* t = f->find(want.name);
    ASSERT_NE(t, nullptr) << want.name;
    EXPECT_EQ(t->dtype, want.dtype) << want.name;
    EXPECT_EQ(t->shape, want.shape) << want.name;
    ASSERT_EQ(t->num_bytes, want.bytes.size()) << want.name;
    EXPECT_EQ(std::memcmp(t->data, want.bytes.data(), t->num_bytes), 0) << want.name;
  }
}

TEST(SafetensorsWriter, EmptyFileIsValid) {
  const std::string path = test::temp_path("empty.safetensors");
  SafetensorsWriter{}.write(path);
  EXPECT_TRUE(SafetensorsFile::open(path)->tensors().empty());
}

}  // namespace
}  // namespace kvlm
