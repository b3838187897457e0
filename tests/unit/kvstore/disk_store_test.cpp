// The disk tier: records survive a reopen; the size cap evicts least recently
// used records in order; damaged or foreign files are removed, never loaded;
// a cap below one record and a full filesystem are misses, not errors;
// folders and records are the owner's only.
#include <filesystem>
#include <fstream>

#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "common/error.h"
#include "kvstore/disk_store.h"
#include "kvstore_test_util.h"

namespace kvlm {
namespace {

namespace fs = std::filesystem;
const Hash128 kDiskNs{0xabc, 0xdef};

std::unique_ptr<DiskStore> open_disk_store(const std::string& dir, uint64_t max_bytes = 0, Hash128 ns = kDiskNs) {
  return DiskStore::open(DiskStoreConfig{dir, max_bytes, ns});
}

TEST(DiskStore, RecordsSurviveReopen) {
  const std::string dir = test::fresh_dir("disk");
  auto chain = test::make_chain(5, 1);
  auto hashes = test::hashes_of(chain);
  {
    auto s = open_disk_store(dir);
    EXPECT_EQ(s->probe(hashes), 0u);
    EXPECT_EQ(s->store(chain), 5u);
    EXPECT_EQ(s->store(chain), 0u);  // already held
    EXPECT_EQ(s->probe(hashes), 5u);
  }
  auto s = open_disk_store(dir);
  EXPECT_EQ(s->probe(hashes), 5u);
  auto got = s->load(hashes);
  ASSERT_EQ(got.size(), 5u);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].tokens, chain[i].tokens);
    EXPECT_EQ(got[i].payload, chain[i].payload);
    EXPECT_EQ(got[i].parent, chain[i].parent);
  }
  TierStats st = s->stats();
  EXPECT_EQ(st.num_records, 5);
  EXPECT_EQ(st.num_hit_blocks, 5);
  EXPECT_EQ(st.num_corrupt, 0);
  // Another namespace in the same directory sees nothing and removes nothing.
  auto other = open_disk_store(dir, 0, Hash128{1, 2});
  EXPECT_EQ(other->probe(hashes), 0u);
  EXPECT_EQ(open_disk_store(dir)->probe(hashes), 5u);
}

TEST(DiskStore, ProbeAndLoadStopAtTheFirstMiss) {
  auto s = open_disk_store(test::fresh_dir("disk"));
  auto chain = test::make_chain(4, 2);
  s->store(std::span(chain).subspan(0, 2));
  s->store(std::span(chain).subspan(3, 1));
  auto hashes = test::hashes_of(chain);
  EXPECT_EQ(s->probe(hashes), 2u);
  EXPECT_EQ(s->load(hashes).size(), 2u);
}

TEST(DiskStore, SizeCapEvictsLeastRecentlyUsedInOrder) {
  auto chain = test::make_chain(6, 3);
  const uint64_t rec = encoded_record_bytes(16, 512);
  const std::string dir = test::fresh_dir("disk");
  auto s = open_disk_store(dir, 4 * rec);
  s->store(std::span(chain).subspan(0, 4));
  // Use block 0, so block 1 is now the least recently used.
  ASSERT_EQ(s->load(std::vector<BlockHash>{chain[0].hash}).size(), 1u);
  s->store(std::span(chain).subspan(4, 2));
  // Without a secret a record's name is its hash.
  EXPECT_EQ(s->lru_order(),
            (std::vector<Hash128>{chain[3].hash.value, chain[0].hash.value, chain[4].hash.value, chain[5].hash.value}));
  EXPECT_FALSE(fs::exists(s->record_path(chain[1].hash)));
  EXPECT_FALSE(fs::exists(s->record_path(chain[2].hash)));
  TierStats st = s->stats();
  EXPECT_EQ(st.num_evicted, 2);
  EXPECT_EQ(st.num_bytes_held, static_cast<int64_t>(4 * rec));
  // A smaller cap at the next open evicts down to it.
  s.reset();
  auto small = open_disk_store(dir, 2 * rec);
  EXPECT_EQ(small->stats().num_records, 2);
}

