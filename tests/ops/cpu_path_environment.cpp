// ctest runs this binary once more per CPU path with KVLM_CPU_PATH set
// (tests/CMakeLists.txt), so the ops, attention and activation tests, which
// call the active path's kernels, cover every path. On a CPU without the
// named path every test is skipped rather than failing at the first kernel.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>

#include "backend/cpu/cpu_path.h"

namespace kvlm {
namespace {

class CpuPathEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* env = std::getenv("KVLM_CPU_PATH");
    if (env == nullptr || *env == '\0') return;
    const std::optional<CpuPath> path = parse_cpu_path(env);
    ASSERT_TRUE(path.has_value()) << "KVLM_CPU_PATH=" << env;
    if (!cpu_path_supported(*path)) GTEST_SKIP() << "this CPU cannot run KVLM_CPU_PATH=" << env;
    ASSERT_EQ(active_cpu_path(), *path);
  }
};

[[maybe_unused]] ::testing::Environment* const kEnvironment =
    ::testing::AddGlobalTestEnvironment(new CpuPathEnvironment);

}  // namespace
}  // namespace kvlm
