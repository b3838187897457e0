// KvStorage::read_block / write_block, the runner's side of the KV tiers: a
// block's bytes are every layer row's K then V block, exactly where the
// attention view reads them, and a write touches no other block.
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "model/model.h"
#include "runner/kv_storage.h"
#include "support/test_support.h"

namespace kvlm {
namespace {

class KvStorageBlocks : public ::testing::TestWithParam<const char*> {};

TEST_P(KvStorageBlocks, ReadWriteOneBlockThroughTheView) {
  auto model = Model::load(test::shared_path(std::string("models/") + GetParam() + ".gguf"));
  for (DType dtype : {DType::kF16, DType::kF32}) {
    KvStorage kv(*model, dtype, /*block_size=*/4, /*num_blocks=*/6);
    EXPECT_EQ(kv.block_bytes(), KvStorage::bytes_per_block(*model, dtype, 4));
    std::vector<std::byte> in(kv.block_bytes());
    std::mt19937 rng(1);
    for (auto& b : in) b = static_cast<std::byte>(rng() | 1);  // never zero
    kv.write_block(BlockId(3), in);

    std::vector<std::byte> out(kv.block_bytes());
    kv.read_block(BlockId(3), out);
    EXPECT_EQ(out, in);
    kv.read_block(BlockId(2), out);  // neighbours untouched (zero pages)
    EXPECT_EQ(out, std::vector<std::byte>(kv.block_bytes()));
    kv.read_block(BlockId(4), out);
    EXPECT_EQ(out, std::vector<std::byte>(kv.block_bytes()));

    // Every layer finds its K and V of block 3 in the payload, at its row.
    const KvCacheView& v = kv.view();
    const size_t bb = v.layout.block_bytes();
    for (size_t l = 0; l < v.layers.size(); ++l) {
      const auto* k = reinterpret_cast<const std::byte*>(v.layers[l].k) + 3 * bb;
      const auto* val = reinterpret_cast<const std::byte*>(v.layers[l].v) + 3 * bb;
      bool found = false;
      for (size_t at = 0; at + 2 * bb <= in.size(); at += 2 * bb)
        found |= std::equal(k, k + bb, in.begin() + static_cast<std::ptrdiff_t>(at)) &&
                 std::equal(val, val + bb, in.begin() + static_cast<std::ptrdiff_t>(at + bb));
      EXPECT_TRUE(found) << "layer " << l;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, KvStorageBlocks, ::testing::Values("stories260K", "synth-gemma2-F32"));

}  // namespace
}  // namespace kvlm
