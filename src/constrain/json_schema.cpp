#include "constrain/json_schema.h"

#include <algorithm>
#include <array>
#include <map>
#include <set>

#include <fmt/format.h>

#include "common/error.h"
#include "constrain/json_numbers.h"
#include "constrain/program.h"
#include "constrain/regex.h"

namespace kvlm::constrain {
namespace {

const std::set<std::string> kAnnotations = {"title", "description", "default", "examples", "$schema", "$id",
                                            "$comment", "deprecated", "readOnly", "writeOnly", "$defs",
                                            "definitions", "format", "strict", "name"};
const std::set<std::string> kKeywords = {"type", "properties", "required", "additionalProperties", "items",
                                         "prefixItems", "minItems", "maxItems", "enum", "const", "anyOf", "oneOf",
                                         "allOf", "$ref", "pattern", "minLength", "maxLength", "minimum", "maximum",
                                         "exclusiveMinimum", "exclusiveMaximum", "nullable"};

// The JSON string characters: anything printable, with \" \\ \n \t escapes.
Expr json_char() { return char_class_expr({{'\t', '\t'}, {'\n', '\n'}, {0x20, 0x10FFFF}}, /*json_string=*/true); }

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
  SchemaCompiler(Grammar& g, const Json& root) : g_(g), root_(root) {}

  Expr compile(const Json& s, const std::string& path) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) fail("the schema false allows no value", path);
      return any_value();
    }
    if (!s.is_object()) fail("a schema must be an object or a boolean", path);
    for (const auto& [key, value] : s.items())
      if (!kKeywords.count(key) && !kAnnotations.count(key)) fail(fmt::format("unsupported keyword '{}'", key), path);
    Expr e = typed(s, path);
    if (s.contains("nullable") && s["nullable"].is_boolean() && s["nullable"].get<bool>()) e = e | literal("null");
    return e;
  }

 private:
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
      if (std::string(key) == "allOf" && list.size() != 1) fail("'allOf' with more than one schema is not supported", path);
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
    for (const char* k : {"properties", "required", "additionalProperties"}) if (s.contains(k)) return {"object"};
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
      if (min || max) fail("'pattern' together with minLength/maxLength is not supported", path);
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
      item = ref(g_.add_rule(path + "/items", compile(*it, path + "/items")));
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

  Expr object(const Json& s, const std::string& path);
  Expr reference(const Json& r, const std::string& path);
  Expr any_value() { return any_json_value_expr(g_); }

  Grammar& g_;
  const Json& root_;
  std::map<std::string, RuleId> refs_;  // by JSON pointer
};

// Properties in the schema's order; rule (i, first) spells properties i.. of
// the object, `first` when none has been written yet (so no comma before).
Expr SchemaCompiler::object(const Json& s, const std::string& path) {
  struct Prop {
    std::string key;  // JSON-spelled, quotes included
    Expr value;
    bool required;
  };
  std::vector<Prop> props;
  std::set<std::string> required;
  if (const auto it = s.find("required"); it != s.end()) {
    if (!it->is_array()) fail("'required' must be an array of names", path);
    for (const Json& n : *it) {
      if (!n.is_string()) fail("'required' must be an array of names", path);
      required.insert(n.get<std::string>());
    }
  }
  std::optional<Expr> extra;
  if (const auto it = s.find("additionalProperties"); it != s.end() && !(it->is_boolean() && !it->get<bool>())) {
    extra = compile(*it, path + "/additionalProperties");
  } else if (it == s.end() && !s.contains("properties")) {
    extra = any_value();  // a bare {"type": "object"}: any object, not only {}
  }
  std::set<std::string> listed;
  size_t longest = 0;  // in bytes: at least the name's characters
  if (const auto it = s.find("properties"); it != s.end()) {
    if (!it->is_object()) fail("'properties' must be an object", path);
    for (const auto& [name, sub] : it->items()) {
      const std::string sub_path = fmt::format("{}/properties/{}", path, name);
      props.push_back({Json(name).dump(), ref(g_.add_rule(sub_path, compile(sub, sub_path))), required.count(name) > 0});
      listed.insert(name);
      longest = std::max(longest, name.size());
    }
  }
  for (const std::string& name : required)
    if (!listed.count(name)) {
      if (!extra) fail(fmt::format("'{}' is required but not in properties and additionalProperties is false", name), path);
      props.push_back({Json(name).dump(), *extra, true});
      longest = std::max(longest, name.size());
    }
  const auto n = static_cast<int32_t>(props.size());
  std::vector<std::array<RuleId, 2>> rules(n + 1);
  for (int32_t i = 0; i <= n; ++i)
    for (int first = 0; first < 2; ++first) rules[i][first] = g_.add_rule(fmt::format("{}/object/{}/{}", path, i, first));
  for (int32_t i = 0; i <= n; ++i)
    for (int first = 0; first < 2; ++first) {
      const Expr sep = first ? Expr() : literal(",");
      if (i == n) {
        if (!extra) {
          g_.define(rules[i][first], Expr());
          continue;
        }
        const Expr key = json_string_expr(static_cast<int32_t>(longest) + 1, std::nullopt);
        const Expr pair = key + literal(":") + *extra;
        g_.define(rules[i][first], first ? optional(pair + repeat(literal(",") + pair, 0, std::nullopt))
                                         : repeat(literal(",") + pair, 0, std::nullopt));
        continue;
      }
      const Expr with = sep + literal(props[i].key + ":") + props[i].value + ref(rules[i + 1][0]);
      g_.define(rules[i][first], props[i].required ? with : with | ref(rules[i + 1][first]));
    }
  return literal("{") + ref(rules[0][1]) + literal("}");
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

}  // namespace

Expr json_string_expr(int32_t min_length, std::optional<int32_t> max_length) {
  return literal("\"") + repeat(json_char(), min_length, max_length) + literal("\"");
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

Expr json_schema_expr(Grammar& g, const Json& schema) { return SchemaCompiler(g, schema).compile(schema, ""); }

}  // namespace kvlm::constrain
