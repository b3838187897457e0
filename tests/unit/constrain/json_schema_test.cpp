// JSON Schema compilation: documents accepted and refused, number ranges
// checked exhaustively, and the 400-style errors for what is unsupported.
#include <gtest/gtest.h>

#include "common/error.h"

#include "constrain/constraint.h"
#include "constrain/json_numbers.h"
#include "constrain/matcher.h"
#include "unit/constrain/constrain_test_helpers.h"

namespace kvlm::constrain {
namespace {

using test_helpers::matches;
std::shared_ptr<const Program> schema(const char* text) { return json_schema_program(Json::parse(text)); }

TEST(JsonSchema, ObjectPropertiesRequiredAndOptional) {
  auto p = schema(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},"c":{"type":"boolean"}},
                      "required":["b"],"additionalProperties":false})");
  EXPECT_TRUE(matches(p, R"({"b":"x"})"));
  EXPECT_TRUE(matches(p, R"({"a":1,"b":""})"));
  EXPECT_TRUE(matches(p, R"({"a":-3,"b":"hi","c":true})"));
  EXPECT_TRUE(matches(p, R"({"b":"hi","c":false})"));
  EXPECT_FALSE(matches(p, R"({})"));
  EXPECT_FALSE(matches(p, R"({"a":1})"));
  EXPECT_FALSE(matches(p, R"({"b":"x",})"));
  EXPECT_FALSE(matches(p, R"({,"b":"x"})"));
  EXPECT_FALSE(matches(p, R"({"b":"x","d":1})"));
}

TEST(JsonSchema, AdditionalPropertiesNeverRepeatAListedName) {
  auto p = schema(R"({"properties":{"ab":{"type":"null"}},"additionalProperties":{"type":"integer"}})");
  EXPECT_TRUE(matches(p, R"({"ab":null,"xyz":3})"));
  EXPECT_TRUE(matches(p, R"({"xyz":3,"long":4})"));
  EXPECT_FALSE(matches(p, R"({"ab":null,"ab":3})"));
  EXPECT_FALSE(matches(p, R"({"xyz":"s"})"));
}

TEST(JsonSchema, BareObjectTypeIsAnyObject) {
  auto p = schema(R"({"type":"object"})");
  EXPECT_TRUE(matches(p, "{}"));
  EXPECT_TRUE(matches(p, R"({"k":[1,"x"],"z":null})"));
  EXPECT_FALSE(matches(p, "[]"));
  auto closed = schema(R"({"type":"object","additionalProperties":false})");
  EXPECT_TRUE(matches(closed, "{}"));
  EXPECT_FALSE(matches(closed, R"({"k":1})"));
}

TEST(JsonSchema, ArraysWithBoundsAndPrefixItems) {
  auto p = schema(R"({"type":"array","items":{"enum":["x",2,null]},"minItems":1,"maxItems":3})");
  EXPECT_FALSE(matches(p, "[]"));
  EXPECT_TRUE(matches(p, R"(["x"])"));
  EXPECT_TRUE(matches(p, R"(["x",2,null])"));
  EXPECT_FALSE(matches(p, R"(["x",2,null,2])"));
  EXPECT_FALSE(matches(p, R"(["y"])"));
  auto q = schema(R"({"prefixItems":[{"type":"string","maxLength":1},{"const":{"k":[1]}}],"items":false})");
  EXPECT_TRUE(matches(q, R"(["a",{"k":[1]}])"));
  EXPECT_FALSE(matches(q, R"(["ab",{"k":[1]}])"));
  EXPECT_FALSE(matches(q, R"(["a",{"k":[1]},1])"));
  auto empty = schema(R"({"type":"array","maxItems":0})");
  EXPECT_TRUE(matches(empty, "[]"));
  EXPECT_FALSE(matches(empty, "[1]"));
}

