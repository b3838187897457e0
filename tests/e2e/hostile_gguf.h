// The GGUF mutator of the hostile-file tests and the in-process oracle that
// loads a mutant the way `kvlm serve` does (model, tokenizer, one forward pass).
#pragma once

#include <map>
#include <random>
#include <string>

namespace kvlm::test {

// A copy of `original` with one kind of damage: bit flips, a truncation, an
// absurd count or string length, a changed tensor or value type, a changed
// shape, a changed data offset, or non-finite weights. `kind` names it.
std::string mutate_gguf(const std::string& original, std::mt19937_64& rng, std::string& kind);

// "ok" (loaded, tokenized, ran a forward pass), "error" (a kvlm::Error), or
// "exception: <type and what>" for anything else, which is a bug.
std::string load_and_run(const std::string& path);

// Outcomes per mutation kind, for the closing line of the test.
struct MutationStats {
  std::map<std::string, std::map<std::string, int>> counts;
  void add(const std::string& kind, const std::string& outcome) { ++counts[kind][outcome.substr(0, 9)]; }
  std::string summary() const;
};

}  // namespace kvlm::test
