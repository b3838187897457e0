// BlockTable's change tracking and BlockTableMirror: every way a table can
// change reaches the mirror, and only the changed tail travels.
#include <gtest/gtest.h>

#include <vector>

#include "kv/block_table.h"

namespace kvlm {
namespace {

std::vector<BlockId> block_ids(std::initializer_list<int32_t> v) {
  std::vector<BlockId> out;
  for (int32_t x : v) out.push_back(BlockId(x));
  return out;
}

// Sends the table's change to the mirror; returns what travelled.
BlockTableChange sync(BlockTable& t, BlockTableMirror& m, RequestId id = RequestId(1)) {
  BlockTableChange c = t.take_change();
  const BlockTableChange sent[] = {c};
  const auto& copy = m.apply(id, sent)[0];
  EXPECT_EQ(copy.ids.size(), t.size());
  for (size_t i = 0; i < t.size() && i < copy.ids.size(); ++i) EXPECT_EQ(copy.ids[i], t[i].value()) << "entry " << i;
  EXPECT_EQ(copy.num_released, t.num_released);
  return c;
}

TEST(BlockTable, FirstChangeIsTheWholeTableThenOnlyWhatChanged) {
  BlockTable t;
  BlockTableMirror m;
  t.append(block_ids({4, 5, 6}));
  BlockTableChange c = sync(t, m);
  EXPECT_EQ(c.keep, 0);
  EXPECT_EQ(c.append, (std::vector<int32_t>{4, 5, 6}));

  c = sync(t, m);  // nothing happened
  EXPECT_EQ(c.keep, 3);
  EXPECT_TRUE(c.append.empty());

  t.push_back(BlockId(9));
  c = sync(t, m);
  EXPECT_EQ(c.keep, 3);
  EXPECT_EQ(c.append, (std::vector<int32_t>{9}));
}

TEST(BlockTable, EveryMutatorReachesTheMirror) {
  BlockTable t;
  BlockTableMirror m;
  t.append(block_ids({0, 1, 2, 3, 4, 5}));
  sync(t, m);

  t.set(4, BlockId(40));  // a copy-on-write
  BlockTableChange c = sync(t, m);
  EXPECT_EQ(c.keep, 4);
  EXPECT_EQ(c.append, (std::vector<int32_t>{40, 5}));

  t.erase(1);  // a run evicted across two blocks
  c = sync(t, m);
  EXPECT_EQ(c.keep, 1);
  EXPECT_EQ(c.append, (std::vector<int32_t>{2, 3, 40, 5}));

  t.truncate(3);  // blocks emptied by a compaction
  c = sync(t, m);
  EXPECT_EQ(c.keep, 3);
  EXPECT_TRUE(c.append.empty());

  t.assign(block_ids({0, 2, 7, 8}));  // whole blocks dropped: the change starts at the first difference
  c = sync(t, m);
  EXPECT_EQ(c.keep, 2);
  EXPECT_EQ(c.append, (std::vector<int32_t>{7, 8}));

  t.num_released = 1;  // a window group's release changes no entry
  c = sync(t, m);
  EXPECT_EQ(c.keep, 4);
  EXPECT_EQ(c.num_released, 1);
}

TEST(BlockTable, SeveralChangesBetweenStepsTravelAsOne) {
  BlockTable t;
  BlockTableMirror m;
  t.append(block_ids({0, 1, 2, 3}));
  sync(t, m);
  t.set(3, BlockId(30));
  t.set(1, BlockId(10));
  t.truncate(2);
  t.push_back(BlockId(7));
  BlockTableChange c = sync(t, m);
  EXPECT_EQ(c.keep, 1);
  EXPECT_EQ(c.append, (std::vector<int32_t>{10, 7}));
}

TEST(BlockTableMirror, ForgetDropsARequestAndAWholeTableStartsAgain) {
  BlockTable a, b;
  BlockTableMirror m;
  a.append(block_ids({1, 2}));
  b.append(block_ids({3}));
  sync(a, m, RequestId(1));
  sync(b, m, RequestId(2));
  EXPECT_EQ(m.num_requests(), 2u);
  m.forget(RequestId(1));
  EXPECT_EQ(m.num_requests(), 1u);
  // A preempted request comes back with a new table: sent whole, over any stale copy.
  BlockTable again;
  again.append(block_ids({5, 6, 7}));
  BlockTableChange c = sync(again, m, RequestId(2));
  EXPECT_EQ(c.keep, 0);
}

}  // namespace
}  // namespace kvlm
