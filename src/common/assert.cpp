#include "common/assert.h"

#include <cstdio>
#include <cstdlib>

namespace kvlm::detail {

void assert_fail(const char* expr, const char* file, int line, const char* msg) {
  std::fprintf(stderr, "kvlm: internal invariant failed: %s (%s) at %s:%d\n", msg, expr, file,
               line);
  std::fflush(stderr);
  std::abort();
}

}  // namespace kvlm::detail