TEST(JsonSchema, StringsLengthsPatternsAndEscapes) {
  auto p = schema(R"({"type":"string","minLength":2,"maxLength":3})");
  EXPECT_FALSE(matches(p, R"("a")"));
  EXPECT_TRUE(matches(p, R"("ab")"));
  EXPECT_TRUE(matches(p, R"("\"\\")"));  // two characters, escaped
  EXPECT_TRUE(matches(p, "\"\xC3\xA9t\xC3\xA9\""));  // été: three characters
  EXPECT_FALSE(matches(p, R"("abcd")"));
  EXPECT_FALSE(matches(p, "\"a\nb\""));  // a raw newline is not JSON
  auto q = schema(R"({"type":"string","pattern":"^[A-Z]{2}-\\d+$"})");
  EXPECT_TRUE(matches(q, R"("AB-12")"));
  EXPECT_FALSE(matches(q, R"("Ab-12")"));
  auto uuid = schema(R"({"type":"string","format":"uuid"})");
  EXPECT_TRUE(matches(uuid, R"("0f8fad5b-d9cb-469f-a165-70867728950e")"));
  EXPECT_FALSE(matches(uuid, R"("0f8fad5b")"));
}

TEST(JsonSchema, IntegerRangesExhaustive) {
  // {3, 20000} and {-9999, 0} cover runs of whole digit lengths (10..9999), one expression each.
  const std::vector<std::pair<int64_t, int64_t>> ranges = {{0, 0},    {-5, 5},  {7, 123},   {-130, -9}, {95, 1005},
                                                           {0, 9},    {10, 99}, {3, 20000}, {-9999, 0}};
  for (auto [lo, hi] : ranges) {
    Grammar g;
    g.set_root(integer_range_expr(lo, hi));
    auto p = grammar_program(g);
    for (int64_t v = lo - 60; v <= hi + 60; ++v)
      EXPECT_EQ(matches(p, std::to_string(v)), v >= lo && v <= hi) << v << " in [" << lo << "," << hi << "]";
    EXPECT_FALSE(matches(p, "-0"));
    if (lo <= 5 && hi >= 5) {
      EXPECT_FALSE(matches(p, "05"));
    }
  }
}

TEST(JsonSchema, NumbersWithinBounds) {
  auto p = schema(R"({"type":"number","minimum":-2.5,"exclusiveMaximum":3})");
  for (const char* ok : {"-2", "0", "2", "2.999999", "-1.5", "-0.5", "0.25"}) EXPECT_TRUE(matches(p, ok)) << ok;
  for (const char* bad : {"3", "-3", "3.5", "-2.75", "1.0", "1e2"}) EXPECT_FALSE(matches(p, bad)) << bad;
  auto any = schema(R"({"type":"number"})");
  for (const char* ok : {"0", "-12.5", "3e7", "1.25E-3"}) EXPECT_TRUE(matches(any, ok)) << ok;
  for (const char* bad : {"01", "1.", ".5", "+1", "1e"}) EXPECT_FALSE(matches(any, bad)) << bad;
  auto integer = schema(R"({"type":"integer","minimum":10})");
  EXPECT_TRUE(matches(integer, "10"));
  EXPECT_TRUE(matches(integer, "999999999999999"));
  EXPECT_FALSE(matches(integer, "9"));
  EXPECT_FALSE(matches(integer, "1000000000000000"));  // past the 15-digit limit
}

TEST(JsonSchema, RefsAnyOfTypeListsAndNullable) {
  auto p = schema(R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
                      "next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},"required":["v","next"]}},
                      "$ref":"#/$defs/node"})");
  EXPECT_TRUE(matches(p, R"({"v":1,"next":{"v":2,"next":null}})"));
  EXPECT_FALSE(matches(p, R"({"v":1,"next":{"v":2}})"));
  auto t = schema(R"({"type":["string","null"],"maxLength":1})");
  EXPECT_TRUE(matches(t, "null"));
  EXPECT_TRUE(matches(t, R"("x")"));
  EXPECT_FALSE(matches(t, "1"));
  auto n = schema(R"({"type":"boolean","nullable":true})");
  EXPECT_TRUE(matches(n, "null"));
  EXPECT_TRUE(matches(n, "false"));
}

