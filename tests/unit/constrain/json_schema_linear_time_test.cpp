// A JSON Schema's lists and maps are compiled in time linear in their
// size. As in tests/unit/server/protocol_linear_time_test.cpp, no timing is
// asserted: the schema is large enough that the quadratic code it replaced
// would take minutes, and ctest runs this suite as one test,
// JsonSchemaLinearTime.All, under a TIMEOUT (tests/CMakeLists.txt) that a
// regression overruns. Run alone, a regression is only slow.
#include <gtest/gtest.h>

#include <string>

#include "constrain/grammar.h"
#include "constrain/json_schema.h"

namespace kvlm::constrain {
namespace {

// {"properties": {"<prefix>0": {"type": "integer"}, ...}, "required": [every
// name]} with `n` properties, built without ordered_json's own insertion,
// which walks every member before each (the test would be quadratic itself).
Json required_integers(const std::string& prefix, int n) {
  Json properties = Json::object(), required = Json::array();
  auto& members = static_cast<Json::object_t::Container&>(properties.get_ref<Json::object_t&>());
  for (int i = 0; i < n; ++i) {
    members.emplace_back(prefix + std::to_string(i), Json{{"type", "integer"}});
    required.push_back(prefix + std::to_string(i));
  }
  return {{"properties", std::move(properties)}, {"required", std::move(required)}};
}

// allOf's parts are merged into one object schema: each property used to be
// looked up among those merged so far, n^2/2 comparisons (64,000 took 9 s
// through kvlm serve; these 200,000 would take 80 s). All required and
// nothing else allowed, the object compiles to one sequence (small, fast).
TEST(JsonSchemaLinearTime, AllOfOfManyProperties) {
  constexpr int kHalf = 100000;
  const Json schema = {{"additionalProperties", false},
                       {"allOf", Json::array({required_integers("a", kHalf), required_integers("b", kHalf)})}};
  Grammar g;
  const Expr e = json_schema_expr(g, schema, SchemaMode::kLenient);
  // Every property made it into the merge: "{", then a key and a value for
  // each, then "}".
  EXPECT_EQ(e.node().children.size(), 2u + 2 * 2 * kHalf);
}

}  // namespace
}  // namespace kvlm::constrain
