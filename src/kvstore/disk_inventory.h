// Offline tools over a disk tier directory (`kvlm kv stat|verify|clear`):
// what it holds per namespace, a full check of every record, removal. They
// read the layout of disk_store.h and may run while no server uses DIR.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/hash.h"
#include "kvstore/tier_secret.h"

namespace kvlm {

struct DiskNamespaceSummary {
  Hash128 ns;               // the directory's name: the namespace, or (a tier secret) a keyed hash of it
  int64_t num_records = 0;  // files that look like records (header check)
  int64_t num_authenticated = 0;  // ... of which written with a tier secret (formats 2 and 3)
  int64_t num_bytes = 0;    // their bytes
  int64_t num_bad = 0;      // files whose header is wrong (truncated, foreign, garbage)
  int64_t num_temp = 0;     // temporary files of writes (in flight, or left by a killed process)
};

// Per namespace directory, from file headers only (fast). Throws
// Error(kNotFound) if `dir` is not a directory.
std::vector<DiskNamespaceSummary> stat_disk_tier(const std::string& dir);

struct BadRecord {
  std::string path;
  std::string reason;
};
struct DiskVerifyReport {
  int64_t num_ok = 0;
  int64_t num_bytes_ok = 0;
  int64_t num_unchecked = 0;  // authenticated records, not checked without the secret
  std::vector<BadRecord> bad;
  int64_t num_temp = 0;          // temporary files of writes: not records, never bad
  int64_t num_temp_removed = 0;  // those removed (with remove_bad, when no live process will finish them)
};

// Reads and decodes every record: checksum (or, with `security`'s keys, MAC
// or tag), namespace matching its directory's name, hash matching its file
// name. Records written with a tier secret are counted unchecked when
// `security` has none. With remove_bad, bad files and orphaned temporary
// files (disk_files.h) are deleted. Throws Error(kNotFound) if `dir` is not
// a directory.
DiskVerifyReport verify_disk_tier(const std::string& dir, bool remove_bad, const TierSecurity& security = {});

// Removes every namespace directory under `dir` (nothing else); returns the
// number of record files removed.
int64_t clear_disk_tier(const std::string& dir);

}  // namespace kvlm
