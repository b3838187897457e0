// The disk tier's crash promises (kvstore/disk_files.h): every fsync policy
// writes records a reopen reads back; temporary files of unfinished writes
// are removed when no live process will finish them, never counted as
// corrupt and never reported bad by verify; a live writer's are left alone.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "common/error.h"
#include "kvstore/disk_files.h"
#include "kvstore/disk_inventory.h"
#include "kvstore/disk_store.h"
#include "kvstore_test_util.h"

namespace kvlm {
namespace {

namespace fs = std::filesystem;
const Hash128 kNs{0x5eed, 0xd15c};

TEST(DiskDurability, EveryFsyncPolicyWritesRecordsAReopenReads) {
  for (DiskFsync policy : {DiskFsync::kNone, DiskFsync::kBatch, DiskFsync::kAlways}) {
    SCOPED_TRACE(std::string(disk_fsync_name(policy)));
    const std::string dir = test::fresh_dir("durable");
    auto chain = test::make_chain(6, 3);
    {
      DiskStoreConfig c{dir, 0, kNs};
      c.fsync = policy;
      auto s = DiskStore::open(c);
      EXPECT_EQ(s->store(chain), chain.size());
      EXPECT_EQ(s->stats().num_errors, 0);
    }
    auto s = DiskStore::open(DiskStoreConfig{dir, 0, kNs});
    auto got = s->load(test::hashes_of(chain));
    ASSERT_EQ(got.size(), chain.size());
    for (size_t i = 0; i < chain.size(); ++i) EXPECT_EQ(got[i].payload, chain[i].payload);
    const DiskVerifyReport r = verify_disk_tier(dir, false);
    EXPECT_EQ(r.num_ok, static_cast<int64_t>(chain.size()));
    EXPECT_TRUE(r.bad.empty());
  }
}

TEST(DiskDurability, PolicyNamesParseAndBadOnesNameTheFlag) {
  EXPECT_EQ(parse_disk_fsync("always"), DiskFsync::kAlways);
  EXPECT_EQ(parse_disk_fsync("batch"), DiskFsync::kBatch);
  EXPECT_EQ(parse_disk_fsync("none"), DiskFsync::kNone);
  try {
    parse_disk_fsync("sometimes");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--kv-disk-fsync"), std::string::npos) << e.what();
  }
}

TEST(DiskDurability, OrphanedTemporaryFilesGoAndALiveWritersStay) {
  const std::string dir = test::fresh_dir("orphans");
  auto chain = test::make_chain(2, 4);
  std::string path;
  {
    auto s = DiskStore::open(DiskStoreConfig{dir, 0, kNs});
    s->store(chain);
    path = s->record_path(chain[0].hash);
  }
  // A killed writer's half-written file, one of a live writer (our parent:
  // another process sharing the directory), and one named after this very
  // process (a previous life of a reused pid, as PID 1 in a container).
  const std::string dead = path + ".tmp." + std::to_string(test::dead_pid()) + ".7";
  const std::string live = path + ".tmp." + std::to_string(::getppid()) + ".3";
  const std::string mine = path + ".tmp." + std::to_string(::getpid()) + ".0";
  for (const auto& f : {dead, live, mine}) std::ofstream(f) << "half a record";

  const DiskVerifyReport before = verify_disk_tier(dir, false);
  EXPECT_TRUE(before.bad.empty());  // not records: never "bad"
  EXPECT_EQ(before.num_temp, 3);
  EXPECT_EQ(before.num_ok, 2);
  EXPECT_EQ(stat_disk_tier(dir).at(0).num_bad, 0);
  EXPECT_EQ(stat_disk_tier(dir).at(0).num_temp, 3);

  auto s = DiskStore::open(DiskStoreConfig{dir, 0, kNs});
  EXPECT_EQ(s->stats().num_corrupt, 0);
  EXPECT_EQ(s->stats().num_records, 2);
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_FALSE(fs::exists(mine));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_EQ(s->load(test::hashes_of(chain)).size(), 2u);
}

TEST(DiskDurability, VerifyRemovesOnlyOrphansWhenAsked) {
  const std::string dir = test::fresh_dir("orphans-verify");
  auto chain = test::make_chain(1, 5);
  std::string path;
  {
    auto s = DiskStore::open(DiskStoreConfig{dir, 0, kNs});
    s->store(chain);
    path = s->record_path(chain[0].hash);
  }
  const std::string dead = path + ".tmp." + std::to_string(test::dead_pid()) + ".1";
  const std::string live = path + ".tmp." + std::to_string(::getppid()) + ".1";
  std::ofstream(dead) << "x";
  std::ofstream(live) << "x";
  const DiskVerifyReport r = verify_disk_tier(dir, true);
  EXPECT_EQ(r.num_temp, 2);
  EXPECT_EQ(r.num_temp_removed, 1);
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(live));
}

}  // namespace
}  // namespace kvlm
