// The disk tier: one file per record, so a write is one atomic rename and a
// corrupt record costs only itself.
//
//   DIR/<tier id hex>/<first 2 hex digits of the name>/<name hex>.kvr
//
// The tier id and names come from the record codec (record_codec.h): the
// namespace and the block hash without a tier secret, keyed hashes of them
// with one. Namespaces (kv_namespace.h) keep one directory each, so several
// models (or secrets) can share DIR and `kvlm kv stat` can list them; a store
// opens its own and never touches the others. The 256 shard directories keep
// directories small. Folders the store creates are 0700 and records 0600,
// whatever the umask (disk_files.h): they hold prompts' token ids.
//
// Persistence: open() rebuilds the index by scanning the namespace directory,
// reading each file's header only (RecordCodec::peek); files that are
// truncated, foreign or unparseable are counted and removed, leftovers of
// interrupted writes (*.tmp.*) removed. The checksum, MAC or tag is checked
// at load; a record that fails it is counted, removed and is a miss.
//
// Size cap: the bytes of all record files stay <= max_bytes; storing past it
// evicts the least recently used records first (access order is kept in
// memory; after a restart it starts from the files' modification times).
//
// Failures (ENOSPC, EIO, permissions) are misses and counters, never thrown.
// On ENOSPC the store evicts least recently used records worth one record and
// retries once, so a cap larger than the free space degrades to LRU over the
// space there is. What survives a power loss is DiskStoreConfig::fsync's
// promise (disk_files.h); whatever the policy, a torn record is refused by
// the scan or the checksum, never loaded.
//
// Two processes may share DIR (writes are renames of whole files; a record
// the other removed is a miss, counted as an error and dropped from the
// index; a starting process removes only the temporary files no live
// process will finish), but each keeps its own size accounting, so the cap
// holds per process, not for the directory.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "kvstore/disk_files.h"
#include "kvstore/kv_store.h"
#include "kvstore/rate_limited_log.h"
#include "kvstore/record_codec.h"

namespace kvlm {

struct DiskStoreConfig {
  std::string dir;             // DIR (created if missing)
  uint64_t max_bytes = 0;      // size cap of this namespace's records; 0: no cap
  Hash128 ns;                  // namespace fingerprint
  TierSecurity security = {};  // --kv-secret-file, --kv-encrypt
  DiskFsync fsync = DiskFsync::kNone;  // what survives a power loss (disk_files.h)
};

class DiskStore final : public KvStore {
 public:
  // Throws Error(kInvalidArgument) if the directory cannot be created or read
  // (a configuration error the user must fix); everything after is a miss.
  static std::unique_ptr<DiskStore> open(const DiskStoreConfig& config);

  std::string_view name() const override { return "disk"; }
  size_t probe(std::span<const BlockHash> hashes) override;
  std::vector<KvRecord> load(std::span<const BlockHash> hashes, const Deadline& deadline) override;
  size_t store(std::span<const KvRecord> records) override;
  TierStats stats() const override;  // never waits for I/O
  using KvStore::load;

  // Whether the index holds `h` (tests, write-back decisions).
  bool contains(const BlockHash& h) const;
  // The namespace directory and a record's path in it.
  const std::string& ns_dir() const { return ns_dir_; }
  std::string record_path(const BlockHash& h) const { return name_path(codec_.name(h)); }
  // Record names (RecordCodec::name: the hashes without a secret) from least
  // to most recently used (tests assert eviction order).
  std::vector<Hash128> lru_order() const;

 private:
  explicit DiskStore(const DiskStoreConfig& config);
  struct Entry {
    uint64_t num_bytes = 0;
    std::list<Hash128>::iterator lru;
  };
  std::string name_path(const Hash128& name) const;
  void scan();
  void touch(Entry& e);
  void erase(Hash128 name, bool remove_file);
  bool make_room(uint64_t num_bytes);
  // 0, or the errno of the failed step (the temporary file is removed).
  int write_file(const Hash128& name, const std::string& bytes);
  // Removes least recently used records until num_bytes are freed; false if
  // there was nothing to remove.
  bool evict_for_space(uint64_t num_bytes);
  bool ensure_shard(const std::string& shard);
  void publish_size();  // copies the index size to the atomics stats() reads

  DiskStoreConfig config_;
  RecordCodec codec_;
  std::string ns_dir_;
  mutable std::mutex mu_;
  std::unordered_map<Hash128, Entry> index_;  // by record name
  std::list<Hash128> lru_;                    // front: least recently used
  std::unordered_set<std::string> shards_made_;
  uint64_t num_bytes_held_ = 0;
  uint64_t num_tmp_ = 0;
  std::atomic<int64_t> num_records_now_{0}, num_bytes_now_{0};
  TierCounters counters_;
  RateLimitedLog warn_{"disk"};
};

}  // namespace kvlm
