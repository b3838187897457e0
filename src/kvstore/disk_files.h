// What the disk tier promises after a crash, and the file-level steps that
// keep it (docs/kv-tiers.md "Durability").
//
// A record is written to <record>.tmp.<pid>.<n> and renamed over its name,
// so a reader sees a whole file or none. The fsync policy decides what
// survives a power loss, not a process crash (a killed process loses only
// the record it was writing: its temporary file is an orphan):
//   none    no fsync: the page cache writes back in its own time; after a
//           power loss recent records may be missing, empty or torn, and the
//           scan or the checksum refuses those (a miss, never wrong KV).
//   batch   one syncfs() of the tier's filesystem after each write-back
//           batch: a batch is durable when its store returns; a power loss
//           during one can tear records of that batch only (refused as above).
//   always  per record: write, fsync the file, rename, fsync its directory:
//           a record is durable before the next one is written, never torn.
#pragma once

#include <string>
#include <string_view>

#include <sys/types.h>

namespace kvlm {

// The tier's folders and record files hold prompts' token ids (and, without
// --kv-encrypt, their KV): this user's only, whatever the umask (a mode
// passed to mkdir or open is only ever narrowed by the umask).
inline constexpr mode_t kPrivateDirMode = 0700;
inline constexpr mode_t kPrivateFileMode = 0600;

// Creates `dir` and its missing parents, each kPrivateDirMode; folders that
// exist stay as they are. 0 or the errno of the first mkdir that failed.
int make_private_directories(const std::string& dir);

enum class DiskFsync { kNone, kBatch, kAlways };

// "none", "batch", "always"; throws Error(kInvalidArgument) naming the flag.
DiskFsync parse_disk_fsync(std::string_view name);
std::string_view disk_fsync_name(DiskFsync f);

// Whether a file name is a record write's temporary file.
bool is_temp_record_file(std::string_view file_name);

// Whether no process will ever finish (rename) this temporary file: its
// writer is gone, or is this very process (which calls this only before it
// writes anything, so a writer with our pid is a previous life of a reused
// pid, as PID 1 in a restarted container). A live other writer's file is
// not an orphan: two processes may share a tier directory.
bool temp_file_is_orphan(std::string_view file_name);

// fsync() of a directory (its entries: a rename or a new file in it); 0 or
// the errno.
int fsync_directory(const std::string& dir);

// syncfs() of the filesystem holding `dir`; 0 or the errno.
int sync_filesystem_of(const std::string& dir);

}  // namespace kvlm
