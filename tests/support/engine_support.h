// What the engine tests share (header-only: the test support library links
// no engine).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "engine/engine.h"

namespace kvlm::test {

// The README's invariant, a whole pool after every test: no block
// referenced, nothing running, waiting or unfinished once every request has
// ended. The step thread publishes metrics after each step, so the last
// step's publication gets a moment (up to a second).
inline void expect_pool_whole(Engine& engine) {
  for (int i = 0; i < 200 && (engine.metrics().num_kv_blocks_used != 0 || engine.metrics().num_running != 0); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const EngineMetrics m = engine.metrics();
  EXPECT_EQ(m.num_kv_blocks_used, 0) << "blocks still referenced after every request ended";
  EXPECT_EQ(m.num_running, 0);
  EXPECT_EQ(m.num_waiting, 0);
  EXPECT_EQ(engine.num_unfinished(), 0);
}

}  // namespace kvlm::test
