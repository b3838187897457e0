// StreamDeliverer runs batches in the order they were posted, each in its own
// order, and delivers everything posted before its destructor returns.
#include <gtest/gtest.h>

#include <mutex>
#include <vector>

#include "engine/stream_deliverer.h"

namespace kvlm::stream_deliverer_test {

TEST(StreamDeliverer, RunsEveryDeliveryInPostOrder) {
  std::mutex mu;
  std::vector<int> seen;
  {
    StreamDeliverer d;
    std::vector<StreamDeliverer::Delivery> batch;
    for (int b = 0; b < 50; ++b) {
      for (int i = 0; i < 7; ++i)
        batch.push_back([&, v = b * 7 + i] {
          std::lock_guard lock(mu);
          seen.push_back(v);
        });
      d.post(batch);
      EXPECT_TRUE(batch.empty()) << "post takes the batch";
    }
    d.post(batch);  // empty: nothing to do
  }
  ASSERT_EQ(seen.size(), 350u);
  for (int v = 0; v < 350; ++v) EXPECT_EQ(seen[v], v);
}

}  // namespace kvlm::stream_deliverer_test
