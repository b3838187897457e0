// The model forward pass against llama.cpp's goldens, through the real
// `kvlm logits`, `kvlm run` and `kvlm perplexity` commands.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_path.h"
#include "support/test_support.h"

namespace kvlm::model_golden_test {

using nlohmann::json;

json load_json(const std::string& path) {
  std::ifstream f(path);
  return json::parse(f);
}

// Sum of squared differences over the sum of squares of the reference.
double nmse(const json& got, const json& ref) {
  double num = 0, den = 0;
  EXPECT_EQ(got.size(), ref.size());
  for (size_t r = 0; r < std::min(got.size(), ref.size()); ++r) {
    EXPECT_EQ(got[r].size(), ref[r].size());
    for (size_t i = 0; i < std::min(got[r].size(), ref[r].size()); ++i) {
      double a = got[r][i].get<double>(), b = ref[r][i].get<double>();
      num += (a - b) * (a - b);
      den += b * b;
    }
  }
  return num / den;
}

std::string join_ids(const json& tokens) {
  std::string s;
  for (const auto& t : tokens) s += (s.empty() ? "" : ",") + std::to_string(t.get<int>());
  return s;
}

json run_logits(const std::string& model, const json& tokens, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args = {"logits", "-m", model, "--tokens", join_ids(tokens)};
  args.insert(args.end(), extra.begin(), extra.end());
  auto r = test::run_kvlm(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  json out = json::parse(r.out);
  EXPECT_EQ(out["tokens"], tokens);
  return out["logits"];
}

struct QuantCase {
  const char* type;
};

// ctest runs these goldens once more per CPU path, with KVLM_CPU_PATH set for
// the kvlm children (tests/CMakeLists.txt); a path this CPU lacks is skipped.
void skip_unless_cpu_path_runs(bool* skip) {
  const char* env = std::getenv("KVLM_CPU_PATH");
  *skip = false;
  if (env == nullptr || *env == '\0') return;
  const std::optional<CpuPath> path = parse_cpu_path(env);
  ASSERT_TRUE(path.has_value()) << "KVLM_CPU_PATH=" << env;
  *skip = !cpu_path_supported(*path);
}

#define KVLM_SKIP_UNLESS_CPU_PATH_RUNS()                                     \
  do {                                                                       \
    bool skip = false;                                                       \
    skip_unless_cpu_path_runs(&skip);                                        \
    if (skip) GTEST_SKIP() << "this CPU cannot run KVLM_CPU_PATH's kernels"; \
  } while (0)

class SynthTinyLogits : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { KVLM_SKIP_UNLESS_CPU_PATH_RUNS(); }
};

class ModelGolden : public ::testing::Test {
 protected:
  void SetUp() override { KVLM_SKIP_UNLESS_CPU_PATH_RUNS(); }
};

TEST_P(SynthTinyLogits, MatchesGolden) {
  const std::string type = GetParam();
  json golden = load_json(test::shared_path("golden/synth-tiny-" + type + ".logits.json"));
  json golden_f32 = load_json(test::shared_path("golden/synth-tiny-F32.logits.json"));
  json got = run_logits(test::shared_path("models/synth-tiny-" + type + ".gguf"), golden["tokens"]);
  double to_own = nmse(got, golden["logits"]);
  double to_f32 = nmse(got, golden_f32["logits"]);
  RecordProperty("nmse_to_golden", std::to_string(to_own));
  if (type == "F32" || type == "F16") {
    EXPECT_LT(to_own, 1e-6);
  } else {
    // The golden's own distance from F32 is the quantization error itself;
    // a correct decoder lands far closer to its type's golden than that.
    double golden_error = nmse(golden["logits"], golden_f32["logits"]);
    EXPECT_LT(to_own, golden_error) << "type " << type;
    EXPECT_LT(to_f32, 1.5 * golden_error) << "type " << type;
  }
  std::printf("synth-tiny-%s: NMSE to its golden %.3g, to the F32 golden %.3g\n", type.c_str(), to_own, to_f32);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, SynthTinyLogits,
                         ::testing::Values("F32", "F16", "Q8_0", "Q6_K", "Q4_K", "Q4_0"));

TEST_F(ModelGolden, Qwen2Logits) {
  json golden = load_json(test::shared_path("golden/synth-qwen2-F32.logits.json"));
  json got = run_logits(test::shared_path("models/synth-qwen2-F32.gguf"), golden["tokens"]);
  EXPECT_LT(nmse(got, golden["logits"]), 1e-6);
}

// Bit for bit: a token's logits do not depend on how its sequence was split
// into steps (stories260K's FFN width, 172, is not a multiple of the SIMD width).
TEST_F(ModelGolden, BatchedLogitsEqualOneAtATime) {
  json golden = load_json(test::shared_path("golden/synth-tiny-F32.logits.json"));
  for (const char* file : {"models/synth-tiny-F32.gguf", "models/stories260K.gguf", "models/synth-gemma2-F32.gguf"}) {
    std::string model = test::shared_path(file);
    json single = run_logits(model, golden["tokens"]);
    json batched = run_logits(model, golden["tokens"], {"--batched"});
    EXPECT_TRUE(batched == single) << file << ": NMSE " << nmse(batched, single);
  }
}

// The other KV types through the real commands: BF16 and Q8_0 storage round
// keys and values (BF16 also the query and the softmax weights, attention.h),
// so their logits sit near the golden, not on it; batching still changes no
// bit. Measured NMSE on synth-tiny: f16 3e-8, bf16 5e-6, q8_0 4e-5, q4_0
// 1.3e-2 (4-bit keys and values each carry about 9% of their size in
// rounding: a step is an eighth of a block's largest element).
TEST_F(ModelGolden, RoundedKvTypesStayNearTheGoldenAndBatchInvariant) {
  json golden = load_json(test::shared_path("golden/synth-tiny-F32.logits.json"));
  const std::string model = test::shared_path("models/synth-tiny-F32.gguf");
  for (const char* kv : {"bf16", "q8_0", "q4_0"}) {
    json single = run_logits(model, golden["tokens"], {"--kv-type", kv});
    EXPECT_LT(nmse(single, golden["logits"]), std::string(kv) == "q4_0" ? 3e-2 : 2e-4) << kv;
    EXPECT_GT(nmse(single, golden["logits"]), 1e-7) << kv << ": the KV type changed nothing; was it used?";
    json batched = run_logits(model, golden["tokens"], {"--kv-type", kv, "--batched"});
    EXPECT_TRUE(batched == single) << kv << ": NMSE " << nmse(batched, single);
  }
}

double stories_perplexity(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"perplexity", "-m", test::shared_path("models/stories260K.gguf"), "-f",
                                   test::shared_path("text/tinystories_sample.txt"), "-c", "256"};
  args.insert(args.end(), extra.begin(), extra.end());
  auto r = test::run_kvlm(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::smatch m;
  if (!std::regex_search(r.out, m, std::regex("PPL = ([0-9.]+) \\+/- ([0-9.]+)\\n$"))) {
    ADD_FAILURE() << r.out;
    return 0;
  }
  return std::stod(m[1].str());
}

// stories260K's head size, 8, takes BF16's element-by-element chain on every
// path: its perplexity stays within 0.5% of F16 KV's.
TEST_F(ModelGolden, StoriesPerplexityWithBf16Kv) {
  const double f16 = stories_perplexity({"--chunks", "3"});
  EXPECT_NEAR(stories_perplexity({"--chunks", "3", "--kv-type", "bf16"}), f16, f16 * 0.005);
}

TEST_F(ModelGolden, StoriesGreedyMatchesEveryToken) {
  std::ifstream f(test::shared_path("golden/stories260K-greedy.jsonl"));
  std::string line;
  int num_prompts = 0;
  while (std::getline(f, line)) {
    json g = json::parse(line);
    std::string prompt = g["prompt"];
    SCOPED_TRACE(prompt);
    auto r = test::run_kvlm({"run", "-m", test::shared_path("models/stories260K.gguf"), "-p", prompt,
                             "-n", std::to_string(g["steps"].size()), "--temp", "0", "--show-ids"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.err, m, std::regex("ids: ([0-9 ]+)"))) << r.err;
    std::istringstream ids(m[1].str());
    std::vector<int> got;
    for (int id; ids >> id;) got.push_back(id);
    std::vector<int> want;
    for (const auto& s : g["steps"]) want.push_back(s["token"].get<int>());
    EXPECT_EQ(got, want);
    EXPECT_EQ(r.out, g["text"].get<std::string>() + "\n");
    ++num_prompts;
  }
  EXPECT_EQ(num_prompts, 5);
}

TEST_F(ModelGolden, StoriesPerplexity) {
  auto r = test::run_kvlm({"perplexity", "-m", test::shared_path("models/stories260K.gguf"), "-f",
                           test::shared_path("text/tinystories_sample.txt"), "-c", "256"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex("PPL = ([0-9.]+) \\+/- ([0-9.]+)\\n$"))) << r.out;
  double ppl = std::stod(m[1].str());
  EXPECT_NEAR(ppl, 4.1202, 4.1202 * 0.005) << r.out;
}

TEST(Cli, ErrorsAreOneLineAndNonZero) {
  auto r = test::run_kvlm({"logits", "-m", "/nonexistent/model.gguf", "--tokens", "1"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("/nonexistent/model.gguf"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  r = test::run_kvlm({"run", "--no-such-flag"});
  EXPECT_NE(r.exit_code, 0);
  r = test::run_kvlm({"frobnicate"});
  EXPECT_NE(r.exit_code, 0);
  r = test::run_kvlm({"logits", "-m", test::shared_path("models/stories260K.gguf"), "--tokens", "1,99999"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("outside the vocabulary"), std::string::npos) << r.err;
}

// A forced kernel path that is unknown, or that this CPU cannot run, is
// refused with one line naming the variable, never a crash (SIGILL).
TEST(Cli, UnknownOrUnsupportedCpuPathIsRefused) {
  const char* old = std::getenv("KVLM_CPU_PATH");
  const std::string saved = old != nullptr ? old : "";
  std::vector<std::string> bad = {"avx1024"};
  for (CpuPath p : {CpuPath::kAvx2, CpuPath::kAvxVnni, CpuPath::kAvx512}) {
    if (!cpu_path_supported(p)) bad.push_back(cpu_path_name(p));
  }
  for (const std::string& name : bad) {
    ::setenv("KVLM_CPU_PATH", name.c_str(), 1);
    auto r = test::run_kvlm({"logits", "-m", test::shared_path("models/stories260K.gguf"), "--tokens", "1"});
    EXPECT_EQ(r.exit_code, 1) << name << ": " << r.err;
    EXPECT_NE(r.err.find("KVLM_CPU_PATH=" + name), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  if (old != nullptr) {
    ::setenv("KVLM_CPU_PATH", saved.c_str(), 1);
  } else {
    ::unsetenv("KVLM_CPU_PATH");
  }
}

}  // namespace kvlm::model_golden_test

namespace kvlm::model_golden_test {

TEST_F(ModelGolden, Gpt2Logits) {
  json golden = load_json(test::shared_path("golden/synth-gpt2-F16.logits.json"));
  json got = run_logits(test::shared_path("models/synth-gpt2-F16.gguf"), golden["tokens"]);
  EXPECT_LT(nmse(got, golden["logits"]), 1e-6);
}

TEST_F(ModelGolden, Gemma2Logits) {
  // 48 positions with a window of 8: the window matters.
  json golden = load_json(test::shared_path("golden/synth-gemma2-F32.logits.json"));
  json got = run_logits(test::shared_path("models/synth-gemma2-F32.gguf"), golden["tokens"]);
  EXPECT_LT(nmse(got, golden["logits"]), 1e-6);
}

}  // namespace kvlm::model_golden_test
