// The safetensors reader: tensors read in place from the mapping, and every
// malformed header refused with the file and the reason.
#include <gtest/gtest.h>

#include <cstring>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "model/safetensors.h"
#include "support/test_support.h"

namespace kvlm {
namespace {

// A file of `header` (JSON text) and `data`, the header length first.
std::string file_of(const std::string& header, const std::string& data, const std::string& name) {
  std::string bytes(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);
  return test::write_temp_file(name, bytes + header + data);
}

std::string data_of(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

TEST(Safetensors, ReadsTensorsInPlace) {
  const std::string path = file_of(
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"F32","shape":[2],"data_offsets":[24,32]},)"
      R"("a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})",
      data_of({1, 2, 3, 4, 5, 6, 7, 8}), "ok.safetensors");
  auto f = SafetensorsFile::open(path);
  ASSERT_EQ(f->tensors().size(), 2u);
  const SafetensorsTensor* a = f->find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a->dtype, DType::kF32);
  EXPECT_EQ(a->num_bytes, 24u);
  float last = 0;
  std::memcpy(&last, f->find("b")->data + 4, 4);
  EXPECT_EQ(last, 8.0f);
  EXPECT_EQ(f->find("c"), nullptr);
}

struct BadFile {
  const char* name;
  std::string header;
  std::string expected;  // part of the message
};

class SafetensorsRefuses : public ::testing::TestWithParam<BadFile> {};

TEST_P(SafetensorsRefuses, NamingTheReason) {
  const std::string path = file_of(GetParam().header, data_of({1, 2, 3, 4}), std::string(GetParam().name) + ".st");
  try {
    SafetensorsFile::open(path);
    FAIL() << "opened " << GetParam().name;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(GetParam().expected), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Headers, SafetensorsRefuses,
    ::testing::Values(
        BadFile{"past_end", R"({"a":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}})", "outside the 16 bytes"},
        BadFile{"wrong_size", R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", "16 bytes for 3 F32"},
        BadFile{"overlap", R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                "overlap"},
        BadFile{"dtype", R"({"a":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})", "dtype I64"},
        BadFile{"not_json", R"({"a":)", "not a JSON object"},
        BadFile{"no_offsets", R"({"a":{"dtype":"F32","shape":[4]}})", "no 'data_offsets'"},
        BadFile{"negative", R"({"a":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})", "not an unsigned"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(Safetensors, RefusesAHeaderLongerThanTheFile) {
  std::string bytes(8, '\0');
  const uint64_t n = 1000;
  std::memcpy(bytes.data(), &n, 8);
  const std::string path = test::write_temp_file("long.st", bytes + "{}");
  EXPECT_THROW(SafetensorsFile::open(path), Error);
}

}  // namespace
}  // namespace kvlm
