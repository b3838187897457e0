// Offline tools over a disk tier directory (`kvlm kv stat|verify|clear`):
// what it holds per namespace, a full check of every record, removal. They
// read the layout of disk_store.h and may run while no server uses DIR.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/hash.h"

namespace kvlm {

struct DiskNamespaceSummary {
  Hash128 ns;
  int64_t num_records = 0;  // files that look like records (header check)
  int64_t num_bytes = 0;    // their bytes
  int64_t num_bad = 0;      // files whose header is wrong (truncated, foreign, garbage)
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
  std::vector<BadRecord> bad;
};

// Reads and decodes every record: checksum, namespace equal to its
// directory's, hash equal to its file name. With remove_bad, bad files are
// deleted. Throws Error(kNotFound) if `dir` is not a directory.
DiskVerifyReport verify_disk_tier(const std::string& dir, bool remove_bad);

// Removes every namespace directory under `dir` (nothing else); returns the
// number of record files removed.
int64_t clear_disk_tier(const std::string& dir);

}  // namespace kvlm
