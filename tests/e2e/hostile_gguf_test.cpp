// Hostile model files: each defect a relabelled or corrupted GGUF once showed,
// through the `kvlm` command, then a bounded generator of mutated files
// (KVLM_HOSTILE_COUNT of them, 200 by default) loaded in process: each gives
// a kvlm::Error or a model that runs a forward pass, never a sanitizer report,
// a signal or another exception type.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "hostile_gguf.h"
#include "hostile_util.h"
#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "support/test_support.h"

namespace kvlm::hostile_gguf_test {

using Json = nlohmann::json;

std::string model_bytes(const std::string& name) { return test::read_file(test::shared_path("models/" + name)); }

// Fills a tensor's data with one float value (the tensor must be F32).
void fill_f32(std::string& bytes, const std::string& tensor, float value) {
  const auto l = test::gguf_layout(bytes);
  const auto& t = test::layout_tensor(l, tensor);
  const uint64_t at = l.data_offset + test::get_u64(bytes, t.offset_at);
  const uint64_t n = test::get_u64(bytes, t.dim_at[0]);
  for (uint64_t i = 0; i < n; ++i) std::memcpy(bytes.data() + at + 4 * i, &value, 4);
}

TEST(HostileGguf, RetypedTensorIsRefusedNamingIt) {
  for (const char* model : {"synth-tiny-Q4_K.gguf", "synth-tiny-Q6_K.gguf"}) {
    std::string bytes = model_bytes(model);
    test::put_u32(bytes, test::layout_tensor(test::gguf_layout(bytes), "blk.0.attn_k.weight").type_at, 1);  // F16
    const auto r = test::run_kvlm({"logits", "-m", test::write_temp_file(std::string("retyped-") + model, bytes),
                                   "--tokens", "1,2,3", "-t", "1"});
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("blk.0.attn_k.weight"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("wrong type or shape"), std::string::npos) << r.err;
  }
}

// Every dtype kvlm reads (and Q8_K, an activation type) relabelled onto every
// other's bytes, for a matmul weight and a norm weight: a clean error or a
// model that runs.
TEST(HostileGguf, EveryDtypeRelabelledLoadsOrFailsCleanly) {
  const uint32_t ggml_types[] = {0, 1, 30, 8, 2, 12, 14, 15};
  for (const char* model : {"synth-tiny-F32.gguf", "synth-tiny-Q4_K.gguf", "synth-tiny-Q8_0.gguf"}) {
    const std::string original = model_bytes(model);
    const auto layout = test::gguf_layout(original);
    for (const char* tensor : {"blk.0.attn_k.weight", "blk.0.ffn_down.weight", "blk.0.attn_norm.weight", "token_embd.weight"}) {
      for (uint32_t type : ggml_types) {
        std::string bytes = original;
        test::put_u32(bytes, test::layout_tensor(layout, tensor).type_at, type);
        const std::string outcome = test::load_and_run(test::write_temp_file("relabelled.gguf", bytes));
        EXPECT_TRUE(outcome == "ok" || outcome == "error") << model << " " << tensor << " as type " << type << ": " << outcome;
      }
    }
  }
}

// NaN and Inf activations go through every quantized matmul (the Q8_K
// quantizer once searched past its block for a max that NaN hid) and come
// out as null logits with a warning.
TEST(HostileGguf, NonFiniteActivationsGiveNullLogits) {
  for (const char* model : {"synth-tiny-Q4_K.gguf", "synth-tiny-Q6_K.gguf", "synth-tiny-Q8_0.gguf", "synth-tiny-Q4_0.gguf"}) {
    for (float poison : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
      SCOPED_TRACE(std::string(model) + (std::isnan(poison) ? " NaN" : " Inf"));
      std::string bytes = model_bytes(model);
      fill_f32(bytes, "blk.0.attn_norm.weight", poison);
      const auto r = test::run_kvlm({"logits", "-m", test::write_temp_file("poisoned.gguf", bytes), "--tokens", "1,2,3",
                                     "-t", "1", "--batched"});
      ASSERT_EQ(r.exit_code, 0) << r.err;
      const Json j = Json::parse(r.out);
      EXPECT_TRUE(j["logits"][2][0].is_null()) << r.out.substr(0, 200);
      EXPECT_NE(r.err.find("NaN or infinite (written as null)"), std::string::npos) << r.err;
    }
  }
}

TEST(HostileGguf, ErrorMessagesEscapeBytesFromTheFile) {
  std::string bytes = model_bytes("stories260K.gguf");
  const auto l = test::gguf_layout(bytes);
  const auto& t = l.tensors[0];
  bytes[t.name_at + 8 + 1] = '\0';
  bytes[t.name_at + 8 + 2] = '\xff';
  test::put_u32(bytes, t.type_at, 99);  // no such ggml type
  const auto r = test::run_kvlm({"inspect", "-m", test::write_temp_file("named.gguf", bytes)});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("\\x00\\xff"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("unknown tensor type 99"), std::string::npos) << r.err;  // the message goes on past the NUL
}

TEST(HostileGguf, NonIntegerAlignmentSaysSo) {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_f32("general.alignment", 32.5f);
  w.add_tensor("x", {32}, DType::kF32, std::vector<uint8_t>(128, 0));
  const std::string path = test::temp_dir() + "/float-alignment.gguf";
  w.write(path);
  try {
    GgufFile::open(path);
    ADD_FAILURE() << "a float general.alignment was accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("general.alignment must be an unsigned integer, not a f32"), std::string::npos) << what;
    EXPECT_EQ(what.find("offset 0:"), std::string::npos) << what;
  }
}

// The generator. The count is KVLM_HOSTILE_COUNT (default 200); the files are
// mutated copies of the small models in ../shared.
TEST(HostileGguf, MutatedFilesLoadCleanlyOrFailWithAnError) {
  const std::vector<std::string> names = {"stories260K.gguf", "synth-tiny-Q4_K.gguf", "synth-tiny-Q6_K.gguf",
                                          "synth-tiny-Q8_0.gguf", "synth-tiny-Q4_0.gguf", "synth-qwen2-F32.gguf",
                                          "synth-gemma2-F32.gguf", "llama-2-tiny-random.gguf", "synth-tiny-F16.gguf"};
  std::vector<std::string> originals;
  for (const auto& n : names) originals.push_back(model_bytes(n));
  const int count = test::hostile_count(200);
  test::MutationStats stats;
  const auto start = std::chrono::steady_clock::now();
  const std::string path = test::temp_dir() + "/mutant.gguf";
  for (int i = 0; i < count; ++i) {
    std::mt19937_64 rng(0x6767ull * 1000003u + static_cast<uint64_t>(i));
    const size_t which = rng() % originals.size();
    std::string kind;
    const std::string bytes = test::mutate_gguf(originals[which], rng, kind);
    test::write_temp_file("mutant.gguf", bytes);
    const std::string outcome = test::load_and_run(path);
    stats.add(kind, outcome);
    EXPECT_TRUE(outcome == "ok" || outcome == "error") << "file " << i << " (" << names[which] << ", " << kind
                                                       << "): " << outcome;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%d mutated GGUF files in %.1f s: %s\n", count, s, stats.summary().c_str());
}

}  // namespace kvlm::hostile_gguf_test
