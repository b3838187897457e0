#include "kvstore/disk_inventory.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "common/error.h"
#include "kvstore/record.h"

namespace kvlm {
namespace fs = std::filesystem;
namespace {

void require_dir(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw_error(ErrorCode::kNotFound, "--kv-disk {}: no such directory", dir);
}

// Calls fn(namespace, its directory) for every namespace directory of `dir`
// (named by 32 hex digits), in name order.
void for_each_namespace(const std::string& dir, const std::function<void(Hash128, const fs::path&)>& fn) {
  std::vector<std::pair<std::string, fs::path>> found;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    auto ns = parse_hash_hex(it->path().filename().string());
    if (ns && it->is_directory(ec)) found.emplace_back(it->path().filename().string(), it->path());
  }
  std::sort(found.begin(), found.end());
  for (const auto& [name, path] : found) fn(*parse_hash_hex(name), path);
}

// Every regular file under a namespace directory.
std::vector<fs::path> files_under(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_regular_file(ec)) out.push_back(it->path());
  std::sort(out.begin(), out.end());
  return out;
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The hash a record file's name claims, if it is named like one.
std::optional<Hash128> name_hash(const fs::path& p) {
  const std::string name = p.filename().string();
  if (name.size() != 36 || !name.ends_with(".kvr")) return std::nullopt;
  return parse_hash_hex(name.substr(0, 32));
}

}  // namespace

std::vector<DiskNamespaceSummary> stat_disk_tier(const std::string& dir) {
  require_dir(dir);
  std::vector<DiskNamespaceSummary> out;
  for_each_namespace(dir, [&](Hash128 ns, const fs::path& path) {
    DiskNamespaceSummary s;
    s.ns = ns;
    for (const auto& f : files_under(path)) {
      std::error_code ec;
      const uint64_t size = fs::file_size(f, ec);
      std::string head(kRecordHeaderBytes, '\0');
      std::ifstream in(f, std::ios::binary);
      in.read(head.data(), static_cast<std::streamsize>(head.size()));
      RecordHeader h;
      const bool ok = !ec && name_hash(f) && in.gcount() == static_cast<std::streamsize>(head.size()) &&
                      peek_record_header(std::as_bytes(std::span<const char>(head)), size, &h) == RecordStatus::kOk &&
                      h.ns == ns && h.hash.value == *name_hash(f);
      if (ok) {
        ++s.num_records;
        s.num_bytes += static_cast<int64_t>(size);
      } else {
        ++s.num_bad;
      }
    }
    out.push_back(s);
  });
  return out;
}

DiskVerifyReport verify_disk_tier(const std::string& dir, bool remove_bad) {
  require_dir(dir);
  DiskVerifyReport report;
  for_each_namespace(dir, [&](Hash128 ns, const fs::path& path) {
    for (const auto& f : files_under(path)) {
      const std::string bytes = read_all(f);
      const auto expected = name_hash(f);
      RecordStatus st = expected ? decode_record(bytes, ns, BlockHash{*expected}, nullptr) : RecordStatus::kBadMagic;
      if (st == RecordStatus::kOk) {
        ++report.num_ok;
        report.num_bytes_ok += static_cast<int64_t>(bytes.size());
        continue;
      }
      report.bad.push_back({f.string(), expected ? std::string(record_status_name(st)) : "not a record file name"});
      if (remove_bad) {
        std::error_code ec;
        fs::remove(f, ec);
      }
    }
  });
  return report;
}

int64_t clear_disk_tier(const std::string& dir) {
  require_dir(dir);
  int64_t n = 0;
  for_each_namespace(dir, [&](Hash128, const fs::path& path) {
    for (const auto& f : files_under(path)) n += name_hash(f) ? 1 : 0;
    std::error_code ec;
    fs::remove_all(path, ec);
    if (ec) throw_error(ErrorCode::kInvalidArgument, "cannot remove {}: {}", path.string(), ec.message());
  });
  return n;
}

}  // namespace kvlm
