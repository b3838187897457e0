// Helpers for the kvstore tests: records of a chain, fresh directories.
#pragma once

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include "kv/block_hash.h"
#include "kvstore/record.h"
#include "support/test_support.h"

namespace kvlm::test {

// A chain of `n` full blocks of 16 tokens each (seeded), with payloads of
// `num_payload` random bytes; block i's parent is block i-1.
inline std::vector<KvRecord> make_chain(int n, int seed, size_t num_payload = 512) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::vector<KvRecord> out;
  std::optional<BlockHash> parent;
  for (int i = 0; i < n; ++i) {
    KvRecord r;
    for (int t = 0; t < 16; ++t) r.tokens.push_back(static_cast<int32_t>(rng() % 32000));
    r.parent = parent;
    r.hash = hash_block(parent, r.tokens);
    r.payload.resize(num_payload);
    for (auto& b : r.payload) b = static_cast<std::byte>(rng());
    parent = r.hash;
    out.push_back(std::move(r));
  }
  return out;
}

inline std::vector<BlockHash> hashes_of(const std::vector<KvRecord>& records) {
  std::vector<BlockHash> out;
  for (const auto& r : records) out.push_back(r.hash);
  return out;
}

// The pid of a process that has exited (a child, reaped): a temporary file
// named after it is an orphan.
inline pid_t dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

// A new empty directory under the test's temporary directory.
inline std::string fresh_dir(const std::string& name) {
  static int counter = 0;
  std::string dir = temp_dir() + "/" + name + "-" + std::to_string(counter++);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace kvlm::test