TEST(DiskStore, CapSmallerThanOneRecordStoresNothing) {
  auto s = open_disk_store(test::fresh_dir("disk"), 100);
  auto chain = test::make_chain(2, 4);
  EXPECT_EQ(s->store(chain), 0u);
  EXPECT_EQ(s->probe(test::hashes_of(chain)), 0u);
  EXPECT_EQ(s->stats().num_blocks_dropped, 2);
}

void flip_byte(const std::string& path, size_t at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(at));
  char c;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x10);
  f.seekp(static_cast<std::streamoff>(at));
  f.write(&c, 1);
}

TEST(DiskStore, CorruptAndForeignFilesAreRemovedNotLoaded) {
  const std::string dir = test::fresh_dir("disk");
  auto chain = test::make_chain(6, 5);
  auto hashes = test::hashes_of(chain);
  std::vector<std::string> paths;
  {
    auto s = open_disk_store(dir);
    s->store(chain);
    for (const auto& h : hashes) paths.push_back(s->record_path(h));
  }
  fs::resize_file(paths[1], fs::file_size(paths[1]) - 3);                 // truncated
  flip_byte(paths[2], 10);                                                // another namespace (header)
  flip_byte(paths[3], 300);                                               // payload bit flip
  { std::ofstream(paths[4], std::ios::binary | std::ios::trunc) << "junk"; }  // garbage
  // A valid record of another model under this namespace's directory.
  {
    auto other = test::make_chain(1, 99);
    std::ofstream(paths[5], std::ios::binary | std::ios::trunc) << encode_record(Hash128{7, 7}, other[0]);
  }
  const std::string orphan = paths[0] + ".tmp." + std::to_string(test::dead_pid()) + ".1";
  std::ofstream(orphan) << "left over from a crash";
  std::ofstream(fs::path(paths[0]).parent_path() / "stray.txt") << "x";

  auto s = open_disk_store(dir);
  // The scan removed what its header check sees: truncation, the flipped
  // namespace, garbage, the foreign record, the stray file.
  EXPECT_EQ(s->stats().num_corrupt, 5);
  EXPECT_FALSE(fs::exists(paths[1]));
  EXPECT_FALSE(fs::exists(paths[2]));
  EXPECT_TRUE(fs::exists(paths[3]));
  EXPECT_FALSE(fs::exists(orphan));
  EXPECT_EQ(s->probe(hashes), 1u);
  // The payload flip is caught by the checksum at load, then removed.
  std::vector<BlockHash> from3 = {hashes[3]};
  EXPECT_EQ(s->probe(from3), 1u);
  EXPECT_TRUE(s->load(from3).empty());
  EXPECT_EQ(s->stats().num_corrupt, 6);
  EXPECT_FALSE(fs::exists(paths[3]));
  EXPECT_EQ(s->probe(from3), 0u);
  EXPECT_EQ(s->load(hashes).size(), 1u);
}

TEST(DiskStore, UnusableDirectoryIsAClearError) {
  const std::string file = test::fresh_dir("disk") + "/a-file";
  std::ofstream(file) << "x";
  try {
    open_disk_store(file);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--kv-disk"), std::string::npos) << e.what();
  }
}

// The permission bits of `path` (0 if it cannot be stat'ed).
mode_t mode_of(const fs::path& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? (st.st_mode & 07777) : 0;
}

// Sets the umask for a test's scope: the process's, restored at its end.
class ScopedUmask {
 public:
  explicit ScopedUmask(mode_t mask) : previous_(::umask(mask)) {}
  ~ScopedUmask() { ::umask(previous_); }

 private:
  mode_t previous_;
};

