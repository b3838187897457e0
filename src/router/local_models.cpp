#include "router/local_models.h"

#include <algorithm>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include "common/error.h"
#include "common/log.h"
#include "router/router.h"

extern char** environ;

namespace kvlm::router {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr auto kStopGrace = std::chrono::seconds(30);  // SIGTERM, then SIGKILL
constexpr auto kIdleCheck = std::chrono::milliseconds(250);
constexpr size_t kLastLines = 12;                      // a failed start's message

int64_t path_bytes(const fs::path& p) {
  std::error_code ec;
  if (fs::is_regular_file(p, ec)) return static_cast<int64_t>(fs::file_size(p, ec));
  int64_t total = 0;
  for (const auto& entry : fs::recursive_directory_iterator(p, ec))
    if (entry.is_regular_file(ec)) total += static_cast<int64_t>(entry.file_size(ec));
  return total;
}

int64_t modified_unix_seconds(const fs::path& p) {
  struct stat st{};
  return ::stat(p.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_mtime) : 0;
}

// A process's resident memory (VmRSS), 0 when it cannot be read.
int64_t resident_bytes(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  std::string line;
  while (std::getline(in, line))
    if (line.starts_with("VmRSS:")) return std::stoll(line.substr(6)) * 1024;
  return 0;
}

// Starts `args` with `key` as its KVLM_API_KEY, its stderr on a pipe whose
// read end is returned in `read_fd`. Between fork and exec only
// async-signal-safe calls: everything is prepared before.
pid_t spawn_worker(const std::vector<std::string>& args, const std::string& key, int& read_fd) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e)
    if (!std::string_view(*e).starts_with("KVLM_API_KEY=")) env_strings.emplace_back(*e);
  env_strings.push_back("KVLM_API_KEY=" + key);
  std::vector<char*> argv, envp;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const std::string& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw_error(ErrorCode::kUnavailable, "pipe: {}", std::strerror(errno));
  const long max_fd = ::sysconf(_SC_OPEN_MAX);
  sigset_t no_signals;  // the host's threads block the stop signals; a worker starts with none blocked
  sigemptyset(&no_signals);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw_error(ErrorCode::kUnavailable, "fork: {}", std::strerror(errno));
  }
  if (pid == 0) {
    // The worker ends with the host, however the host ends.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(127);
    ::sigprocmask(SIG_SETMASK, &no_signals, nullptr);
    ::dup2(fds[1], STDERR_FILENO);
    // Nothing else of the host's (its listening socket above all) stays open.
    if (::syscall(SYS_close_range, 3, ~0U, 0) != 0)
      for (long fd = 3; fd < max_fd; ++fd) ::close(static_cast<int>(fd));
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  read_fd = fds[0];
  return pid;
}

}  // namespace

struct LocalModels::Entry {
  enum class State { kUnloaded, kLoading, kLoaded, kStopping, kFailed };
  LocalModelSpec spec;
  int64_t file_bytes = 0;
  int64_t created = 0;
  State state = State::kUnloaded;
  bool sleeping = false;
  bool start_wanted = false;  // for the watcher thread, which starts every worker
  pid_t pid = -1;
  uint64_t generation = 0;  // which start the reader thread belongs to
  std::thread reader;
  std::string url;
  std::string error;
  int32_t leases = 0;
  Clock::time_point last_used{};
  Clock::time_point started{};
  int64_t memory_bytes = 0;
  int64_t num_loads = 0;
  double last_load_seconds = 0;
};

