// Shared helpers for kvlm tests: paths into ../shared (a missing file fails
// the test with its path, never skips), and running the kvlm binary.
#pragma once

#include <string>
#include <vector>

namespace kvlm::test {

// Absolute path of `rel` under ../shared. Fails the calling test (ADD_FAILURE
// + throws) if the file does not exist, naming the full path.
std::string shared_path(const std::string& rel);

// Path of the built kvlm binary.
std::string kvlm_binary();

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs the kvlm binary with `args` (no shell; each arg passed verbatim).
CommandResult run_kvlm(const std::vector<std::string>& args);

// A fresh temporary directory removed at process exit is not needed: tests
// create files under this path with unique names.
std::string temp_dir();

}  // namespace kvlm::test
