#include "wire/openai/tools.h"

#include <cctype>

#include <fmt/format.h>

#include "common/error.h"
#include "constrain/constraint.h"
#include "constrain/grammar_cache.h"
#include "constrain/json_schema.h"
#include "wire/openai/fields.h"

namespace kvlm::openai {
namespace {

// OpenAI's rule for function names; it also keeps them safe to write bare
// inside the quotes of a tool-call grammar.
bool valid_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  return true;
}

// A function's definition ({name, description?, parameters?, strict?});
// `where` names it ("tools[0].function", "functions[0]").
void check_function(const Json& fn, const std::string& where) {
  if (!fn.is_object()) invalid_field(where, fmt::format("'{}' must be an object", where));
  const Json* name = field(fn, "name");
  if (!name || !name->is_string() || !valid_name(name->get<std::string>()))
    invalid_field(where + ".name", fmt::format("'{}.name' must be 1 to 64 letters, digits, '_' or '-'", where));
  if (const Json* d = field(fn, "description"); d && !d->is_string())
    invalid_field(where + ".description", fmt::format("'{}.description' must be a string", where));
  const Json* params = field(fn, "parameters");
  if (params && !params->is_object())
    invalid_field(where + ".parameters", fmt::format("'{}.parameters' must be a JSON Schema object", where));
  const Json* strict = field(fn, "strict");
  if (strict && !strict->is_boolean())
    invalid_field(where + ".strict", fmt::format("'{}.strict' must be true or false", where));
}

void check_tool(const Json& tool, const std::string& where) {
  if (!tool.is_object()) invalid_field(where, fmt::format("'{}' must be an object", where));
  if (tool.value("type", "") != "function")
    invalid_field(where + ".type", fmt::format("'{}.type' must be \"function\"", where));
  const Json* fn = field(tool, "function");
  if (!fn || !fn->is_object()) invalid_field(where + ".function", fmt::format("'{}.function' must be an object", where));
  check_function(*fn, where + ".function");
}

bool has_tool(const Json& tools, const std::string& name) {
  for (const Json& t : tools)
    if (t["function"]["name"] == name) return true;
  return false;
}

ToolChoice parse_tool_choice(const Json* choice, const Json& tools) {
  ToolChoice c;
  if (!choice) return c;
  if (choice->is_string()) {
    const std::string s = choice->get<std::string>();
    if (s == "auto") return c;
    if (s == "none") c.kind = ToolChoice::Kind::kNone;
    else if (s == "required") c.kind = ToolChoice::Kind::kRequired;
    else invalid_field("tool_choice", "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
  } else if (choice->is_object() && choice->value("type", "") == "function" && field(*choice, "function") &&
             (*choice)["function"].is_object() && (*choice)["function"].contains("name") &&
             (*choice)["function"]["name"].is_string()) {
    c.kind = ToolChoice::Kind::kNamed;
    c.name = (*choice)["function"]["name"].get<std::string>();
  } else {
    invalid_field("tool_choice", "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
  }
  if (c.kind != ToolChoice::Kind::kAuto && c.kind != ToolChoice::Kind::kNone && tools.is_null())
    invalid_field("tool_choice", "'tool_choice' needs 'tools'");
  if (c.kind == ToolChoice::Kind::kNamed && !has_tool(tools, c.name))
    invalid_field("tool_choice", fmt::format("'tool_choice' names function '{}', which is not in 'tools'", c.name));
  return c;
}

// The legacy fields: `functions` are tools, `function_call` ("auto",
// "none", {"name": ...}) the tool choice; one call at most.
void parse_functions(const Json& body, ChatRequest& r) {
  const Json* functions = field(body, "functions");
  if (field(body, "tools") || field(body, "tool_choice"))
    invalid_field("functions", "'functions' and 'function_call' cannot be combined with 'tools' or 'tool_choice'");
  if (!functions->is_array()) invalid_field("functions", "'functions' must be an array of {\"name\": ..., \"parameters\": {...}}");
  r.tools = Json::array();
  for (size_t i = 0; i < functions->size(); ++i) {
    check_function((*functions)[i], fmt::format("functions[{}]", i));
    r.tools.push_back(Json{{"type", "function"}, {"function", (*functions)[i]}});
  }
  if (r.tools.empty()) r.tools = nullptr;
  const Json* call = field(body, "function_call");
  const char* wrong = "'function_call' must be \"auto\", \"none\" or {\"name\": ...}";
  if (call && call->is_object()) {
    const Json* name = field(*call, "name");
    if (!name || !name->is_string()) invalid_field("function_call", wrong);
    // As a tool choice, so the checks and the grammar are the tools' own.
    const Json named = {{"type", "function"}, {"function", {{"name", *name}}}};
    r.tool_choice = parse_tool_choice(&named, r.tools);
  } else if (call && !(call->is_string() && (*call == "auto" || *call == "none"))) {
    invalid_field("function_call", wrong);
  } else {
    const Json choice = call ? *call : Json("auto");
    r.tool_choice = parse_tool_choice(&choice, r.tools);
  }
  r.parallel_tool_calls = false;
  r.legacy_functions = true;
}

}  // namespace

void parse_tools(const Json& body, ChatRequest& r) {
  r.tools = nullptr;
  if (field(body, "functions") || field(body, "function_call")) {
    if (!field(body, "functions")) invalid_field("function_call", "'function_call' needs 'functions'");
    return parse_functions(body, r);
  }
  if (const Json* tools = field(body, "tools")) {
    if (!tools->is_array()) invalid_field("tools", "'tools' must be an array of {\"type\": \"function\", \"function\": {...}}");
    for (size_t i = 0; i < tools->size(); ++i) check_tool((*tools)[i], fmt::format("tools[{}]", i));
    if (!tools->empty()) r.tools = *tools;
  }
  r.tool_choice = parse_tool_choice(field(body, "tool_choice"), r.tools);
  r.parallel_tool_calls = bool_field(body, "parallel_tool_calls").value_or(true);
}

namespace {

// A strict schema must compile in strict mode. Through the server's
// grammars the check compiles the whole grammar, cached, so a client
// repeating its tools pays once; a refusal for the server's memory or time
// goes to the route (503), a schema too large is the field's 400.
void check_strict_schema(const Json& params, constrain::GrammarCache* grammars) {
  if (!grammars) {
    constrain::Grammar g;
    constrain::json_schema_expr(g, params, constrain::SchemaMode::kStrict);
    return;
  }
  try {
    grammars->get("json_schema strict\n" + constrain::canonical_schema_text(params),
                  [&] { return constrain::json_schema_program(params, constrain::SchemaMode::kStrict); });
  } catch (const constrain::GrammarLimitError& e) {
    if (e.limit() != constrain::GrammarLimit::kTooLarge) throw;
    throw Error(e.code(), e.what());
  }
}

}  // namespace

void check_strict_tools(const ChatRequest& r, constrain::GrammarCache* grammars) {
  if (!r.tools.is_array()) return;
  for (size_t i = 0; i < r.tools.size(); ++i) {
    const Json& fn = r.tools[i]["function"];
    const Json* strict = field(fn, "strict");
    const Json* params = field(fn, "parameters");
    if (!strict || !strict->get<bool>() || !params) continue;
    const std::string where = r.legacy_functions ? fmt::format("functions[{}]", i) : fmt::format("tools[{}].function", i);
    try {
      check_strict_schema(*params, grammars);
    } catch (const constrain::GrammarLimitError&) {
      throw;
    } catch (const Error& e) {
      invalid_field(where + ".parameters", fmt::format("'{}.parameters' (strict: true): {}", where, e.what()));
    }
  }
}

Json legacy_function_message(const Json& m, const std::string& where, LegacyCalls& calls) {
  const std::string role = m["role"].get<std::string>();
  Json out = m;
  if (role == "function") {
    const Json* name = field(m, "name");
    if (!name || !name->is_string())
      invalid_field(where + ".name", fmt::format("'{}.name' must name the function whose result this is", where));
    out["role"] = "tool";
    out["tool_call_id"] = calls.last_id.empty() ? "fn0000000" : calls.last_id;
    return out;
  }
  const Json* call = field(m, "function_call");
  if (!call) return out;
  if (role != "assistant" || field(m, "tool_calls"))
    invalid_field(where + ".function_call", "only assistant messages without 'tool_calls' may have 'function_call'");
  const Json* name = call->is_object() ? field(*call, "name") : nullptr;
  const Json* args = call->is_object() ? field(*call, "arguments") : nullptr;
  if (!name || !name->is_string() || !args || !args->is_string())
    invalid_field(where + ".function_call", fmt::format("'{}.function_call' must be {{\"name\": string, \"arguments\": JSON text}}", where));
  calls.last_id = fmt::format("fn{:07d}", ++calls.num_calls);
  out.erase("function_call");
  out["tool_calls"] = Json::array({Json{{"id", calls.last_id}, {"type", "function"},
                                        {"function", Json{{"name", *name}, {"arguments", *args}}}}});
  return out;
}

void check_message_tools(const Json& m, const std::string& where) {
  const std::string role = m["role"].get<std::string>();
  if (role == "tool") {
    const Json* id = field(m, "tool_call_id");
    if (!id || !id->is_string())
      invalid_field(where + ".tool_call_id", fmt::format("'{}.tool_call_id' must be the id of the call it answers", where));
    return;
  }
  const Json* calls = field(m, "tool_calls");
  if (!calls) return;
  if (role != "assistant") invalid_field(where + ".tool_calls", "only assistant messages may have 'tool_calls'");
  if (!calls->is_array()) invalid_field(where + ".tool_calls", fmt::format("'{}.tool_calls' must be an array", where));
  for (size_t j = 0; j < calls->size(); ++j) {
    const Json& c = (*calls)[j];
    const std::string at = fmt::format("{}.tool_calls[{}]", where, j);
    if (!c.is_object() || !field(c, "id") || !c["id"].is_string())
      invalid_field(at + ".id", fmt::format("'{}.id' must be a string", at));
    const Json* fn = field(c, "function");
    if (!fn || !fn->is_object() || !field(*fn, "name") || !(*fn)["name"].is_string())
      invalid_field(at + ".function.name", fmt::format("'{}.function.name' must be a string", at));
    const Json* args = field(*fn, "arguments");
    if (!args || !args->is_string())
      invalid_field(at + ".function.arguments", fmt::format("'{}.function.arguments' must be a JSON text (a string)", at));
  }
}

}  // namespace kvlm::openai