std::vector<LocalModelSpec> models_in_directory(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw_error(ErrorCode::kNotFound, "--models-dir {}: not a directory", dir);
  static const std::regex later_part(R"(-0*([2-9]|[1-9][0-9]+)-of-[0-9]+$)");
  std::vector<LocalModelSpec> out;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const fs::path& p = entry.path();
    if (entry.is_directory(ec) && fs::exists(p / "config.json", ec)) {
      out.push_back({p.filename().string(), p.string()});
    } else if (entry.is_regular_file(ec) && p.extension() == ".gguf") {
      const std::string stem = p.stem().string();
      if (!std::regex_search(stem, later_part)) out.push_back({stem, p.string()});
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  if (out.empty())
    throw_error(ErrorCode::kNotFound, "--models-dir {}: no models (*.gguf files, folders with a config.json)", dir);
  return out;
}

LocalModels::LocalModels(LocalModelsConfig config) : config_(std::move(config)) {
  if (config_.models.empty()) throw_error(ErrorCode::kInvalidArgument, "no models to serve");
  for (const LocalModelSpec& spec : config_.models) {
    for (const auto& e : entries_)
      if (e->spec.name == spec.name) throw_error(ErrorCode::kInvalidArgument, "two models are named '{}'", spec.name);
    auto e = std::make_unique<Entry>();
    e->spec = spec;
    e->file_bytes = path_bytes(spec.path);
    e->created = modified_unix_seconds(spec.path);
    entries_.push_back(std::move(e));
  }
  idle_watcher_ = std::thread([this] { watch_idle(); });
}

LocalModels::~LocalModels() { shutdown(); }

void LocalModels::attach(Router& router) {
  std::lock_guard lock(mu_);
  router_ = &router;
}

void LocalModels::shutdown() {
  {
    Lock lock(mu_);
    if (stopping_ && !idle_watcher_.joinable()) return;
    stopping_ = true;
    cv_.notify_all();
  }
  if (idle_watcher_.joinable()) idle_watcher_.join();
  Lock lock(mu_);
  for (auto& e : entries_)
    if (e->state == Entry::State::kLoading || e->state == Entry::State::kLoaded) stop(*e, lock);
  router_ = nullptr;
  for (auto& e : entries_) {
    std::thread reader = std::move(e->reader);
    lock.unlock();
    if (reader.joinable()) reader.join();
    lock.lock();
  }
}

LocalModels::Entry& LocalModels::find(const std::string& name) const {
  for (const auto& e : entries_)
    if (e->spec.name == name) return *e;
  throw_error(ErrorCode::kNotFound, "The model '{}' does not exist: this server serves the names GET /v1/models lists.",
              name);
}

std::string LocalModels::default_model() const { return entries_.front()->spec.name; }

bool LocalModels::hosts(const std::string& name) const {
  return std::any_of(entries_.begin(), entries_.end(), [&](const auto& e) { return e->spec.name == name; });
}

ModelHost::Lease LocalModels::acquire(const std::string& name) {
  Lock lock(mu_);
  Entry& e = find(name);
  ensure_loaded(e, lock);
  ++e.leases;
  e.last_used = Clock::now();
  return Lease(static_cast<void*>(&e), [this](void* p) {
    std::lock_guard released(mu_);
    Entry& held = *static_cast<Entry*>(p);
    --held.leases;
    held.last_used = Clock::now();
  });
}

void LocalModels::load(const std::string& name) {
  Lock lock(mu_);
  Entry& e = find(name);
  ensure_loaded(e, lock);
  e.last_used = Clock::now();
}

// Waits for the model's worker, starting it if none runs (a sleeping model
// wakes). Throws kUnavailable when it cannot be started or fails to.
void LocalModels::ensure_loaded(Entry& e, Lock& lock) {
  using State = Entry::State;
  e.sleeping = false;
  const auto deadline = Clock::now() + config_.load_timeout;
  for (;;) {
    if (stopping_) throw_error(ErrorCode::kUnavailable, "the server is shutting down");
    if (e.state == State::kLoaded) return;
    if (e.state == State::kUnloaded || e.state == State::kFailed) {
      make_room(e, lock);
      if (e.state != State::kUnloaded && e.state != State::kFailed) continue;  // another request started it
      e.state = State::kLoading;
      e.start_wanted = true;
      cv_.notify_all();
    }
    if (!cv_.wait_until(lock, deadline, [&] { return e.state != State::kLoading && e.state != State::kStopping; })) {
      if (e.state == State::kLoading) stop(e, lock);
      throw_error(ErrorCode::kUnavailable, "model '{}' was not ready within {} s", e.spec.name,
                  config_.load_timeout.count());
    }
    if (e.state == State::kFailed)  // this wait's start failed
      throw_error(ErrorCode::kUnavailable, "model '{}' failed to load: {}", e.spec.name, e.error);
  }
}

bool LocalModels::busy(const Entry& e) const {
  return e.leases > 0 || (router_ && !e.url.empty() && router_->requests_in_flight(e.url) > 0);
}

// Unloads idle models, least recently used first, until `e` fits under
// --models-max and --models-mem; throws kUnavailable if the busy ones leave
// no room.
void LocalModels::make_room(const Entry& e, Lock& lock) {
  using State = Entry::State;
  const int64_t need = e.memory_bytes > 0 ? e.memory_bytes : e.file_bytes;
  for (;;) {
    int32_t num_loaded = 0;
    int64_t memory = 0;
    Entry* idlest = nullptr;
    for (auto& other : entries_) {
      if (other->state != State::kLoaded && other->state != State::kLoading) continue;
      ++num_loaded;
      memory += other->memory_bytes > 0 ? other->memory_bytes : other->file_bytes;
      if (other->state == State::kLoaded && !busy(*other) && (!idlest || other->last_used < idlest->last_used))
        idlest = other.get();
    }
    const bool count_ok = config_.max_loaded <= 0 || num_loaded < config_.max_loaded;
    const bool memory_ok = config_.max_memory_bytes <= 0 || num_loaded == 0 || memory + need <= config_.max_memory_bytes;
    if (count_ok && memory_ok) return;
    if (!idlest)
      throw_error(ErrorCode::kUnavailable,
                  "no room to load model '{}': {} loaded models ({} MiB) are all busy (--models-max {}, --models-mem "
                  "{} MiB); retry later",
                  e.spec.name, num_loaded, memory >> 20, config_.max_loaded, config_.max_memory_bytes >> 20);
    log_info("models: unloading '{}' (least recently used) for '{}'", idlest->spec.name, e.spec.name);
    stop(*idlest, lock);
  }
}

// Runs on the watcher thread only: a worker's PR_SET_PDEATHSIG fires when
// the thread that forked it ends, so that must be a thread that lives as
// long as the host.
void LocalModels::start(Entry& e) {
  e.start_wanted = false;
  if (e.reader.joinable()) e.reader.join();  // the last worker's reader ended with it
  std::vector<std::string> args = {config_.program, "serve", "-m", e.spec.path, "--served-model-name", e.spec.name,
                                   "--host", "127.0.0.1", "--port", "0"};
  args.insert(args.end(), config_.worker_args.begin(), config_.worker_args.end());
  int fd = -1;
  try {
    e.pid = spawn_worker(args, config_.worker_api_key, fd);
  } catch (const Error& err) {
    e.state = Entry::State::kFailed;
    e.error = err.what();
    throw;
  }
  e.error.clear();
  e.started = Clock::now();
  ++e.num_loads;
  const uint64_t generation = ++e.generation;
  log_info("models: loading '{}' from {} (worker pid {})", e.spec.name, e.spec.path, e.pid);
  e.reader = std::thread([this, &e, fd, generation] { read_worker(e, fd, generation); });
}

// Takes the worker out of the router, then ends it: SIGTERM (it drains what
// it has, which is nothing, since only an idle model is stopped), SIGKILL
// after the grace period. Returns once the process is gone.
void LocalModels::stop(Entry& e, Lock& lock) {
  if (router_ && !e.url.empty()) router_->remove_worker(e.url);
  e.url.clear();
  e.start_wanted = false;
  e.state = Entry::State::kStopping;
  const pid_t pid = e.pid;
  if (pid > 0) {
    ::kill(pid, SIGTERM);
    if (!cv_.wait_for(lock, kStopGrace, [&] { return e.pid != pid; })) {
      log_warn("models: worker of '{}' (pid {}) did not stop in {} s: killed", e.spec.name, pid, kStopGrace.count());
      ::kill(pid, SIGKILL);
      cv_.wait(lock, [&] { return e.pid != pid; });
    }
  }
  e.state = Entry::State::kUnloaded;  // memory_bytes stays: the next load's estimate
  cv_.notify_all();
}

// The worker's stderr, line by line: copied to ours under its model's name,
// and read for the line that says where it listens.
void LocalModels::read_worker(Entry& e, int fd, uint64_t generation) {
  static const std::regex listening(R"(listening on https?://[^ ]+:([0-9]+) )");
  std::vector<std::string> last;
  std::string pending;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buf, static_cast<size_t>(n));
    for (size_t nl; (nl = pending.find('\n')) != std::string::npos; pending.erase(0, nl + 1)) {
      const std::string line = pending.substr(0, nl);
      std::fprintf(stderr, "[%s] %s\n", e.spec.name.c_str(), line.c_str());
      last.push_back(line);
      if (last.size() > kLastLines) last.erase(last.begin());
      std::smatch m;
      if (!std::regex_search(line, m, listening)) continue;
      Lock lock(mu_);
      if (e.generation != generation || e.state != Entry::State::kLoading) continue;
      e.url = fmt::format("http://127.0.0.1:{}", m[1].str());
      e.state = Entry::State::kLoaded;
      e.last_used = Clock::now();
      e.last_load_seconds = std::chrono::duration<double>(e.last_used - e.started).count();
      measure(e);
      if (router_) router_->add_worker(e.url, {e.spec.name});
      log_info("models: '{}' ready in {:.2f} s at {}", e.spec.name, e.last_load_seconds, e.url);
      cv_.notify_all();
    }
  }
  ::close(fd);
  std::string tail;
  for (const std::string& l : last) tail += (tail.empty() ? "" : " | ") + l;
  worker_exited(e, generation, tail);
}

