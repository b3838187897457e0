#include "constrain/json_schema.h"

#include <algorithm>
#include <array>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "common/error.h"
#include "constrain/compile_budget.h"
#include "constrain/json_numbers.h"
#include "constrain/program.h"
#include "constrain/regex.h"

namespace kvlm::constrain {
namespace {

const std::set<std::string> kAnnotations = {"title", "description", "default", "examples", "$schema", "$id",
                                            "$comment", "deprecated", "readOnly", "writeOnly", "$defs",
                                            "definitions", "format", "strict", "name", "contentMediaType",
                                            "contentEncoding", "contentSchema"};
const std::set<std::string> kKeywords = {"type", "properties", "required", "additionalProperties", "items",
                                         "prefixItems", "minItems", "maxItems", "enum", "const", "anyOf", "oneOf",
                                         "allOf", "$ref", "pattern", "minLength", "maxLength", "minimum", "maximum",
                                         "exclusiveMinimum", "exclusiveMaximum", "nullable", "minProperties",
                                         "maxProperties"};

// The JSON string characters: anything printable, with \" \\ \n \t escapes.
// bmp_only: none past U+FFFF, which JavaScript counts as two (a string with
// maxLength then has the same length in code points, as JSON Schema counts
// it, and in UTF-16 units, as zod and JavaScript's .length count it).
Expr json_char(bool bmp_only) {
  return char_class_expr({{'\t', '\t'}, {'\n', '\n'}, {0x20, bmp_only ? 0xFFFF : 0x10FFFF}}, /*json_string=*/true);
}

std::string format_regex(const std::string& format) {
  const std::string date = "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])";
  const std::string time = "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";
  if (format == "date") return date;
  if (format == "time") return time;
  if (format == "date-time") return date + "T" + time;
  if (format == "uuid") return "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}";
  return "";
}

class SchemaCompiler {
 public:
  SchemaCompiler(Grammar& g, const Json& root, SchemaMode mode) : g_(g), root_(root), mode_(mode) {}

