// Llama 3.2's zero-shot tool calls (its model card's prompt, vLLM's
// pythonic parser; Llama 4 writes them too): a Python list of calls with
// keyword arguments as the whole reply,
//   [get_weather(city="Paris", days=3), get_time()]
// Values are Python literals: strings ('' or ""), numbers, True, False,
// None, lists, tuples and dicts of them; JSON's true/false/null are taken
// too. The arguments come back as a JSON object's text.
#include <cctype>
#include <cstdlib>
#include <cstring>

#include "chat/tool_calls_impl.h"

namespace kvlm::tool_calls {
namespace {

bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Reads Python literals from text[pos..]; every read that fails returns
// nullopt and says (at_end) whether the text ran out first, which tells a
// call cut by max_tokens from text that is no call.
struct PyReader {
  std::string_view text;
  size_t pos = 0;
  bool at_end = false;

  bool more() {
    pos = skip_space(text, pos);
    if (pos < text.size()) return true;
    at_end = true;
    return false;
  }
  bool eat(char c) {
    if (!more() || text[pos] != c) return false;
    ++pos;
    return true;
  }
  std::optional<std::string> ident() {
    if (!more()) return std::nullopt;
    const size_t start = pos;
    while (pos < text.size() && ident_char(text[pos])) ++pos;
    if (pos == text.size()) at_end = true;
    if (pos == start || std::isdigit(static_cast<unsigned char>(text[start]))) return std::nullopt;
    return std::string(text.substr(start, pos - start));
  }
  std::optional<std::string> string_literal();
  std::optional<Json> number();
  std::optional<Json> items(char close, int depth);
  std::optional<Json> dict(int depth);
  std::optional<Json> value(int depth);
};

std::optional<std::string> PyReader::string_literal() {
  const char quote = text[pos];
  std::string out;
  for (size_t i = pos + 1; i < text.size(); ++i) {
    const char c = text[i];
    if (c == quote) {
      pos = i + 1;
      return out;
    }
    if (c != '\\') {
      out += c;
      continue;
    }
    if (++i >= text.size()) break;
    switch (text[i]) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      default: out += text[i]; break;  // \\, \', \" and anything else as itself
    }
  }
  at_end = true;
  return std::nullopt;
}

std::optional<Json> PyReader::number() {
  size_t end = pos;
  bool real = false;
  while (end < text.size() && (std::isdigit(static_cast<unsigned char>(text[end])) || std::strchr("+-.eE", text[end]))) {
    real = real || std::strchr(".eE", text[end]) != nullptr;
    ++end;
  }
  if (end == text.size()) {
    at_end = true;  // more digits may come
    return std::nullopt;
  }
  const std::string digits(text.substr(pos, end - pos));
  char* stop = nullptr;
  Json v = real ? Json(std::strtod(digits.c_str(), &stop)) : Json(std::strtoll(digits.c_str(), &stop, 10));
  if (digits.empty() || stop != digits.c_str() + digits.size()) return std::nullopt;
  pos = end;
  return v;
}

// Items of a list or tuple, after its opening bracket, through `close`.
std::optional<Json> PyReader::items(char close, int depth) {
  Json out = Json::array();
  while (!eat(close)) {
    if (!out.empty() && !eat(',')) return std::nullopt;
    if (eat(close)) break;  // a trailing comma
    auto v = value(depth + 1);
    if (!v) return std::nullopt;
    out.push_back(std::move(*v));
  }
  return out;
}

std::optional<Json> PyReader::dict(int depth) {
  Json out = Json::object();
  bool first = true;
  while (!eat('}')) {
    if (!first && !eat(',')) return std::nullopt;
    first = false;
    if (eat('}')) break;
    auto key = value(depth + 1);
    if (!key || !key->is_string() || !eat(':')) return std::nullopt;
    auto v = value(depth + 1);
    if (!v) return std::nullopt;
    out[key->get<std::string>()] = std::move(*v);
  }
  return out;
}

std::optional<Json> PyReader::value(int depth) {
  if (depth > kMaxDepth || !more()) return std::nullopt;
  const char c = text[pos];
  if (c == '"' || c == '\'') {
    auto s = string_literal();
    if (!s) return std::nullopt;
    return Json(std::move(*s));
  }
  if (c == '[' || c == '(') {
    ++pos;
    return items(c == '[' ? ']' : ')', depth);
  }
  if (c == '{') {
    ++pos;
    return dict(depth);
  }
  if (std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '+' || c == '.') return number();
  const auto word = ident();
  if (!word) return std::nullopt;
  if (*word == "True" || *word == "true") return Json(true);
  if (*word == "False" || *word == "false") return Json(false);
  if (*word == "None" || *word == "null") return Json(nullptr);
  return std::nullopt;
}

// One call read as far as the text goes: its name once read in full (through
// its '('), its keyword arguments read so far, and whether it closed.
struct PyCall {
  std::optional<std::string> name;  // set once the '(' is read
  std::string name_so_far;
  Json arguments = Json::object();
  bool closed = false;
};

PyCall read_call(PyReader& r) {
  PyCall call;
  auto name = r.ident();
  if (!name) return call;
  call.name_so_far = *name;
  while (r.eat('.')) {  // a method-style name, module.function
    auto part = r.ident();
    if (!part) return call;
    call.name_so_far += "." + *part;
  }
  if (!r.eat('(')) return call;
  call.name = call.name_so_far;
  while (!r.eat(')')) {
    if (!call.arguments.empty() && !r.eat(',')) return call;
    if (r.eat(')')) break;
    auto key = r.ident();
    if (!key || !r.eat('=')) return call;
    auto v = r.value(1);
    if (!v) return call;
    call.arguments[*key] = std::move(*v);
  }
  call.closed = true;
  return call;
}

}  // namespace

bool starts_pythonic_list(std::string_view text, size_t pos) {
  if (pos >= text.size() || text[pos] != '[') return false;
  const size_t next = skip_space(text, pos + 1);
  return next == text.size() || std::isalpha(static_cast<unsigned char>(text[next])) || text[next] == '_';
}

ParsedToolCalls parse_pythonic(std::string_view text) {
  PyReader r{text, skip_space(text, 0)};
  if (!r.eat('[')) return plain(text);
  ParsedToolCalls out;
  do {
    PyCall call = read_call(r);
    if (!call.closed) return plain(text);
    out.calls.push_back({std::move(*call.name), call.arguments.dump()});
  } while (r.eat(','));
  if (!r.eat(']') || !only_space(text, r.pos)) return plain(text);
  return out;
}

CutToolCalls cut_pythonic(std::string_view text) {
  PyReader r{text, skip_space(text, 0)};
  if (!r.eat('[')) return {std::string(text), {}, false};
  CutToolCalls out;
  do {
    PyCall call = read_call(r);
    if (call.closed) {
      out.calls.push_back({std::move(*call.name), call.arguments.dump()});
      continue;
    }
    if (!r.at_end) return {std::string(text), {}, false};  // no call after all
    if (call.name_so_far.empty()) return out;
    // The arguments so far: the object's text without its closing brace.
    std::string args = call.name ? call.arguments.dump() : "";
    if (!args.empty()) args.pop_back();
    out.calls.push_back({call.name.value_or(call.name_so_far), std::move(args)});
    out.name_cut = !call.name;
    out.last_open = true;
    return out;
  } while (r.eat(','));
  return out;
}

}  // namespace kvlm::tool_calls
