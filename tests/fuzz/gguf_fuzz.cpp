// libFuzzer target: GGUF files (header, metadata, tensor table), then the
// tokenizer and the model built from whatever loads, and a forward pass of a
// few tokens through it. Any file must load or throw kvlm::Error, never read
// outside the mapping, crash or trip a sanitizer.
//
// The harness refuses models above a small size before building them (the
// loader's own limits are for real models, far beyond what keeps a run fast).
// The input is written to a memfd, so the real open()+mmap() path is fuzzed.
//
//   scripts/fuzz.sh 60
//   build-fuzz/fuzz/kvlm_fuzz_gguf -dict=tests/fuzz/gguf.dict CORPUS_DIR
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/error.h"
#include "model/config.h"
#include "model/gguf.h"
#include "model/model.h"
#include "runner/sequence_evaluator.h"
#include "tokenizer/tokenizer.h"

namespace {

int g_fd = -1;

// Every tensor lies inside the file: what the reader promises before any
// kernel reads it.
void check_tensors(const kvlm::GgufFile& g) {
  for (const kvlm::GgufTensor& t : g.tensors()) {
    const uint64_t start = g.data_offset() + t.offset;
    if (start > g.file_size() || t.num_bytes > g.file_size() - start) std::abort();
    if (t.num_elements() < 0) std::abort();
  }
}

void tokenize(const kvlm::GgufFile& g) {
  try {
    auto tok = kvlm::Tokenizer::from_metadata(g.metadata());
    const std::vector<int32_t> ids = tok->encode("Hello world <s> \xe2\x96\x81x\xff", true, true);
    (void)tok->decode(ids);
  } catch (const kvlm::Error&) {
  }
}

// Small enough that one forward pass takes milliseconds under ASan.
bool small(const kvlm::ModelConfig& c) {
  return c.vocab_size <= 4096 && c.dim <= 256 && c.num_layers <= 4 && c.ffn_dim <= 1024 && c.num_heads <= 16 &&
         c.head_dim <= 128 && static_cast<int64_t>(c.vocab_size) * c.dim <= (int64_t{1} << 18);
}

void run_model(std::unique_ptr<kvlm::GgufFile> g, uint32_t salt) {
  const kvlm::ModelConfig config = kvlm::ModelConfig::from_metadata(g->metadata());
  if (!small(config)) return;
  auto model = kvlm::Model::load(std::move(g));
  kvlm::SequenceEvaluator eval(*model, 8);
  const int32_t v = model->config().vocab_size;
  const std::vector<int32_t> tokens = {static_cast<int32_t>(salt % v), static_cast<int32_t>((salt >> 8) % v),
                                       static_cast<int32_t>((salt >> 16) % v)};
  const std::vector<float>& logits = eval.eval(tokens, /*all_logits=*/true);
  if (logits.size() != tokens.size() * static_cast<size_t>(v)) std::abort();
  (void)eval.eval(std::vector<int32_t>{tokens[0]}, /*all_logits=*/false);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_fd = ::memfd_create("kvlm_fuzz_gguf", 0);
  if (g_fd < 0) std::abort();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (::ftruncate(g_fd, 0) != 0 || ::pwrite(g_fd, data, size, 0) != static_cast<ssize_t>(size)) std::abort();
  const std::string path = "/proc/self/fd/" + std::to_string(g_fd);
  uint32_t salt = 0;
  for (size_t i = 0; i < size && i < 64; ++i) salt = salt * 31 + data[size - 1 - i];
  try {
    auto g = kvlm::GgufFile::open(path);
    check_tensors(*g);
    tokenize(*g);
    run_model(std::move(g), salt);
  } catch (const kvlm::Error&) {
  }
  return 0;
}