  Expr compile(const Json& s, const std::string& path) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) fail("the schema false allows no value", path);
      return any_value();
    }
    if (!s.is_object()) fail("a schema must be an object or a boolean", path);
    // Lenient: what the grammar cannot enforce is left out (json_schema.h).
    for (const auto& [key, value] : s.items())
      if (!kKeywords.count(key) && !kAnnotations.count(key) && strict())
        fail(fmt::format("unsupported keyword '{}'", key), path);
    Expr e = typed(s, path);
    if (s.contains("nullable") && s["nullable"].is_boolean() && s["nullable"].get<bool>()) e = e | literal("null");
    return e;
  }

 private:
  bool strict() const { return mode_ == SchemaMode::kStrict; }

  [[noreturn]] static void fail(const std::string& what, const std::string& path) {
    throw_error(ErrorCode::kInvalidArgument, "json_schema: {} at {}", what, path.empty() ? "#" : path);
  }

  Expr typed(const Json& s, const std::string& path) {
    if (s.contains("$ref")) return reference(s["$ref"], path);
    if (s.contains("const")) return literal(s["const"].dump());
    if (s.contains("enum")) {
      const Json& e = s["enum"];
      if (!e.is_array() || e.empty()) fail("'enum' must be a non-empty array", path);
      std::vector<Expr> options;
      for (const Json& v : e) options.push_back(literal(v.dump()));
      return alt(std::move(options));
    }
    for (const char* key : {"anyOf", "oneOf", "allOf"}) {
      if (!s.contains(key)) continue;
      const Json& list = s[key];
      if (!list.is_array() || list.empty()) fail(fmt::format("'{}' must be a non-empty array", key), path);
      if (std::string(key) == "allOf" && list.size() != 1) {
        if (strict()) fail("'allOf' with more than one schema is not supported", path);
        return compile(merged_all_of(s, path), path);
      }
      std::vector<Expr> options;
      for (size_t i = 0; i < list.size(); ++i) options.push_back(compile(list[i], fmt::format("{}/{}/{}", path, key, i)));
      return alt(std::move(options));
    }
    std::vector<std::string> types;
    if (const auto it = s.find("type"); it != s.end()) {
      if (it->is_string()) {
        types.push_back(it->get<std::string>());
      } else if (it->is_array() && !it->empty()) {
        for (const Json& t : *it) {
          if (!t.is_string()) fail("'type' must be a string or a list of strings", path);
          types.push_back(t.get<std::string>());
        }
      } else {
        fail("'type' must be a string or a list of strings", path);
      }
    } else {
      types = implied_types(s);
    }
    std::vector<Expr> options;
    for (const std::string& t : types) options.push_back(of_type(s, t, path));
    return alt(std::move(options));
  }

  static std::vector<std::string> implied_types(const Json& s) {
    for (const char* k : {"properties", "required", "additionalProperties", "minProperties", "maxProperties"})
      if (s.contains(k)) return {"object"};
    for (const char* k : {"items", "prefixItems", "minItems", "maxItems"}) if (s.contains(k)) return {"array"};
    for (const char* k : {"pattern", "minLength", "maxLength"}) if (s.contains(k)) return {"string"};
    for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) if (s.contains(k)) return {"number"};
    return {"object", "array", "string", "number", "boolean", "null"};
  }

  Expr of_type(const Json& s, const std::string& t, const std::string& path) {
    if (t == "object") return object(s, path);
    if (t == "array") return array(s, path);
    if (t == "string") return string(s, path);
    if (t == "integer") {
      const NumberBounds b = bounds(s, path);
      if (!integer_bounds(b)) fail("no integer lies between minimum and maximum", path);
      return integer_expr(b);
    }
    if (t == "number") {
      auto e = number_expr(bounds(s, path));
      if (!e) fail("no number lies between minimum and maximum", path);
      return *e;
    }
    if (t == "boolean") return literal("true") | literal("false");
    if (t == "null") return literal("null");
    fail(fmt::format("unknown type '{}'", t), path);
  }

  NumberBounds bounds(const Json& s, const std::string& path) {
    NumberBounds b;
    auto read = [&](const char* key, std::optional<double>& out) {
      const auto it = s.find(key);
      if (it == s.end()) return;
      if (!it->is_number()) fail(fmt::format("'{}' must be a number", key), path);
      out = it->get<double>();
    };
    read("minimum", b.minimum);
    read("maximum", b.maximum);
    read("exclusiveMinimum", b.exclusive_minimum);
    read("exclusiveMaximum", b.exclusive_maximum);
    return b;
  }

  std::optional<int32_t> count(const Json& s, const char* key, const std::string& path) {
    const auto it = s.find(key);
    if (it == s.end()) return std::nullopt;
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > kMaxRepeat)
      fail(fmt::format("'{}' must be an integer in [0, {}]", key, kMaxRepeat), path);
    return static_cast<int32_t>(it->get<int64_t>());
  }

  Expr string(const Json& s, const std::string& path) {
    const auto min = count(s, "minLength", path), max = count(s, "maxLength", path);
    if (min && max && *min > *max) fail("minLength is above maxLength", path);
    if (const auto it = s.find("pattern"); it != s.end()) {
      if (!it->is_string()) fail("'pattern' must be a string", path);
      // Lenient: the pattern is enforced, the lengths are not.
      if ((min || max) && strict()) fail("'pattern' together with minLength/maxLength is not supported", path);
      try {
        return literal("\"") + regex_expr(it->get<std::string>(), /*json_string=*/true) + literal("\"");
      } catch (const Error& e) {
        fail(fmt::format("'pattern': {}", e.what()), path);
      }
    }
    if (const auto it = s.find("format"); it != s.end() && it->is_string() && !min && !max) {
      const std::string re = format_regex(it->get<std::string>());
      if (!re.empty()) return literal("\"") + regex_expr(re) + literal("\"");
    }
    return json_string_expr(min.value_or(0), max);
  }

  Expr array(const Json& s, const std::string& path) {
    std::vector<Expr> prefix;
    if (const auto it = s.find("prefixItems"); it != s.end()) {
      if (!it->is_array()) fail("'prefixItems' must be an array", path);
      for (size_t i = 0; i < it->size(); ++i) prefix.push_back(compile((*it)[i], fmt::format("{}/prefixItems/{}", path, i)));
    }
    std::optional<Expr> item;
    const auto it = s.find("items");
    if (it == s.end()) {
      item = any_value();
    } else if (!(it->is_boolean() && !it->get<bool>())) {
      item = ref(value_rule(*it, path + "/items"));
    }
    const auto k = static_cast<int32_t>(prefix.size());
    const int32_t min = count(s, "minItems", path).value_or(0);
    std::optional<int32_t> max = count(s, "maxItems", path);
    if (max && *max < std::max(min, k)) fail("maxItems is below minItems or the prefixItems", path);
    if (!item) max = k;  // items: false
    if (!item && min > k) fail("minItems needs more items than prefixItems allows", path);
    // Prefix items are always all present; then min..max more of `item`.
    const int32_t rest_min = std::max(0, min - k);
    const std::optional<int32_t> rest_max = max ? std::optional<int32_t>(*max - k) : std::nullopt;
    std::vector<Expr> parts{literal("[")};
    for (int32_t i = 0; i < k; ++i) parts.push_back(i == 0 ? prefix[i] : literal(",") + prefix[i]);
    if (item && rest_max != 0) {
      const Expr more = literal(",") + *item;
      if (k > 0) {
        parts.push_back(repeat(more, rest_min, rest_max));
      } else {
        const std::optional<int32_t> tail_max = rest_max ? std::optional<int32_t>(*rest_max - 1) : std::nullopt;
        const Expr list = *item + repeat(more, std::max(rest_min - 1, 0), tail_max);
        parts.push_back(rest_min > 0 ? list : optional(list));
      }
    }
    parts.push_back(literal("]"));
    return seq(std::move(parts));
  }

  struct ObjectParts {
    struct Prop {
      std::string key;  // JSON-spelled, quotes included
      Expr value;
      bool required;
    };
    std::vector<Prop> props;
    std::optional<Expr> extra;  // other keys' values; nullopt: no other keys
    size_t longest = 0;         // the longest listed name, in bytes
  };
  ObjectParts object_parts(const Json& s, const std::string& path);
  Expr object(const Json& s, const std::string& path);
  Expr reference(const Json& r, const std::string& path);
  Expr any_value() { return any_json_value_expr(g_); }
  RuleId value_rule(const Json& s, const std::string& path);
  std::optional<Expr> plain_object(const ObjectParts& parts, const Json& s) const;
  Json merged_all_of(const Json& s, const std::string& path) const;

  Grammar& g_;
  const Json& root_;
  SchemaMode mode_;
  std::map<std::string, RuleId> refs_;  // by JSON pointer
  std::unordered_map<std::string, RuleId> values_;  // value_rule's, by small schemas' JSON text
};

