// Invariant checks that stay on in every build type: a failed KVLM_ASSERT is a
// bug in kvlm (refcount underflow, double free, shape mismatch between our own
// buffers), never a reaction to user input — user input gets kvlm::Error.
#pragma once

namespace kvlm::detail {
[[noreturn]] void assert_fail(const char* expr, const char* file, int line, const char* msg);
}

#define KVLM_ASSERT(cond, msg)                                          \
  do {                                                                  \
    if (!(cond)) ::kvlm::detail::assert_fail(#cond, __FILE__, __LINE__, msg); \
  } while (0)
