// Shared helpers for kvlm tests: paths into ../shared (a missing file fails
// the test with its path, never skips), and running the kvlm binary.
#pragma once

#include <cstdint>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

namespace kvlm::test {

// Absolute path of `rel` under ../shared. Fails the calling test (ADD_FAILURE
// + throws) if the file does not exist, naming the full path.
std::string shared_path(const std::string& rel);

// Path of the built kvlm binary ($KVLM_TEST_BIN if set).
std::string kvlm_binary();

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs the kvlm binary with `args` (no shell; each arg passed verbatim).
CommandResult run_kvlm(const std::vector<std::string>& args);
// Runs any program found on PATH (argv[0]) with its arguments.
CommandResult run_program(const std::vector<std::string>& argv);
// Whether a program is on PATH.
bool have_program(const std::string& name);

// `kvlm serve` in a child process on a free port of 127.0.0.1, stopped with
// SIGTERM when destroyed. The constructor waits until the server listens and
// fails the test (and leaves port() at 0) if it exits first.
class ServerProcess {
 public:
  // `command` is the subcommand ("serve", "router"); args without "--port"
  // get "--port 0" (any free port), read back from the "listening on" line.
  explicit ServerProcess(const std::vector<std::string>& args, const std::string& command = "serve");
  int pid() const { return pid_; }
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;
  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // Stops the server (SIGTERM) and returns its exit code and stderr.
  CommandResult stop();
  // Sends `sig` to the server, which keeps running until it exits by itself.
  void send_signal(int sig);
  // Waits for the server to exit; its exit code and stderr.
  CommandResult wait();
  // What the server has written to stderr so far.
  std::string err_so_far() const;

 private:
  int pid_ = -1;
  int port_ = 0;
  std::string err_path_;
};

// The value of one sample in Prometheus text: `series` alone ("name")
// matches the name's first series; with labels ("name{a=\"b\"}") exactly
// that series. -1 when absent.
double metric_sample(const std::string& text, const std::string& series);
// GET /metrics of a server ("" if it does not answer).
std::string metrics_text(const ServerProcess& server);
// metric_sample of a server's current /metrics.
double server_metric(const ServerProcess& server, const std::string& series);

// `num_requests` greedy completions of `max_tokens` tokens each (ignore_eos,
// prompts that differ), each on its own thread and connection, started now:
// an overload burst. Each thread expects a 200; join them all.
std::vector<std::thread> completion_burst(const ServerProcess& server, int num_requests, int max_tokens);

// Lowercase hex of a byte string, two digits a byte (wire-format tests).
std::string hex_bytes(const std::string& bytes);

// POSTs a streaming JSON `body` to `path` and hangs up once `chunks` chunks
// of the answer have arrived; returns how many arrived (fewer: it ended first).
int stream_then_hang_up(const ServerProcess& server, const std::string& path, const std::string& body, int chunks);

// Whether PCRE2 matches `pattern` against the whole of `s` (UTF-8); a
// pattern PCRE2 refuses fails the calling test.
bool pcre_full_match(const std::string& pattern, const std::string& s);

// A fixture whose tests share one server: started with Suite::server_args()
// (a public static member) before the suite's first test, stopped after its
// last. class MySuite : public test::ServerSuite<MySuite> { ... };
template <typename Suite>
class ServerSuite : public ::testing::Test {
 public:
  static void SetUpTestSuite() { server_ = new ServerProcess(Suite::server_args()); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }

 protected:
  static inline ServerProcess* server_ = nullptr;
};

// The data payloads of an SSE body, in order ("[DONE]" included).
std::vector<std::string> sse_data(const std::string& body);

// A per-process temporary directory, removed at exit; tests create files
// under it with unique names.
std::string temp_dir();
// A path `name` under temp_dir(), nothing there yet (whatever a test of
// this process left under that name is removed), gone when the process ends.
std::string temp_path(const std::string& name);

// A file's bytes exactly; fails the calling test if it cannot be read.
std::string read_file(const std::string& path);
// A self-signed certificate for 127.0.0.1 and localhost and its key (PEM
// files in temp_dir(), made once with openssl): (cert, key).
std::pair<std::string, std::string> make_certificate();
// Writes `bytes` to temp_dir()/name and returns the path.
std::string write_temp_file(const std::string& name, const std::string& bytes);

// llama.cpp's tests/test-tokenizer-0 vectors for a vocabulary such as
// "vocab/ggml-vocab-gpt-2.gguf": <gguf>.inp holds the strings separated by
// "\n__ggml_vocab_test__\n" (after the last one too), <gguf>.out one line of
// space-separated ids per string. Fails the calling test if the two files
// disagree on the number of cases.
struct VocabCase {
  std::string text;
  std::vector<int32_t> expected;
};
std::vector<VocabCase> read_vocab_cases(const std::string& gguf_rel);

}  // namespace kvlm::test