// Whether `j` has at most `budget` values and strings of at most 64 bytes:
// small enough that its JSON text is a cheap key.
bool is_small(const Json& j, int& budget) {
  if (--budget < 0) return false;
  if (j.is_string()) return j.get_ref<const std::string&>().size() <= 64;
  if (j.is_object())
    for (const auto& [k, v] : j.items())
      if (k.size() > 64 || !is_small(v, budget)) return false;
  if (j.is_array())
    for (const Json& v : j)
      if (!is_small(v, budget)) return false;
  return true;
}

// A property's or an array item's schema as a rule. Identical small schemas
// share one rule: the thousand {"type": "integer"} properties of a large
// anyOf compile one integer, not a thousand.
RuleId SchemaCompiler::value_rule(const Json& s, const std::string& path) {
  int budget = 32;
  std::string key = is_small(s, budget) ? s.dump() : std::string();
  if (!key.empty())
    if (const auto it = values_.find(key); it != values_.end()) return it->second;
  const RuleId r = g_.add_rule(path, compile(s, path));
  if (!key.empty()) {
    charge_compile_memory(static_cast<int64_t>(key.size()) + 64);
    values_.emplace(std::move(key), r);
  }
  return r;
}

// An object whose listed properties are all required and that allows
// nothing else and no count bounds (what OpenAI's strict mode asks for) is
// one sequence: no rule per (property, count), no call per property.
std::optional<Expr> SchemaCompiler::plain_object(const ObjectParts& parts, const Json& s) const {
  if (parts.extra || s.contains("minProperties") || s.contains("maxProperties")) return std::nullopt;
  std::vector<Expr> seq_parts{literal("{")};
  for (size_t i = 0; i < parts.props.size(); ++i) {
    if (!parts.props[i].required) return std::nullopt;
    seq_parts.push_back(literal((i ? "," : "") + parts.props[i].key + ":"));
    seq_parts.push_back(parts.props[i].value);
  }
  seq_parts.push_back(literal("}"));
  return seq(std::move(seq_parts));
}

