#include "kvstore/disk_store.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/error.h"

namespace kvlm {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view kExt = ".kvr";

// Reads a whole file; nullopt on any error (then errno says why).
std::optional<std::string> read_whole(const std::string& path, uint64_t max_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st;
  std::optional<std::string> out;
  if (::fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_size) <= max_bytes) {
    std::string buf(static_cast<size_t>(st.st_size), '\0');
    size_t got = 0;
    while (got < buf.size()) {
      ssize_t n = ::read(fd, buf.data() + got, buf.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    buf.resize(got);  // a file shrunk under us reads as truncated
    out = std::move(buf);
  }
  ::close(fd);
  return out;
}

// Whether the file at `path` can be a record of `codec` named `name`, from
// its first bytes and its size (RecordCodec::peek).
RecordStatus peek_file(const std::string& path, const RecordCodec& codec, const Hash128& name, uint64_t* size) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return RecordStatus::kTruncated;
  struct stat st;
  std::byte buf[RecordCodec::kPeekBytes];
  ssize_t n = -1;
  if (::fstat(fd, &st) == 0) n = ::pread(fd, buf, sizeof(buf), 0);
  ::close(fd);
  if (n < 0) return RecordStatus::kTruncated;
  *size = static_cast<uint64_t>(st.st_size);
  return codec.peek(std::span<const std::byte>(buf, static_cast<size_t>(n)), *size, name);
}

}  // namespace

std::unique_ptr<DiskStore> DiskStore::open(const DiskStoreConfig& config) {
  std::unique_ptr<DiskStore> s(new DiskStore(config));
  std::error_code ec;
  const int err = make_private_directories(s->ns_dir_);
  if (err != 0 || !fs::is_directory(s->ns_dir_, ec))
    throw_error(ErrorCode::kInvalidArgument, "--kv-disk {}: cannot create {}: {}", config.dir, s->ns_dir_,
                err != 0 ? std::strerror(err) : "not a directory");
  // A namespace folder an older kvlm made 0755 is closed too, and with it
  // the records inside whatever their own modes.
  if (::chmod(s->ns_dir_.c_str(), kPrivateDirMode) != 0)
    s->warn_.warn("cannot make {} private (mode 0700): {}", s->ns_dir_, std::strerror(errno));
  if (config.fsync == DiskFsync::kAlways) fsync_directory(config.dir);  // the namespace directory's entry
  s->scan();
  return s;
}

DiskStore::DiskStore(const DiskStoreConfig& config)
    : config_(config),
      codec_(config.ns, config.security),
      ns_dir_(config.dir + "/" + hash_hex(codec_.tier_id())) {}

std::string DiskStore::name_path(const Hash128& name) const {
  std::string hex = hash_hex(name);
  return ns_dir_ + "/" + hex.substr(0, 2) + "/" + hex + std::string(kExt);
}

void DiskStore::scan() {
  struct Found {
    Hash128 name;
    uint64_t num_bytes;
    fs::file_time_type mtime;
  };
  std::vector<Found> found;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(ns_dir_, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    const std::string path = it->path().string();
    const std::string file = it->path().filename().string();
    if (is_temp_record_file(file)) {
      // A write a killed process never finished: not a record, not corrupt.
      if (temp_file_is_orphan(file)) fs::remove(it->path(), ec);
      ec.clear();
      continue;
    }
    std::optional<Hash128> name;
    if (file.size() == 32 + kExt.size() && file.ends_with(kExt)) name = parse_hash_hex(file.substr(0, 32));
    uint64_t size = 0;
    const RecordStatus st = name ? peek_file(path, codec_, *name, &size) : RecordStatus::kBadMagic;
    if (st != RecordStatus::kOk) {
      counters_.num_corrupt.fetch_add(1, std::memory_order_relaxed);
      counters_.refuse(refusal_of(st));
      warn_.warn("removing {}: {}", path, record_status_name(st));
      fs::remove(it->path(), ec);
      ec.clear();
      continue;
    }
    found.push_back({*name, size, it->last_write_time(ec)});
    ec.clear();
  }
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.mtime < b.mtime; });
  for (const Found& f : found) {
    lru_.push_back(f.name);
    index_[f.name] = Entry{f.num_bytes, std::prev(lru_.end())};
    num_bytes_held_ += f.num_bytes;
  }
  publish_size();
  make_room(0);  // the cap may have shrunk since the last run
}