void LocalModels::worker_exited(Entry& e, uint64_t generation, const std::string& last_lines) {
  int status = 0;
  Lock lock(mu_);
  const pid_t pid = e.pid;
  if (e.generation != generation || pid <= 0) return;
  lock.unlock();
  ::waitpid(pid, &status, 0);
  lock.lock();
  e.pid = -1;
  using State = Entry::State;
  if (e.state == State::kLoading || e.state == State::kLoaded) {
    // Not asked to stop: it failed to start, or died.
    if (router_ && !e.url.empty()) router_->remove_worker(e.url);
    e.url.clear();
    e.error = fmt::format("its worker exited ({}{}){}{}", WIFSIGNALED(status) ? "signal " : "status ",
                          WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status), last_lines.empty() ? "" : ": ",
                          last_lines);
    log_warn("models: '{}': {}", e.spec.name, e.error);
    e.state = State::kFailed;
  }
  cv_.notify_all();
}

void LocalModels::measure(Entry& e) const {
  if (e.pid > 0)
    if (const int64_t rss = resident_bytes(e.pid); rss > 0) e.memory_bytes = rss;
}

// Starts the workers requests want; measures each loaded model's memory
// now and then, and puts one idle for --sleep-idle-seconds to sleep. A
// model with requests counts as used.
void LocalModels::watch_idle() {
  Lock lock(mu_);
  auto start_wanted = [&] { return std::any_of(entries_.begin(), entries_.end(), [](auto& e) { return e->start_wanted; }); };
  while (!stopping_) {
    cv_.wait_for(lock, kIdleCheck, [&] { return stopping_ || start_wanted(); });
    if (stopping_) return;
    for (auto& e : entries_) {
      if (!e->start_wanted) continue;
      try {
        start(*e);
      } catch (const Error& err) {
        log_warn("models: '{}': {}", e->spec.name, err.what());
      }
      cv_.notify_all();
    }
    const auto now = Clock::now();
    for (auto& e : entries_) {
      if (e->state != Entry::State::kLoaded) continue;
      measure(*e);
      if (busy(*e)) {
        e->last_used = now;
      } else if (config_.sleep_idle_seconds > 0 &&
                 std::chrono::duration<double>(now - e->last_used).count() >= config_.sleep_idle_seconds) {
        log_info("models: '{}' idle for {} s: sleeping", e->spec.name, config_.sleep_idle_seconds);
        stop(*e, lock);
        e->sleeping = true;
      }
    }
  }
}

