#include "support/test_support.h"

#include <algorithm>

#include <httplib.h>
#include <nlohmann/json.hpp>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <fcntl.h>
#include <sys/prctl.h>
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

std::string kvlm_binary() {
  // CI's TSan phase runs these tests against a TSan-built kvlm (scripts/test.sh).
  const char* other = std::getenv("KVLM_TEST_BIN");
  return other && *other ? other : KVLM_BIN;
}

std::string temp_dir() {
  // Never destroyed: the atexit handler below runs after function-local
  // statics registered before it are gone, and it still needs the path.
  static const std::string* dir = [] {
    auto* d = new std::string((std::filesystem::temp_directory_path() /
                               ("kvlm-test-" + std::to_string(::getpid())))
                                  .string());
    std::filesystem::create_directories(*d);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(temp_dir(), ec);
    });
    return d;
  }();
  return *dir;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) ADD_FAILURE() << "cannot read " << path;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::pair<std::string, std::string> make_certificate() {
  const std::string dir = temp_dir();
  const std::string cert = dir + "/cert.pem", key = dir + "/key.pem";
  if (!std::filesystem::exists(cert)) {
    const auto r = run_program({"openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                                "-days", "2", "-subj", "/CN=127.0.0.1", "-addext",
                                "subjectAltName=IP:127.0.0.1,DNS:localhost"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
  }
  return {cert, key};
}

std::string temp_path(const std::string& name) {
  const std::string p = temp_dir() + "/" + name;
  std::filesystem::remove_all(p);
  return p;
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

namespace {

// fork + execvp with stdout and stderr to files; returns the child's pid.
int spawn(const std::vector<std::string>& argv, const std::string& out_path, const std::string& err_path) {
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid == 0) {
    // A test process that dies without its destructors (a crash, a kill)
    // must not leave a server behind: the child dies with it.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) std::_Exit(127);
    int out_fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err_fd = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(out_fd, 1);
    ::dup2(err_fd, 2);
    std::vector<std::string> copy = argv;
    std::vector<char*> args;
    for (auto& a : copy) args.push_back(a.data());
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    std::_Exit(127);
  }
  return pid;
}

int wait_exit_code(int pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// What the child has written so far ("" before it has created the file).
std::string read_so_far(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string next_base() {
  static std::atomic<int> counter{0};
  return temp_dir() + "/cmd" + std::to_string(counter++);
}

}  // namespace

CommandResult run_program(const std::vector<std::string>& argv) {
  const std::string base = next_base();
  const std::string out_path = base + ".out", err_path = base + ".err";
  CommandResult r;
  r.exit_code = wait_exit_code(spawn(argv, out_path, err_path));
  r.out = read_file(out_path);
  r.err = read_file(err_path);
  std::filesystem::remove(out_path);
  std::filesystem::remove(err_path);
  return r;
}

CommandResult run_kvlm(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {kvlm_binary()};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_program(argv);
}

bool have_program(const std::string& name) {
  return run_program({"sh", "-c", "command -v " + name}).exit_code == 0;
}

ServerProcess::ServerProcess(const std::vector<std::string>& args, const std::string& command) {
  const std::string base = next_base();
  err_path_ = base + ".err";
  std::vector<std::string> argv = {kvlm_binary(), command};
  if (std::find(args.begin(), args.end(), "--port") == args.end()) argv.insert(argv.end(), {"--port", "0"});
  argv.insert(argv.end(), args.begin(), args.end());
  pid_ = spawn(argv, base + ".out", err_path_);
  const std::regex listening("listening on https?://127\\.0\\.0\\.1:([0-9]+)");
  for (int i = 0; i < 3000; ++i) {  // up to 30 s (model loading under a loaded CI box)
    std::smatch m;
    const std::string err = read_so_far(err_path_);
    if (std::regex_search(err, m, listening)) {
      port_ = std::stoi(m[1].str());
      return;
    }
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      ADD_FAILURE() << "kvlm " << command << " exited before listening:\n" << err;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ADD_FAILURE() << "kvlm " << command << " did not start listening:\n" << read_so_far(err_path_);
}

CommandResult ServerProcess::stop() {
  CommandResult r;
  if (pid_ > 0) {
    ::kill(pid_, SIGTERM);
    r.exit_code = wait_exit_code(pid_);
    pid_ = -1;
  }
  r.err = read_so_far(err_path_);
  return r;
}

void ServerProcess::send_signal(int sig) {
  if (pid_ > 0) ::kill(pid_, sig);
}

CommandResult ServerProcess::wait() {
  CommandResult r;
  if (pid_ > 0) {
    r.exit_code = wait_exit_code(pid_);
    pid_ = -1;
  }
  r.err = read_so_far(err_path_);
  return r;
}

std::string ServerProcess::err_so_far() const { return read_so_far(err_path_); }

ServerProcess::~ServerProcess() { stop(); }

double metric_sample(const std::string& text, const std::string& series) {
  std::string key = "\n" + series + (series.find('{') == std::string::npos ? "{" : " ");
  size_t at = text.find(key);
  if (at == std::string::npos && series.find('{') == std::string::npos) {
    key = "\n" + series + " ";  // a series without labels
    at = text.find(key);
  }
  if (at == std::string::npos) return -1;
  const size_t sp = text.find(' ', at + key.size() - 1);
  return std::stod(text.substr(sp + 1, text.find('\n', sp) - sp - 1));
}

std::string metrics_text(const ServerProcess& server) {
  httplib::Client cli("127.0.0.1", server.port());
  auto r = cli.Get("/metrics");
  return r ? r->body : std::string();
}

double server_metric(const ServerProcess& server, const std::string& series) {
  return metric_sample(metrics_text(server), series);
}

std::vector<std::thread> completion_burst(const ServerProcess& server, int num_requests, int max_tokens) {
  std::vector<std::thread> burst;
  for (int i = 0; i < num_requests; ++i)
    burst.emplace_back([&server, i, max_tokens] {
      httplib::Client c("127.0.0.1", server.port());
      c.set_read_timeout(120);
      const nlohmann::json body = {
          {"prompt", "Once upon a time " + std::to_string(i)}, {"max_tokens", max_tokens}, {"ignore_eos", true}};
      auto r = c.Post("/v1/completions", body.dump(), "application/json");
      EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
    });
  return burst;
}

std::string hex_bytes(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

int stream_then_hang_up(const ServerProcess& server, const std::string& path, const std::string& body, int chunks) {
  httplib::Client cli("127.0.0.1", server.port());
  int received = 0;
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.headers = {{"Content-Type", "application/json"}};
  req.body = body;
  req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++received < chunks; };
  cli.send(req);
  return received;
}

bool pcre_full_match(const std::string& pattern, const std::string& s) {
  int err = 0;
  PCRE2_SIZE off = 0;
  pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), pattern.size(),
                                 PCRE2_UTF | PCRE2_ANCHORED | PCRE2_ENDANCHORED, &err, &off, nullptr);
  EXPECT_NE(re, nullptr) << pattern;
  if (!re) return false;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(re, nullptr);
  const int rc = pcre2_match(re, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, 0, md, nullptr);
  pcre2_match_data_free(md);
  pcre2_code_free(re);
  return rc >= 0;
}

std::vector<std::string> sse_data(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    const size_t end = body.find("\n\n", pos);
    out.push_back(body.substr(pos + 6, end - pos - 6));
    pos = end;
  }
  return out;
}

}  // namespace kvlm::test
