// Helpers the constrain/ tests share.
#pragma once

#include <memory>
#include <string_view>

#include "constrain/matcher.h"

namespace kvlm::constrain::test_helpers {

// Whether the whole of s is a complete match of program p.
inline bool matches(const std::shared_ptr<const Program>& p, std::string_view s) {
  Matcher m(p);
  return m.advance(s) && m.accepting();
}

}  // namespace kvlm::constrain::test_helpers