// An object schema's properties, in order (required names that only
// additionalProperties allows after them), and what other keys may hold.
SchemaCompiler::ObjectParts SchemaCompiler::object_parts(const Json& s, const std::string& path) {
  ObjectParts o;
  std::set<std::string> required;
  if (const auto it = s.find("required"); it != s.end()) {
    if (!it->is_array()) fail("'required' must be an array of names", path);
    for (const Json& n : *it) {
      if (!n.is_string()) fail("'required' must be an array of names", path);
      required.insert(n.get<std::string>());
    }
  }
  if (const auto it = s.find("additionalProperties"); it != s.end() && !(it->is_boolean() && !it->get<bool>())) {
    o.extra = compile(*it, path + "/additionalProperties");
  } else if (it == s.end() && !s.contains("properties")) {
    o.extra = any_value();  // a bare {"type": "object"}: any object, not only {}
  }
  std::set<std::string> listed;
  if (const auto it = s.find("properties"); it != s.end()) {
    if (!it->is_object()) fail("'properties' must be an object", path);
    for (const auto& [name, sub] : it->items()) {
      const std::string sub_path = fmt::format("{}/properties/{}", path, name);
      o.props.push_back({Json(name).dump(), ref(value_rule(sub, sub_path)), required.count(name) > 0});
      listed.insert(name);
      o.longest = std::max(o.longest, name.size());
    }
  }
  for (const std::string& name : required)
    if (!listed.count(name)) {
      if (!o.extra) fail(fmt::format("'{}' is required but not in properties and additionalProperties is false", name), path);
      o.props.push_back({Json(name).dump(), *o.extra, true});
      o.longest = std::max(o.longest, name.size());
    }
  return o;
}

// Properties in the schema's order. Rule (i, k) spells properties i.. of
// the object after k pairs were written (k saturates at `cap`: the most
// that minProperties/maxProperties need told apart, at least 1 so the
// first pair goes without a comma). Only states that can still end within
// minProperties..maxProperties are referenced.
Expr SchemaCompiler::object(const Json& s, const std::string& path) {
  const ObjectParts parts = object_parts(s, path);
  if (auto plain = plain_object(parts, s)) return *plain;
  const std::vector<ObjectParts::Prop>& props = parts.props;
  const std::optional<Expr>& extra = parts.extra;
  const size_t longest = parts.longest;
  const auto n = static_cast<int32_t>(props.size());
  const int32_t min_props = count(s, "minProperties", path).value_or(0);
  const std::optional<int32_t> max_props = count(s, "maxProperties", path);
  if (max_props && *max_props < min_props) fail("maxProperties is below minProperties", path);
  std::vector<int32_t> required_from(n + 1, 0);  // required properties among i..n-1
  for (int32_t i = n - 1; i >= 0; --i) required_from[i] = required_from[i + 1] + (props[i].required ? 1 : 0);
  if (max_props && required_from[0] > *max_props) fail("maxProperties is below the number of required properties", path);
  if (!extra && n < min_props) fail("minProperties needs more properties than the schema allows", path);
  const int32_t cap = std::max({1, min_props, max_props.value_or(0)});
  auto viable = [&](int32_t i, int32_t k) {
    if (max_props && k + required_from[i] > *max_props) return false;
    return extra || k + (n - i) >= min_props || k >= cap;
  };
  std::vector<std::vector<RuleId>> rules(n + 1, std::vector<RuleId>(cap + 1, -1));
  for (int32_t i = 0; i <= n; ++i)
    for (int32_t k = 0; k <= std::min(i, cap); ++k)
      if (viable(i, k)) rules[i][k] = g_.add_rule(fmt::format("{}/object/{}/{}", path, i, k));
  if (rules[0][0] < 0) fail("no object satisfies minProperties and maxProperties", path);
  const Expr pair = json_string_expr(static_cast<int32_t>(longest) + 1, std::nullopt) + literal(":") +
                    extra.value_or(Expr());
  for (int32_t i = 0; i <= n; ++i)
    for (int32_t k = 0; k <= std::min(i, cap); ++k) {
      if (rules[i][k] < 0) continue;
      const Expr sep = k == 0 ? Expr() : literal(",");
      if (i == n) {
        if (!extra) {
          g_.define(rules[i][k], Expr());
          continue;
        }
        // Extra keys: as many as keep the count within the bounds.
        const int32_t more_min = k >= cap ? 0 : std::max(0, min_props - k);
        const std::optional<int32_t> more_max = max_props ? std::optional<int32_t>(*max_props - k) : std::nullopt;
        if (more_max == 0) {
          g_.define(rules[i][k], Expr());
        } else if (k > 0) {
          g_.define(rules[i][k], repeat(literal(",") + pair, more_min, more_max));
        } else {
          const std::optional<int32_t> tail_max = more_max ? std::optional<int32_t>(*more_max - 1) : std::nullopt;
          const Expr list = pair + repeat(literal(",") + pair, std::max(more_min - 1, 0), tail_max);
          g_.define(rules[i][k], more_min > 0 ? list : optional(list));
        }
        continue;
      }
      std::vector<Expr> options;
      const int32_t next = std::min(k + 1, cap);
      if (rules[i + 1][next] >= 0 && (!max_props || k < *max_props))
        options.push_back(sep + literal(props[i].key + ":") + props[i].value + ref(rules[i + 1][next]));
      if (!props[i].required && rules[i + 1][k] >= 0) options.push_back(ref(rules[i + 1][k]));
      g_.define(rules[i][k], alt(std::move(options)));
    }
  return literal("{") + ref(rules[0][0]) + literal("}");
}

