// Helpers for the tokenizer tests: vocabularies from ../shared loaded once.
// (llama.cpp's vocab test vectors: test::read_vocab_cases in support/.)
#pragma once

#include <cstdint>
#include <map>
#include <memory>
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

}  // namespace kvlm::test
