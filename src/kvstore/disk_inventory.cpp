#include "kvstore/disk_inventory.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "common/error.h"
#include "kvstore/disk_files.h"
#include "kvstore/record_codec.h"

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

namespace {

// A file's format from its first bytes and size: 0 if it is no record of
// the namespace directory `ns` under its name (formats 2 and 3 lie under
// keyed names that only the secret can check).
uint16_t file_format(const fs::path& f, const Hash128& ns) {
  std::error_code ec;
  const uint64_t size = fs::file_size(f, ec);
  std::string head(RecordCodec::kPeekBytes, '\0');
  std::ifstream in(f, std::ios::binary);
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(in.gcount()));
  uint16_t version = 0;
  RecordHeader h;
  if (ec || !name_hash(f) ||
      RecordCodec::peek_format(std::as_bytes(std::span<const char>(head)), size, &version, &h) != RecordStatus::kOk)
    return 0;
  if (version == kRecordVersion && (h.ns != ns || h.hash.value != *name_hash(f))) return 0;
  return version;
}

// Why the record in `bytes` (file `f` of directory `dir_name`) is bad, or "".
std::string check_record(const std::string& bytes, const fs::path& f, const Hash128& dir_name,
                         const TierSecurity& security) {
  const auto name = name_hash(f);
  if (!name) return "not a record file name";
  RecordHeader h;
  const RecordStatus st = RecordCodec(dir_name, security).verify_any(std::as_bytes(std::span(bytes)), &h);
  if (st != RecordStatus::kOk) return std::string(record_status_name(st));
  const RecordCodec codec(h.ns, security);
  const bool v1 = bytes.size() > 6 && bytes[4] == static_cast<char>(kRecordVersion) && bytes[5] == 0;
  // Format 1 lies under its namespace and hash; 2 and 3 under the secret's names of them.
  const RecordCodec placed = v1 ? RecordCodec(h.ns) : codec;
  if (placed.tier_id() != dir_name) return std::string(record_status_name(RecordStatus::kWrongNamespace));
  if (placed.name(h.hash) != *name) return std::string(record_status_name(RecordStatus::kWrongHash));
  return "";
}

}  // namespace

std::vector<DiskNamespaceSummary> stat_disk_tier(const std::string& dir) {
  require_dir(dir);
  std::vector<DiskNamespaceSummary> out;
  for_each_namespace(dir, [&](Hash128 ns, const fs::path& path) {
    DiskNamespaceSummary s;
    s.ns = ns;
    for (const auto& f : files_under(path)) {
      if (is_temp_record_file(f.filename().string())) {
        ++s.num_temp;
        continue;
      }
      const uint16_t format = file_format(f, ns);
      if (format == 0) {
        ++s.num_bad;
        continue;
      }
      std::error_code ec;
      ++s.num_records;
      s.num_authenticated += format == kRecordVersion ? 0 : 1;
      s.num_bytes += static_cast<int64_t>(fs::file_size(f, ec));
    }
    out.push_back(s);
  });
  return out;
}

DiskVerifyReport verify_disk_tier(const std::string& dir, bool remove_bad, const TierSecurity& security) {
  require_dir(dir);
  DiskVerifyReport report;
  for_each_namespace(dir, [&](Hash128 dir_name, const fs::path& path) {
    for (const auto& f : files_under(path)) {
      // A write in flight, or one a killed process left: not a record.
      if (is_temp_record_file(f.filename().string())) {
        ++report.num_temp;
        std::error_code ec;
        if (remove_bad && temp_file_is_orphan(f.filename().string()) && fs::remove(f, ec)) ++report.num_temp_removed;
        continue;
      }
      const std::string bytes = read_all(f);
      const bool authenticated = bytes.size() > 6 && bytes[4] != static_cast<char>(kRecordVersion);
      if (authenticated && !security.authenticated() && file_format(f, dir_name) != 0) {
        ++report.num_unchecked;
        continue;
      }
      const std::string why = check_record(bytes, f, dir_name, security);
      if (why.empty()) {
        ++report.num_ok;
        report.num_bytes_ok += static_cast<int64_t>(bytes.size());
        continue;
      }
      report.bad.push_back({f.string(), why});
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