// An ordered_json object's members: ordered_map is a std::vector of them,
// and is used as one here, since its own operator[], contains() and
// emplace() walk every member.
Json::object_t::Container& members_of(Json& object) { return object.get_ref<Json::object_t&>(); }

// Lenient allOf of several schemas as one (json_schema.h): each part (a
// $ref into the schema resolved) adds its properties and required names;
// for any other keyword the first part that has it wins. Parts' own allOf
// and $ref are dropped, so this never recurses. Keys and property names are
// found through hash tables: with ordered_json's lookups, merging n
// properties took n^2/2 comparisons (64,000: 9 s, before the grammar's
// size cap refused them).
Json SchemaCompiler::merged_all_of(const Json& s, const std::string& path) const {
  Json out = s;
  out.erase("allOf");
  auto& keys = members_of(out);
  std::unordered_map<std::string, size_t> key_at;  // position in keys
  for (size_t i = 0; i < keys.size(); ++i) key_at.emplace(keys[i].first, i);
  auto existing = [&](const std::string& key) -> Json* {
    const auto it = key_at.find(key);
    return it == key_at.end() ? nullptr : &keys[it->second].second;
  };
  auto added = [&](const std::string& key, Json value) -> Json& {
    key_at.emplace(key, keys.size());
    keys.emplace_back(key, std::move(value));
    return keys.back().second;
  };
  std::unordered_set<std::string> names;  // out's properties, once a part adds to them
  for (const Json& given : s["allOf"]) {
    const Json* part = &given;
    if (const auto r = given.find("$ref"); given.is_object() && r != given.end() && r->is_string()) {
      const std::string target = r->get<std::string>();
      try {
        if (target.size() > 1 && target[0] == '#') part = &root_.at(Json::json_pointer(target.substr(1)));
      } catch (const std::exception&) {
        fail(fmt::format("'$ref' {} points nowhere", target), path);
      }
    }
    if (!part->is_object()) continue;
    for (const auto& [key, value] : part->items()) {
      if (key == "allOf" || key == "$ref") continue;
      Json* have = existing(key);
      if (key == "properties" && value.is_object() && (!have || have->is_object())) {
        auto& listed = members_of(have ? *have : added(key, Json::object()));
        if (names.empty())
          for (const auto& member : listed) names.insert(member.first);
        for (const auto& [name, sub] : value.items())
          if (names.insert(name).second) listed.emplace_back(name, sub);
      } else if (key == "required" && value.is_array() && (!have || have->is_array())) {
        Json& required = have ? *have : added(key, Json::array());
        for (const Json& name : value) required.push_back(name);
      } else if (!have) {
        added(key, value);
      }
    }
  }
  return out;
}