TEST(JsonSchema, JsonObjectModeAndAnyValue) {
  auto p = json_object_program();
  EXPECT_TRUE(matches(p, R"({"a":[1,{"b":null}],"c":"d"})"));
  EXPECT_TRUE(matches(p, "{}"));
  EXPECT_FALSE(matches(p, "[]"));
  EXPECT_FALSE(matches(p, R"({"a":})"));
  auto any = schema("{}");
  EXPECT_TRUE(matches(any, "[true,false,null,-1.5]"));
}

TEST(JsonSchema, MinAndMaxPropertiesCountListedAndExtraKeys) {
  auto p = schema(R"({"properties":{"a":{"type":"null"},"b":{"type":"null"},"c":{"type":"null"}},
                      "minProperties":1,"maxProperties":2})");
  EXPECT_FALSE(matches(p, "{}"));
  EXPECT_TRUE(matches(p, R"({"b":null})"));
  EXPECT_TRUE(matches(p, R"({"a":null,"c":null})"));
  EXPECT_FALSE(matches(p, R"({"a":null,"b":null,"c":null})"));
  // Extra keys count too; a required property is always left room for.
  auto q = schema(R"({"properties":{"id":{"type":"null"}},"required":["id"],
                      "additionalProperties":{"type":"integer"},"minProperties":2,"maxProperties":3})");
  EXPECT_FALSE(matches(q, R"({"id":null})"));
  EXPECT_TRUE(matches(q, R"({"id":null,"xyz":1})"));
  EXPECT_TRUE(matches(q, R"({"id":null,"xyz":1,"uvw":2})"));
  EXPECT_FALSE(matches(q, R"({"id":null,"xyz":1,"uvw":2,"rst":3})"));
  auto bare = schema(R"({"type":"object","minProperties":1})");
  EXPECT_FALSE(matches(bare, "{}"));
  EXPECT_TRUE(matches(bare, R"({"k":[]})"));
}

TEST(JsonSchema, ImpossiblePropertyCountsAreRefused) {
  EXPECT_THROW(schema(R"({"properties":{"a":{}},"required":["a"],"maxProperties":0})"), Error);
  EXPECT_THROW(schema(R"({"properties":{"a":{}},"additionalProperties":false,"minProperties":2})"), Error);
  EXPECT_THROW(schema(R"({"type":"object","minProperties":3,"maxProperties":2})"), Error);
}

TEST(JsonSchema, LenientModeIgnoresWhatTheGrammarCannotEnforce) {
  const Json s = Json::parse(R"({"type":"object","properties":{
      "tags":{"type":"array","items":{"type":"integer","multipleOf":5},"uniqueItems":true,"maxItems":2},
      "code":{"type":"string","pattern":"[A-Z]{2}","minLength":2},
      "x":{"not":{"type":"null"},"type":"boolean"}},
      "patternProperties":{"^z":{"type":"string"}},"required":["code"],"additionalProperties":false})");
  EXPECT_THROW(json_schema_program(s), Error);  // strict by default
  auto p = json_schema_program(s, SchemaMode::kLenient);
  EXPECT_TRUE(matches(p, R"({"tags":[5,10],"code":"AB","x":true})"));
  EXPECT_TRUE(matches(p, R"({"tags":[3,3],"code":"AB"})"));  // multipleOf and uniqueItems not enforced
  EXPECT_FALSE(matches(p, R"({"tags":[1,2,3],"code":"AB"})"));  // maxItems still is
  EXPECT_FALSE(matches(p, R"({"code":"A1"})"));                  // and the pattern
  EXPECT_FALSE(matches(p, R"({"code":"AB","x":null})"));         // and the type beside 'not'
}

