// What grammars cost: compilations charged as they grow and stopped early
// (compile_budget.h), the shapes hostile clients send compiled small, and
// the canonical schema text grammars are cached under.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "constrain/compile_budget.h"
#include "constrain/constraint.h"
#include "unit/constrain/constrain_test_helpers.h"

namespace kvlm::constrain {
namespace {

using test_helpers::matches;
using test_helpers::any_of_objects;
using test_helpers::kMiB;
using test_helpers::limit_thrown;

TEST(CompileBudget, ChargesPastItsCapStopTheCompilation) {
  CompileBudget account(1 * kMiB);
  CompileScope scope(account);
  EXPECT_EQ(limit_thrown([] { json_schema_program(any_of_objects(20000)); }), GrammarLimit::kTooLarge);
  EXPECT_GT(account.num_bytes(), 1 * kMiB);
  EXPECT_LT(account.num_bytes(), 2 * kMiB);  // stopped as it passed the cap, not at the end
}

TEST(CompileBudget, ASharedBudgetHeldByOthersIsAMemoryRefusal) {
  auto shared = std::make_shared<MemoryBudget>(4 * kMiB);
  ASSERT_TRUE(shared->try_take(3 * kMiB));  // a running request's grammar
  {
    CompileBudget account(64 * kMiB, shared);
    CompileScope scope(account);
    EXPECT_EQ(limit_thrown([] { json_schema_program(any_of_objects(20000)); }), GrammarLimit::kMemory);
  }
  EXPECT_EQ(shared->num_bytes_in_use(), 3 * kMiB);  // the failed compilation gave back all it took
  shared->give_back(3 * kMiB);
  EXPECT_FALSE(shared->try_take(5 * kMiB));
}

TEST(CompileBudget, SettleKeepsTheProgramAndGivesBackTheRest) {
  auto shared = std::make_shared<MemoryBudget>(256 * kMiB);
  std::shared_ptr<const Program> p;
  CompileBudget account(64 * kMiB, shared);
  {
    CompileScope scope(account);
    p = json_schema_program(any_of_objects(1000));
  }
  // Everything the compilation allocated was charged, the program included.
  EXPECT_GE(account.num_bytes(), p->num_bytes());
  EXPECT_GE(shared->num_bytes_in_use(), account.num_bytes());
  EXPECT_EQ(account.settle(p->num_bytes()), p->num_bytes());
  EXPECT_EQ(shared->num_bytes_in_use(), p->num_bytes());
  shared->give_back(p->num_bytes());
}

TEST(CompileBudget, NoScopeChargesNothing) {
  CompileBudget account(1);
  { CompileScope scope(account); }
  EXPECT_NO_THROW(json_schema_program(any_of_objects(100)));
  EXPECT_EQ(account.num_bytes(), 0);
}

TEST(CheaperGrammars, IdenticalPropertySchemasCompileOnce) {
  auto p = json_schema_program(any_of_objects(1500));
  // Each alternative is its braces, its key and a call of the one integer
  // rule: a few states, not the 327 of an integer of its own.
  EXPECT_LT(p->num_states(), 1500 * 16);
  EXPECT_LT(p->num_bytes(), 1500 * 16 * 40);
  EXPECT_TRUE(matches(p, R"({"f0":12})"));
  EXPECT_TRUE(matches(p, R"({"f1499":-7})"));
  EXPECT_FALSE(matches(p, R"({"f1500":1})"));
  EXPECT_FALSE(matches(p, R"({"f3":"x"})"));
}

TEST(CheaperGrammars, AllRequiredObjectIsOneSequence) {
  Json props = Json::object(), required = Json::array();
  for (int i = 0; i < 600; ++i) {
    props[fmt::format("p{}", i)] = {{"type", i % 2 ? "string" : "integer"}};
    required.push_back(fmt::format("p{}", i));
  }
  auto p = json_schema_program({{"type", "object"}, {"properties", props}, {"required", required},
                                {"additionalProperties", false}});
  // 600 properties in sequence: deeper than a matcher's call stack if each
  // were a call, as they were.
  std::string doc = "{";
  for (int i = 0; i < 600; ++i) doc += fmt::format("{}\"p{}\":{}", i ? "," : "", i, i % 2 ? "\"s\"" : "1");
  EXPECT_TRUE(matches(p, doc + "}"));
  EXPECT_FALSE(matches(p, doc + ",\"p600\":1}"));
  EXPECT_LT(p->num_states(), 600 * 12);
}

TEST(CheaperGrammars, ManyThreadsAtOnceStillMatchExactly) {
  // The first bytes of 3000 alternatives keep 3000 threads alive: the
  // matcher's visited set goes past its short list into the hash set.
  auto p = json_schema_program(any_of_objects(3000));
  Matcher m(p);
  EXPECT_TRUE(m.advance("{\"f2"));
  EXPECT_GE(m.threads().size(), 1000u);
  EXPECT_TRUE(m.advance("999\":0}"));
  EXPECT_TRUE(m.complete());
}

TEST(CheaperGrammars, ManyLiteralsShareTheirPrefixes) {
  auto p = choice_program({"may", "maybe so", "maybe", "yes", "no", "maybe", ""});
  for (const char* ok : {"may", "maybe", "maybe so", "yes", "no", ""}) EXPECT_TRUE(matches(p, ok)) << ok;
  for (const char* bad : {"ma", "maybes", "maybe s", "yess", "n"}) EXPECT_FALSE(matches(p, bad)) << bad;
  Json values = Json::array();
  for (int i = 0; i < 20000; ++i) values.push_back(fmt::format("value-{}", i));
  auto e = json_schema_program({{"enum", values}});
  EXPECT_LT(e->num_states(), 45000);  // a state per trie node and closing quote, not per byte of each value
  EXPECT_TRUE(matches(e, "\"value-19999\""));
  EXPECT_FALSE(matches(e, "\"value-20000\""));
  Matcher m(e);
  EXPECT_TRUE(m.advance("\"value-1"));
  EXPECT_LE(m.threads().size(), 12u);  // one thread down the shared prefix
}

TEST(CanonicalSchema, KeywordOrderIsIgnoredPropertyOrderIsNot) {
  const Json a = Json::parse(R"({"type":"object","properties":{"x":{"type":"integer","minimum":1},"y":{"type":"string"}},"required":["x"]})");
  const Json b = Json::parse(R"({"required":["x"],"properties":{"x":{"minimum":1,"type":"integer"},"y":{"type":"string"}},"type":"object"})");
  const Json c = Json::parse(R"({"type":"object","properties":{"y":{"type":"string"},"x":{"type":"integer","minimum":1}},"required":["x"]})");
  EXPECT_EQ(canonical_schema_text(a), canonical_schema_text(b));
  EXPECT_NE(canonical_schema_text(a), canonical_schema_text(c));  // the output spells properties in order
  const Json d = Json::parse(R"({"const":{"b":1,"a":2}})"), e = Json::parse(R"({"const":{"a":2,"b":1}})");
  EXPECT_NE(canonical_schema_text(d), canonical_schema_text(e));  // a const is spelled as given
}

}  // namespace
}  // namespace kvlm::constrain