void DiskStore::touch(Entry& e) { lru_.splice(lru_.end(), lru_, e.lru); }

void DiskStore::erase(Hash128 name, bool remove_file) {  // by value: name may live in lru_
  auto it = index_.find(name);
  if (it == index_.end()) return;
  num_bytes_held_ -= it->second.num_bytes;
  lru_.erase(it->second.lru);
  index_.erase(it);
  publish_size();
  if (remove_file) ::unlink(name_path(name).c_str());
}

bool DiskStore::make_room(uint64_t num_bytes) {
  if (config_.max_bytes == 0) return true;
  if (num_bytes > config_.max_bytes) return false;
  while (num_bytes_held_ + num_bytes > config_.max_bytes && !lru_.empty()) {
    erase(lru_.front(), /*remove_file=*/true);
    counters_.num_evicted.fetch_add(1, std::memory_order_relaxed);
  }
  return true;
}

bool DiskStore::ensure_shard(const std::string& shard) {
  if (shards_made_.count(shard)) return true;
  const bool made = ::mkdir(shard.c_str(), kPrivateDirMode) == 0;
  if (!made && errno != EEXIST) return false;
  // The new shard's entry in the namespace directory must outlive a power
  // loss too, or the records renamed into it would not.
  if (made && config_.fsync == DiskFsync::kAlways && fsync_directory(ns_dir_) != 0) return false;
  shards_made_.insert(shard);
  return true;
}

int DiskStore::write_file(const Hash128& name, const std::string& bytes) {
  const std::string path = name_path(name);
  const std::string shard = path.substr(0, path.rfind('/'));
  if (!ensure_shard(shard)) {
    const int err = errno;
    warn_.warn("cannot create {}: {}", shard, std::strerror(err));
    return err;
  }
  // Written under a unique temporary name, then renamed: a reader (or a scan
  // after a crash) sees the whole record or none of it.
  const std::string tmp = fmt::format("{}.tmp.{}.{}", path, ::getpid(), num_tmp_++);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, kPrivateFileMode);
  bool ok = fd >= 0;
  size_t put = 0;
  while (ok && put < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + put, bytes.size() - put);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) ok = false;
    else put += static_cast<size_t>(n);
  }
  int err = ok ? 0 : errno;
  // always: the bytes are on disk before the name points at them, and the
  // name is on disk before the next record is written.
  const bool always = config_.fsync == DiskFsync::kAlways;
  if (ok && always && ::fsync(fd) != 0) {
    ok = false;
    err = errno;
  }
  if (fd >= 0 && ::close(fd) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (ok && ::rename(tmp.c_str(), path.c_str()) != 0) {
    ok = false;
    err = errno;
  }
  if (ok && always && (err = fsync_directory(shard)) != 0) {
    // The record is whole under its name but may not survive a power loss:
    // not indexed (the next scan finds it if it did survive).
    warn_.warn("cannot fsync {}: {}", shard, std::strerror(err));
    return err;
  }
  if (!ok) {
    ::unlink(tmp.c_str());
    warn_.warn("cannot write {}: {}", path, std::strerror(err));
    return err == 0 ? EIO : err;
  }
  return 0;
}

bool DiskStore::evict_for_space(uint64_t num_bytes) {
  uint64_t freed = 0;
  while (freed < num_bytes && !lru_.empty()) {
    freed += index_.at(lru_.front()).num_bytes;
    erase(lru_.front(), /*remove_file=*/true);
    counters_.num_evicted.fetch_add(1, std::memory_order_relaxed);
  }
  return freed > 0;
}


size_t DiskStore::probe(std::span<const BlockHash> hashes) {
  std::lock_guard<std::mutex> lock(mu_);
  counters_.num_lookups.fetch_add(1, std::memory_order_relaxed);
  size_t n = 0;
  while (n < hashes.size() && index_.count(codec_.name(hashes[n]))) ++n;
  return n;
}