std::string LocalModels::unload(const std::string& name) {
  Lock lock(mu_);
  Entry& e = find(name);
  if (e.state != Entry::State::kLoaded && e.state != Entry::State::kLoading) return "";
  if (busy(e)) return name;
  stop(e, lock);
  return "";
}

std::string LocalModels::sleep(const std::optional<std::string>& name) {
  Lock lock(mu_);
  if (name) find(*name);  // kNotFound
  auto chosen = [&](const Entry& e) { return !name || e.spec.name == *name; };
  for (auto& e : entries_)
    if (chosen(*e) && (e->state == Entry::State::kLoaded || e->state == Entry::State::kLoading) && busy(*e))
      return e->spec.name;
  for (auto& e : entries_) {
    if (!chosen(*e)) continue;
    if (e->state == Entry::State::kLoaded || e->state == Entry::State::kLoading) stop(*e, lock);
    e->sleeping = true;
  }
  return "";
}

void LocalModels::wake_up(const std::optional<std::string>& name) {
  Lock lock(mu_);
  if (name) return ensure_loaded(find(*name), lock);
  for (auto& e : entries_)
    if (e->sleeping) ensure_loaded(*e, lock);
}

bool LocalModels::sleeping() const {
  std::lock_guard lock(mu_);
  bool any_sleeping = false;
  for (const auto& e : entries_) {
    if (e->state == Entry::State::kLoaded || e->state == Entry::State::kLoading) return false;
    any_sleeping = any_sleeping || e->sleeping;
  }
  return any_sleeping;
}

std::vector<HostedModel> LocalModels::models() const {
  static const std::map<Entry::State, const char*> names = {
      {Entry::State::kUnloaded, "unloaded"}, {Entry::State::kLoading, "loading"}, {Entry::State::kLoaded, "loaded"},
      {Entry::State::kStopping, "unloading"}, {Entry::State::kFailed, "failed"}};
  std::lock_guard lock(mu_);
  std::vector<HostedModel> out;
  for (const auto& e : entries_) {
    HostedModel m{.name = e->spec.name, .path = e->spec.path, .state = names.at(e->state), .error = e->error,
                  .url = e->url, .memory_bytes = e->memory_bytes, .num_loads = e->num_loads,
                  .last_load_seconds = e->last_load_seconds, .created = e->created};
    if (e->state == Entry::State::kUnloaded && e->sleeping) m.state = "sleeping";
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace kvlm::router