// Records hold prompts' token ids: under the most permissive umask (0) the
// folders the store makes are 0700 and its records 0600; the --kv-disk
// folder the user made keeps its mode; a namespace folder an older release
// left 0755 is closed when the store opens.
TEST(DiskStore, FilesAndFoldersAreTheOwnersOnly) {
  const ScopedUmask permissive(0);
  const std::string user_dir = test::fresh_dir("disk");
  ASSERT_EQ(::chmod(user_dir.c_str(), 0755), 0);
  const std::string dir = user_dir + "/made/by/kvlm";
  auto chain = test::make_chain(3, 11);
  {
    auto s = open_disk_store(dir);
    ASSERT_EQ(s->store(chain), 3u);
    for (const fs::path& d : {fs::path(user_dir) / "made", fs::path(user_dir) / "made/by", fs::path(dir),
                              fs::path(s->ns_dir())})
      EXPECT_EQ(mode_of(d), 0700u) << d;
    int num_records = 0;
    for (const auto& e : fs::recursive_directory_iterator(s->ns_dir())) {
      if (e.is_directory()) {
        EXPECT_EQ(mode_of(e.path()), 0700u) << e.path() << " (a shard)";
      } else {
        EXPECT_EQ(mode_of(e.path()), 0600u) << e.path();
        ++num_records;
      }
    }
    EXPECT_EQ(num_records, 3);
    EXPECT_EQ(mode_of(user_dir), 0755u) << "the user's own folder";
    ASSERT_EQ(::chmod(s->ns_dir().c_str(), 0755), 0);  // as an older release made it
  }
  auto reopened = open_disk_store(dir);
  EXPECT_EQ(mode_of(reopened->ns_dir()), 0700u);
  EXPECT_EQ(reopened->probe(test::hashes_of(chain)), 3u);
}

// A real full filesystem: a 64 KiB tmpfs (as root). Where mounting is not
// allowed, a shard path blocked by a plain file makes every write fail the
// same way (the store sees an I/O error, as with ENOSPC).
TEST(DiskStore, FullFilesystemIsAMissNotAnError) {
  const std::string dir = test::fresh_dir("tmpfs");
  const bool mounted = ::geteuid() == 0 && ::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=64k") == 0;
  struct Unmount {
    std::string dir;
    bool on;
    ~Unmount() {
      if (on) ::umount2(dir.c_str(), MNT_DETACH);
    }
  } unmount{dir, mounted};
  auto chain = test::make_chain(40, 6, 4096);  // ~160 KiB: past the tmpfs
  auto s = open_disk_store(dir);
  if (!mounted) {
    for (const auto& r : chain) {
      std::string shard = fs::path(s->record_path(r.hash)).parent_path();
      fs::remove_all(shard);
      std::ofstream(shard) << "blocks the shard directory";
    }
  }
  size_t num_stored = 0;
  EXPECT_NO_THROW(num_stored = s->store(chain));
  auto hashes = test::hashes_of(chain);
  auto held = [&] {
    size_t n = 0;
    for (const auto& h : hashes) n += s->contains(h) ? 1 : 0;
    return n;
  };
  if (mounted) {
    // The filesystem filled up: each newer block got in by evicting the least
    // recently used ones, as under the size cap; the newest are held.
    EXPECT_EQ(num_stored, chain.size());
    EXPECT_LT(held(), chain.size());
    EXPECT_GT(held(), 0u);
    EXPECT_TRUE(s->contains(chain.back().hash));
    EXPECT_FALSE(s->contains(chain.front().hash));
    EXPECT_GT(s->stats().num_evicted, 0);
    // A record larger than the whole filesystem is a dropped write.
    auto huge = test::make_chain(1, 7, 128 * 1024);
    EXPECT_NO_THROW(EXPECT_EQ(s->store(huge), 0u));
    EXPECT_EQ(s->stats().num_blocks_dropped, 1);
    RecordProperty("full_filesystem", "tmpfs");
  } else {
    EXPECT_EQ(num_stored, 0u);
    EXPECT_EQ(s->stats().num_blocks_dropped, static_cast<int64_t>(chain.size()));
  }
  EXPECT_GT(s->stats().num_errors, 0);
  // What is held loads; nothing half-written is left behind.
  const size_t num_held = held();
  EXPECT_EQ(s->load(std::span(hashes).subspan(hashes.size() - num_held)).size(), num_held);
  for (auto& e : fs::recursive_directory_iterator(dir))
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
}

}  // namespace
}  // namespace kvlm