TEST(JsonSchema, LenientAllOfMergesItsParts) {
  const Json s = Json::parse(R"({"$defs":{"named":{"properties":{"name":{"type":"string","maxLength":3}},
      "required":["name"]}},"allOf":[{"$ref":"#/$defs/named"},
      {"properties":{"age":{"type":"integer"}},"required":["age"]}],"additionalProperties":false})");
  EXPECT_THROW(json_schema_program(s), Error);
  auto p = json_schema_program(s, SchemaMode::kLenient);
  EXPECT_TRUE(matches(p, R"({"name":"ab","age":3})"));
  EXPECT_FALSE(matches(p, R"({"name":"ab"})"));
  EXPECT_FALSE(matches(p, R"({"age":3})"));
}

// A property or keyword that several parts give is the first part's
// (the schema's own before any part's); required names add up.
TEST(JsonSchema, LenientAllOfKeepsTheFirstOfEachName) {
  const Json s = Json::parse(R"({"properties":{"a":{"type":"integer"}},"allOf":[
      {"properties":{"a":{"type":"string"},"b":{"type":"boolean"}},"required":["a"],"additionalProperties":false},
      {"properties":{"b":{"type":"string"},"c":{"type":"null"}},"required":["c"],"additionalProperties":true}]})");
  auto p = json_schema_program(s, SchemaMode::kLenient);
  EXPECT_TRUE(matches(p, R"({"a":1,"c":null})"));
  EXPECT_TRUE(matches(p, R"({"a":1,"b":true,"c":null})"));
  EXPECT_FALSE(matches(p, R"({"a":"x","c":null})")) << "a is the schema's own integer";
  EXPECT_FALSE(matches(p, R"({"a":1,"b":"x","c":null})")) << "b is the first part's boolean";
  EXPECT_FALSE(matches(p, R"({"c":null})")) << "a is required by the first part";
  EXPECT_FALSE(matches(p, R"({"a":1})")) << "c is required by the second";
  EXPECT_FALSE(matches(p, R"({"a":1,"c":null,"d":0})")) << "additionalProperties is the first part's false";
}

TEST(JsonSchema, BoundedStringsStayInTheBasicPlane) {
  // U+1F600 is one code point but two UTF-16 units: zod would count 2 > 1.
  auto p = schema(R"({"type":"string","maxLength":1})");
  EXPECT_TRUE(matches(p, "\"\xC3\xA9\""));
  EXPECT_FALSE(matches(p, "\"\xF0\x9F\x98\x80\""));
  EXPECT_TRUE(matches(schema(R"({"type":"string"})"), "\"\xF0\x9F\x98\x80\""));
}

TEST(JsonSchema, ContentKeywordsAreAnnotations) {
  auto p = schema(R"({"type":"string","contentMediaType":"image/png","contentEncoding":"base64","maxLength":2})");
  EXPECT_TRUE(matches(p, R"("ab")"));
}

TEST(JsonSchema, ErrorsNameTheKeywordAndPlace) {
  auto message = [](const char* text) {
    try {
      json_schema_program(Json::parse(text));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(message(R"({"type":"object","properties":{"a":{"not":{}}}})"),
            "json_schema: unsupported keyword 'not' at /properties/a");
  EXPECT_NE(message(R"({"type":"string","uniqueItems":true})").find("'uniqueItems'"), std::string::npos);
  EXPECT_NE(message(R"({"type":"integer","minimum":5,"maximum":4})").find("no integer"), std::string::npos);
  EXPECT_NE(message(R"({"$ref":"#/$defs/missing"})").find("points nowhere"), std::string::npos);
  EXPECT_NE(message(R"({"$ref":"http://x/y"})").find("not supported"), std::string::npos);
  EXPECT_NE(message(R"({"type":"string","pattern":"(a"})").find("regex:"), std::string::npos);
  EXPECT_NE(message(R"({"type":"blob"})").find("unknown type 'blob'"), std::string::npos);
  EXPECT_NE(message("false").find("allows no value"), std::string::npos);
}

}  // namespace
}  // namespace kvlm::constrain
