#include "support/test_support.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace kvlm::test {

std::string shared_path(const std::string& rel) {
  std::string path = std::string(KVLM_SHARED_DIR) + "/" + rel;
  if (!std::filesystem::exists(path)) {
    ADD_FAILURE() << "required shared file is missing: " << path;
    throw std::runtime_error("missing shared file: " + path);
  }
  return path;
}

std::string kvlm_binary() { return KVLM_BIN; }

std::string temp_dir() {
  static std::string dir = [] {
    std::string d = (std::filesystem::temp_directory_path() /
                     ("kvlm-test-" + std::to_string(::getpid())))
                        .string();
    std::filesystem::create_directories(d);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(temp_dir(), ec);
    });
    return d;
  }();
  return dir;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) ADD_FAILURE() << "cannot read " << path;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string write_temp_file(const std::string& name, const std::string& bytes) {
  const std::string path = temp_dir() + "/" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::vector<VocabCase> read_vocab_cases(const std::string& gguf_rel) {
  const std::string raw = read_file(shared_path(gguf_rel + ".inp"));
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
  std::istringstream out(read_file(shared_path(gguf_rel + ".out")));
  std::vector<VocabCase> cases;
  std::string line;
  for (size_t i = 0; std::getline(out, line); ++i) {
    VocabCase c;
    if (i < inputs.size()) c.text = inputs[i];
    std::istringstream ids(line);
    for (int32_t id; ids >> id;) c.expected.push_back(id);
    cases.push_back(std::move(c));
  }
  EXPECT_EQ(cases.size(), inputs.size()) << gguf_rel << ": .inp and .out disagree on the number of cases";
  if (cases.size() != inputs.size()) cases.clear();
  return cases;
}

CommandResult run_kvlm(const std::vector<std::string>& args) {
  static int counter = 0;
  std::string base = temp_dir() + "/cmd" + std::to_string(counter++);
  std::string out_path = base + ".out", err_path = base + ".err";
  pid_t pid = ::fork();
  if (pid == 0) {
    int out_fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err_fd = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(out_fd, 1);
    ::dup2(err_fd, 2);
    std::vector<char*> argv;
    std::string bin = kvlm_binary();
    argv.push_back(bin.data());
    std::vector<std::string> copy = args;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(bin.c_str(), argv.data());
    std::_Exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_file(out_path);
  r.err = read_file(err_path);
  std::filesystem::remove(out_path);
  std::filesystem::remove(err_path);
  return r;
}

}  // namespace kvlm::test
