#include "kvstore/disk_files.h"

#include <cerrno>
#include <charconv>
#include <csignal>
#include <filesystem>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"

namespace kvlm {

DiskFsync parse_disk_fsync(std::string_view name) {
  if (name == "none") return DiskFsync::kNone;
  if (name == "batch") return DiskFsync::kBatch;
  if (name == "always") return DiskFsync::kAlways;
  throw_error(ErrorCode::kInvalidArgument, "--kv-disk-fsync: '{}' is not one of none, batch, always", name);
}

std::string_view disk_fsync_name(DiskFsync f) {
  switch (f) {
    case DiskFsync::kNone: return "none";
    case DiskFsync::kBatch: return "batch";
    case DiskFsync::kAlways: return "always";
  }
  return "?";
}

bool is_temp_record_file(std::string_view file_name) { return file_name.find(".tmp.") != std::string_view::npos; }

bool temp_file_is_orphan(std::string_view file_name) {
  // <hash>.kvr.tmp.<pid>.<n>
  const size_t at = file_name.find(".tmp.");
  if (at == std::string_view::npos) return false;
  const std::string_view rest = file_name.substr(at + 5);
  long pid = 0;
  const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), pid);
  if (ec != std::errc() || end == rest.data() || pid <= 0) return true;  // not ours to wait for
  if (pid == static_cast<long>(::getpid())) return true;
  return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

int make_private_directories(const std::string& dir) {
  // Top down, as std::filesystem::create_directories, which cannot be given a mode.
  std::filesystem::path at;
  for (const std::filesystem::path& part : std::filesystem::path(dir)) {
    at /= part;
    if (::mkdir(at.c_str(), kPrivateDirMode) != 0 && errno != EEXIST) return errno;
  }
  return 0;
}

int fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno;
  const int rc = ::fsync(fd) == 0 ? 0 : errno;
  ::close(fd);
  return rc;
}

int sync_filesystem_of(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno;
  const int rc = ::syncfs(fd) == 0 ? 0 : errno;
  ::close(fd);
  return rc;
}

}  // namespace kvlm
