// KvEventLog: numbered batches of what entered and left the prefix cache, a
// snapshot that equals the events applied in order, and readers that fall
// behind the log told to start again from a snapshot.
#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include "engine/kv_event_log.h"

namespace kvlm::kv_event_log_test {

using Kind = KvEvent::Kind;

BlockHash h(uint64_t v) { return BlockHash{Hash128{v, v * 31}}; }

std::vector<BlockHash> sorted(std::vector<BlockHash> v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST(KvEventLog, BatchesAreNumberedAndTheSnapshotAppliesThem) {
  KvEventLog log(8);
  EXPECT_EQ(log.snapshot().seq, 0u);
  log.append(std::vector<KvEvent>{{Kind::kStored, h(1)}, {Kind::kStored, h(2)}});
  log.append(std::vector<KvEvent>{});  // an idle step: no batch
  log.append(std::vector<KvEvent>{{Kind::kRemoved, h(1)}, {Kind::kStored, h(3)}});
  const KvEventLog::Snapshot s = log.snapshot();
  EXPECT_EQ(s.seq, 2u);
  EXPECT_EQ(sorted(s.hashes), sorted({h(2), h(3)}));
  auto all = log.read_after(0, std::chrono::milliseconds(0));
  ASSERT_TRUE(all);
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].seq, 1u);
  EXPECT_EQ((*all)[0].stored, (std::vector<BlockHash>{h(1), h(2)}));
  EXPECT_EQ((*all)[1].removed, std::vector<BlockHash>{h(1)});
  auto none = log.read_after(2, std::chrono::milliseconds(1));
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->empty());
  EXPECT_FALSE(log.read_after(3, std::chrono::milliseconds(0))) << "ahead of the log: another instance";
}

TEST(KvEventLog, AReaderBehindTheRingMustResync) {
  KvEventLog log(3);
  for (uint64_t i = 1; i <= 5; ++i) log.append(std::vector<KvEvent>{{Kind::kStored, h(i)}});
  EXPECT_FALSE(log.read_after(1, std::chrono::milliseconds(0))) << "batch 2 has left the log";
  auto kept = log.read_after(2, std::chrono::milliseconds(0));
  ASSERT_TRUE(kept);
  ASSERT_EQ(kept->size(), 3u);
  EXPECT_EQ(kept->front().seq, 3u);
  EXPECT_EQ(log.snapshot().hashes.size(), 5u);
}

TEST(KvEventLog, AWaitingReaderWakesOnAppendAndClose) {
  KvEventLog log;
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    log.append(std::vector<KvEvent>{{Kind::kStored, h(9)}});
  });
  auto got = log.read_after(0, std::chrono::seconds(10));
  writer.join();
  ASSERT_TRUE(got);
  ASSERT_EQ(got->size(), 1u);
  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    log.close();
  });
  const auto start = std::chrono::steady_clock::now();
  auto after_close = log.read_after(1, std::chrono::seconds(10));
  closer.join();
  EXPECT_TRUE(after_close && after_close->empty());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_TRUE(log.closed());
}

// A log kept for the ZMQ publisher also keeps each step's events as they
// came (not their net effect), contents included; the default keeps none.
TEST(KvEventLog, KeepsTheEventsThemselvesOnlyWhenAsked) {
  KvEvent stored{KvEvent::Kind::kStored, h(1)};
  stored.tokens = {5, 6};
  const std::vector<KvEvent> step = {stored, {KvEvent::Kind::kRemoved, h(1)}, stored};
  KvEventLog kept(8, /*keep_events=*/true);
  kept.append(step);
  auto batches = kept.read_after(0, std::chrono::milliseconds(0));
  ASSERT_TRUE(batches && batches->size() == 1);
  EXPECT_EQ((*batches)[0].events, step);
  EXPECT_EQ((*batches)[0].stored, std::vector<BlockHash>{h(1)});
  KvEventLog plain(8);
  plain.append(step);
  batches = plain.read_after(0, std::chrono::milliseconds(0));
  ASSERT_TRUE(batches && batches->size() == 1);
  EXPECT_TRUE((*batches)[0].events.empty());
}

}  // namespace kvlm::kv_event_log_test

namespace kvlm::kv_event_log_test {

TEST(KvEventLog, ABatchIsTheStepsNetEffect) {
  KvEventLog log;
  const BlockHash a{Hash128{1, 2}}, b{Hash128{3, 4}}, c{Hash128{5, 6}};
  log.append(std::vector<KvEvent>{{KvEvent::Kind::kStored, a}, {KvEvent::Kind::kStored, b}});
  // b leaves and comes back, a leaves, c comes and goes: net a removed.
  log.append(std::vector<KvEvent>{{KvEvent::Kind::kRemoved, b},
                                  {KvEvent::Kind::kStored, c},
                                  {KvEvent::Kind::kRemoved, a},
                                  {KvEvent::Kind::kStored, b},
                                  {KvEvent::Kind::kRemoved, c}});
  auto batches = log.read_after(1, std::chrono::milliseconds(0));
  ASSERT_TRUE(batches && batches->size() == 1);
  EXPECT_EQ((*batches)[0].stored, std::vector<BlockHash>{b});
  EXPECT_EQ(sorted((*batches)[0].removed), sorted({a, c}));
  EXPECT_EQ(log.snapshot().hashes, std::vector<BlockHash>{b});
}

}  // namespace kvlm::kv_event_log_test
