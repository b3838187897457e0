// Helpers for the tokenizer tests: loading vocabularies from ../shared and
// reading llama.cpp's vocab test vectors (.inp/.out pairs).
#pragma once

#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "model/gguf.h"
#include "support/test_support.h"
#include "tokenizer/tokenizer.h"

namespace kvlm::test {

// The tokenizer of a shared GGUF file (e.g. "vocab/ggml-vocab-gpt-2.gguf"),
// loaded once per test binary.
inline const Tokenizer& shared_tokenizer(const std::string& rel) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto it = cache.find(rel);
  if (it == cache.end()) {
    auto gguf = GgufFile::open(shared_path(rel));
    it = cache.emplace(rel, Tokenizer::from_metadata(gguf->metadata())).first;
  }
  return *it->second;
}

inline std::string read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct VocabCase {
  std::string text;
  std::vector<int32_t> expected;
};

// llama.cpp's tests/test-tokenizer-0 format: .inp holds the strings separated
// by "\n__ggml_vocab_test__\n" (after the last one too), .out one line of
// space-separated ids per string (surrounding whitespace ignored).
inline std::vector<VocabCase> read_vocab_cases(const std::string& gguf_rel) {
  const std::string raw = read_file_bytes(shared_path(gguf_rel + ".inp"));
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  for (size_t pos = 0; pos < raw.size();) {
    const size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      inputs.push_back(raw.substr(pos));
      break;
    }
    inputs.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::ifstream out(shared_path(gguf_rel + ".out"));
  std::vector<VocabCase> cases;
  std::string line;
  for (size_t i = 0; std::getline(out, line); ++i) {
    VocabCase c;
    if (i < inputs.size()) c.text = inputs[i];
    std::istringstream ids(line);
    for (int32_t id; ids >> id;) c.expected.push_back(id);
    cases.push_back(std::move(c));
  }
  if (cases.size() != inputs.size()) cases.clear();  // the caller reports the mismatch
  return cases;
}

}  // namespace kvlm::test
