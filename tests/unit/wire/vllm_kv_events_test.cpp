// vLLM's KV events: the exact bytes of each event type in a batch (vLLM's
// msgspec layout: tagged positional arrays), and the Converter's rules —
// parents published before children, orphans and duplicates held back,
// only published blocks removed, chains and removals in runs.
#include <gtest/gtest.h>

#include <string>

#include "support/test_support.h"
#include "wire/kv_events/vllm_kv_events.h"

namespace kvlm {
namespace {

using namespace vllm_events;
using Kind = KvEvent::Kind;

BlockHash h(uint64_t lo) { return BlockHash{Hash128{lo, 0x1234}}; }

KvEvent stored(uint64_t hash, std::optional<uint64_t> parent, std::vector<int32_t> tokens, uint64_t salt = 0) {
  KvEvent e{Kind::kStored, h(hash)};
  if (parent) e.parent = h(*parent);
  e.tokens = std::move(tokens);
  e.salt = salt;
  return e;
}

KvEvent removed(uint64_t hash) { return KvEvent{Kind::kRemoved, h(hash)}; }

TEST(VllmKvEvents, EachEventsBytes) {
  BlockStored s{{0x8000000000000001ull}, std::nullopt, {1, 300}, 2, "CPU", {}};
  EXPECT_EQ(test::hex_bytes(encode_batch(1.5, std::vector<Event>{s}, 0)),
            "93"                         // [ts, events, dp_rank]
            "cb3ff8000000000000"         // ts 1.5
            "91"                         // one event
            "98"                         // BlockStored's 8 fields (extra_keys left out)
            "ab426c6f636b53746f726564"   // "BlockStored"
            "91cf8000000000000001"       // block_hashes: one uint64 above 2^63
            "c0"                         // parent_block_hash: none
            "9201cd012c"                 // token_ids [1, 300]
            "02"                         // block_size
            "c0"                         // lora_id
            "a3435055"                   // medium "CPU"
            "c0"                         // lora_name
            "00");                       // dp_rank
  s.parent_block_hash = 7;
  s.extra_keys = {std::vector<std::string>{"ab"}, std::nullopt};
  EXPECT_EQ(test::hex_bytes(encode_batch(1.5, std::vector<Event>{s}, 0)).substr(22),
            "99ab426c6f636b53746f72656491cf800000000000000107"
            "9201cd012c02c0a3435055c0"
            "9291a26162c0"  // extra_keys [["ab"], nil]
            "00");
  EXPECT_EQ(test::hex_bytes(encode_batch(1.5, std::vector<Event>{BlockRemoved{{5, 6}, "CPU"}, AllBlocksCleared{}}, 3)),
            "93cb3ff800000000000092"
            "93ac426c6f636b52656d6f766564920506a3435055"  // ["BlockRemoved", [5, 6], "CPU"]
            "91b0416c6c426c6f636b73436c6561726564"        // ["AllBlocksCleared"]
            "03");
}

TEST(VllmKvEvents, TopicNamesTheAddressAndTheModel) {
  EXPECT_EQ(topic("10.0.0.5:8000", "stories"), "kv@10.0.0.5:8000@stories");
}

TEST(VllmKvEvents, AChainIsOneRunWithItsParentsAndSaltFirst) {
  Converter c(2, "CPU");
  const std::vector<Event> out =
      c.convert(std::vector<KvEvent>{stored(1, std::nullopt, {10, 11}, 0xabc), stored(2, 1, {12, 13})});
  ASSERT_EQ(out.size(), 1u);
  const auto& s = std::get<BlockStored>(out[0]);
  EXPECT_EQ(s.block_hashes, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(s.parent_block_hash, std::nullopt);
  EXPECT_EQ(s.token_ids, (std::vector<int32_t>{10, 11, 12, 13}));
  EXPECT_EQ(s.block_size, 2);
  EXPECT_EQ(s.medium, "CPU");
  ASSERT_EQ(s.extra_keys.size(), 2u);
  EXPECT_EQ(s.extra_keys[0], std::vector<std::string>{"0000000000000abc"});
  EXPECT_EQ(s.extra_keys[1], std::nullopt);
  // The next step continues the chain: its parent is the last published block.
  const std::vector<Event> next = c.convert(std::vector<KvEvent>{stored(3, 2, {14, 15})});
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(std::get<BlockStored>(next[0]).parent_block_hash, 2u);
  EXPECT_TRUE(std::get<BlockStored>(next[0]).extra_keys.empty());
}

TEST(VllmKvEvents, OrphansDuplicatesAndUnknownBlocksAreHeldBack) {
  Converter c(2, "CPU");
  const std::vector<Event> out = c.convert(std::vector<KvEvent>{
      stored(1, std::nullopt, {1, 2}),
      stored(1, std::nullopt, {1, 2}),  // held already
      stored(5, 4, {3, 4}),             // parent 4 never published: an orphan
      stored(6, 5, {5, 6}),             // ... and so is its child
      KvEvent{Kind::kStored, h(7)},     // no content (another KV group's key, a tier without contents)
      stored(8, std::nullopt, {1}),     // not a whole block
      removed(5),                       // never published: not removed either
      removed(1),
      removed(1),                       // already gone
  });
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(std::get<BlockStored>(out[0]).block_hashes, std::vector<uint64_t>{1});
  EXPECT_EQ(std::get<BlockRemoved>(out[1]).block_hashes, std::vector<uint64_t>{1});
  EXPECT_EQ(c.num_published(), 0u);
}

TEST(VllmKvEvents, RunsBreakWhereTheChainOrTheKindChanges) {
  Converter c(1, "CPU");
  const std::vector<Event> out = c.convert(std::vector<KvEvent>{
      stored(1, std::nullopt, {1}), stored(2, 1, {2}),
      stored(3, 1, {3}),  // a second child of 1: a new run with parent 1
      removed(2), removed(3),
      stored(4, std::nullopt, {4}),
  });
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(std::get<BlockStored>(out[0]).block_hashes, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(std::get<BlockStored>(out[1]).parent_block_hash, 1u);
  EXPECT_EQ(std::get<BlockStored>(out[1]).block_hashes, std::vector<uint64_t>{3});
  EXPECT_EQ(std::get<BlockRemoved>(out[2]).block_hashes, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(std::get<BlockStored>(out[3]).parent_block_hash, std::nullopt);
  // A block whose parent has just left is an orphan: only the removal goes out.
  const std::vector<Event> last = c.convert(std::vector<KvEvent>{removed(1), stored(5, 1, {5})});
  ASSERT_EQ(last.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<BlockRemoved>(last[0]));
  EXPECT_EQ(c.num_published(), 1u);  // 4
  EXPECT_TRUE(std::holds_alternative<AllBlocksCleared>(c.clear()));
  EXPECT_EQ(c.num_published(), 0u);
}

}  // namespace
}  // namespace kvlm