Expr SchemaCompiler::reference(const Json& r, const std::string& path) {
  if (!r.is_string()) fail("'$ref' must be a string", path);
  const std::string target = r.get<std::string>();
  if (auto it = refs_.find(target); it != refs_.end()) return ref(it->second);
  if (target.empty() || target[0] != '#')
    fail(fmt::format("'$ref' {} is not supported (only references inside the schema, '#...')", target), path);
  const Json* at = &root_;
  try {
    if (target.size() > 1) at = &root_.at(Json::json_pointer(target.substr(1)));
  } catch (const std::exception&) {
    fail(fmt::format("'$ref' {} points nowhere", target), path);
  }
  // Named before its body is compiled, so a schema may refer to itself.
  const RuleId rule = g_.add_rule(target);
  refs_.emplace(target, rule);
  g_.define(rule, compile(*at, target));
  return ref(rule);
}

// Keywords whose value is a map of schemas, a list of schemas, or a schema
// (canonical_schema_text).
const std::set<std::string> kSchemaMaps = {"properties", "$defs", "definitions", "patternProperties", "dependentSchemas"};
const std::set<std::string> kSchemaLists = {"anyOf", "oneOf", "allOf", "prefixItems"};
const std::set<std::string> kSchemaValues = {"items", "additionalProperties", "not", "contains", "if", "then", "else",
                                             "propertyNames", "unevaluatedProperties", "additionalItems"};

void write_canonical(const Json& s, std::string& out) {
  if (!s.is_object()) {
    out += s.dump();
    return;
  }
  std::vector<std::pair<const std::string*, const Json*>> keys;
  for (const auto& [k, v] : s.items()) keys.emplace_back(&k, &v);
  std::sort(keys.begin(), keys.end(), [](const auto& a, const auto& b) { return *a.first < *b.first; });
  out += '{';
  for (size_t i = 0; i < keys.size(); ++i) {
    const auto& [k, v] = keys[i];
    if (i) out += ',';
    out += Json(*k).dump();
    out += ':';
    if (kSchemaMaps.count(*k) && v->is_object()) {
      out += '{';
      size_t j = 0;
      for (const auto& [name, sub] : v->items()) {  // in order: the output spells properties so
        if (j++) out += ',';
        out += Json(name).dump();
        out += ':';
        write_canonical(sub, out);
      }
      out += '}';
    } else if (kSchemaLists.count(*k) && v->is_array()) {
      out += '[';
      for (size_t j = 0; j < v->size(); ++j) {
        if (j) out += ',';
        write_canonical((*v)[j], out);
      }
      out += ']';
    } else if (kSchemaValues.count(*k)) {
      write_canonical(*v, out);
    } else {
      out += v->dump();
    }
  }
  out += '}';
}

}  // namespace

std::string canonical_schema_text(const Json& schema) {
  std::string out;
  write_canonical(schema, out);
  return out;
}

Expr json_string_expr(int32_t min_length, std::optional<int32_t> max_length) {
  return literal("\"") + repeat(json_char(max_length.has_value()), min_length, max_length) + literal("\"");
}

Expr any_json_value_expr(Grammar& g) {
  for (RuleId r = 0; r < g.num_rules(); ++r)
    if (g.rule_name(r) == "json-value") return ref(r);
  const RuleId value = g.add_rule("json-value");
  const Expr str = json_string_expr(0, std::nullopt);
  const Expr v = ref(value);
  const Expr pair = str + literal(":") + v;
  const Expr object = literal("{") + optional(pair + repeat(literal(",") + pair, 0, std::nullopt)) + literal("}");
  const Expr array = literal("[") + optional(v + repeat(literal(",") + v, 0, std::nullopt)) + literal("]");
  g.define(value, alt({object, array, str, *number_expr({}), literal("true"), literal("false"), literal("null")}));
  return v;
}

Expr any_json_object_expr(Grammar& g) {
  const Expr v = any_json_value_expr(g);
  const Expr pair = json_string_expr(0, std::nullopt) + literal(":") + v;
  return literal("{") + optional(pair + repeat(literal(",") + pair, 0, std::nullopt)) + literal("}");
}

Expr json_schema_expr(Grammar& g, const Json& schema, SchemaMode mode) {
  return SchemaCompiler(g, schema, mode).compile(schema, "");
}

}  // namespace kvlm::constrain
