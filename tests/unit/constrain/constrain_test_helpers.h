// Helpers the constrain/ tests share.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "constrain/compile_budget.h"
#include "constrain/json_schema.h"
#include "constrain/matcher.h"

namespace kvlm::constrain::test_helpers {

// Whether the whole of s is a complete match of program p.
inline bool matches(const std::shared_ptr<const Program>& p, std::string_view s) {
  Matcher m(p);
  return m.advance(s) && m.accepting();
}

inline constexpr int64_t kMiB = 1 << 20;

// anyOf of n objects {"f<salt>I": integer}: the costliest hostile shape
// (docs/performance.md, "Memory under hostile structured output").
inline Json any_of_objects(int n, const std::string& salt = "") {
  Json list = Json::array();
  for (int i = 0; i < n; ++i) {
    const std::string key = fmt::format("f{}{}", salt, i);
    list.push_back({{"type", "object"}, {"properties", {{key, {{"type", "integer"}}}}}, {"required", {key}}});
  }
  return {{"anyOf", list}};
}

// The limit of the GrammarLimitError f() throws (a failure if none).
inline GrammarLimit limit_thrown(const std::function<void()>& f) {
  try {
    f();
  } catch (const GrammarLimitError& e) {
    return e.limit();
  }
  ADD_FAILURE() << "no GrammarLimitError";
  return GrammarLimit::kBusy;
}

}  // namespace kvlm::constrain::test_helpers