std::vector<KvRecord> DiskStore::load(std::span<const BlockHash> hashes, const Deadline& deadline) {
  const double t0 = steady_clock().now_s();
  std::lock_guard<std::mutex> lock(mu_);
  counters_.num_lookups.fetch_add(1, std::memory_order_relaxed);
  counters_.num_lookup_blocks.fetch_add(static_cast<int64_t>(hashes.size()), std::memory_order_relaxed);
  std::vector<KvRecord> out;
  for (const BlockHash& h : hashes) {
    auto it = index_.find(codec_.name(h));
    if (it == index_.end()) break;
    if (deadline.passed()) {
      counters_.refuse(TierRefusal::kTimeout);
      break;
    }
    const std::string path = record_path(h);
    std::optional<std::string> bytes = read_whole(path, it->second.num_bytes);
    KvRecord r;
    RecordStatus st = bytes ? codec_.decode(*bytes, h, &r) : RecordStatus::kTruncated;
    if (st != RecordStatus::kOk) {
      // Gone or damaged since the scan: never loaded, removed so it is not
      // tried again.
      if (bytes) {
        counters_.num_corrupt.fetch_add(1, std::memory_order_relaxed);
        counters_.refuse(refusal_of(st));
      } else {
        counters_.num_errors.fetch_add(1, std::memory_order_relaxed);
      }
      warn_.warn("dropping {}: {}", path, bytes ? record_status_name(st) : std::strerror(errno));
      erase(it->first, /*remove_file=*/true);
      break;
    }
    counters_.num_bytes_read.fetch_add(static_cast<int64_t>(bytes->size()), std::memory_order_relaxed);
    touch(it->second);
    out.push_back(std::move(r));
  }
  counters_.num_hit_blocks.fetch_add(static_cast<int64_t>(out.size()), std::memory_order_relaxed);
  if (!out.empty()) counters_.observe_load_latency(steady_clock().now_s() - t0);
  return out;
}

size_t DiskStore::store(std::span<const KvRecord> records) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t num_new = 0;
  for (const KvRecord& r : records) {
    const Hash128 name = codec_.name(r.hash);
    auto it = index_.find(name);
    if (it != index_.end()) {
      touch(it->second);
      continue;
    }
    const uint64_t size = codec_.encoded_bytes(r.tokens.size(), r.payload.size());
    if (!make_room(size)) {
      counters_.num_blocks_dropped.fetch_add(1, std::memory_order_relaxed);
      warn_.warn("a {}-byte record is larger than --kv-disk-size {}; not stored", size, config_.max_bytes);
      continue;
    }
    const std::string bytes = codec_.encode(r);
    int err = write_file(name, bytes);
    // A full filesystem (the cap is larger than the space left): the newest
    // block is worth more than the least recently used ones, as under the cap.
    if (err == ENOSPC && evict_for_space(size)) err = write_file(name, bytes);
    if (err != 0) {
      counters_.num_errors.fetch_add(1, std::memory_order_relaxed);
      counters_.num_blocks_dropped.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    lru_.push_back(name);
    index_[name] = Entry{size, std::prev(lru_.end())};
    num_bytes_held_ += size;
    publish_size();
    counters_.num_blocks_written.fetch_add(1, std::memory_order_relaxed);
    counters_.num_bytes_written.fetch_add(static_cast<int64_t>(size), std::memory_order_relaxed);
    ++num_new;
  }
  // batch: the whole write-back batch is durable when store returns.
  if (num_new > 0 && config_.fsync == DiskFsync::kBatch) {
    if (const int err = sync_filesystem_of(ns_dir_); err != 0) {
      counters_.num_errors.fetch_add(1, std::memory_order_relaxed);
      warn_.warn("cannot sync {}: {}", ns_dir_, std::strerror(err));
    }
  }
  return num_new;
}

void DiskStore::publish_size() {
  num_records_now_.store(static_cast<int64_t>(index_.size()), std::memory_order_relaxed);
  num_bytes_now_.store(static_cast<int64_t>(num_bytes_held_), std::memory_order_relaxed);
}

TierStats DiskStore::stats() const {
  // No lock: the I/O thread may hold mu_ through a slow read or write.
  TierStats s;
  s.name = "disk";
  counters_.snapshot(s);
  s.num_records = num_records_now_.load(std::memory_order_relaxed);
  s.num_bytes_held = num_bytes_now_.load(std::memory_order_relaxed);
  return s;
}

bool DiskStore::contains(const BlockHash& h) const {
  std::lock_guard<std::mutex> lock(mu_);
  return index_.count(codec_.name(h)) != 0;
}

std::vector<Hash128> DiskStore::lru_order() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {lru_.begin(), lru_.end()};
}

}  // namespace kvlm
