#include "hostile_gen.h"

#include <vector>

#include "hostile_util.h"

namespace kvlm::test {
namespace {

using Rng = std::mt19937_64;

size_t pick(Rng& rng, size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); }

template <typename T>
const T& pick_of(Rng& rng, const std::vector<T>& v) { return v[pick(rng, v.size())]; }

// Valid requests the mutations start from; all cheap (the server runs with a
// small context, so even an unbounded generation is short).
const std::vector<std::pair<std::string, std::string>>& seeds() {
  static const std::vector<std::pair<std::string, std::string>> s = {
      {"/v1/completions", R"({"prompt":"Once upon a time","max_tokens":4,"temperature":0})"},
      {"/v1/completions", R"({"prompt":[1,200,201],"max_tokens":3,"echo":true,"logprobs":2})"},
      {"/v1/completions", R"({"prompt":"Lily","max_tokens":3,"stream":true,"echo":true,"logprobs":1,"stream_options":{"include_usage":true}})"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":3,"temperature":0.5,"top_p":0.9})"},
      {"/v1/chat/completions", R"({"messages":[{"role":"system","content":"x"},{"role":"user","content":[{"type":"text","text":"y"}]}],"max_tokens":2,"stream":true,"logprobs":true,"top_logprobs":2,"tools":[{"type":"function","function":{"name":"f","parameters":{}}}],"chat_template_kwargs":{"a":1}})"},
      {"/tokenize", R"({"content":"héllo wörld","with_pieces":true,"add_special":false})"},
      {"/detokenize", R"({"tokens":[1,200,201,300]})"},
  };
  return s;
}

// Values that break types, ranges and encodings.
const std::vector<std::string>& bad_values() {
  static const std::vector<std::string> v = {
      "1e400", "-1e400", "1", "-1", "0", "1.5", "18446744073709551616", "9223372036854775808",
      "-9223372036854775809", "4294967297", "\"x\"", "\"\xff\xfe\"", "\"\xc5\"", "\"\\ud800\"", "true", "null",
      "[]", "{}", "[1e400]", "[-1]", "[4294967296]", "{\"4294967297\":1}", "{\"600\":1}", "{\"-1\":5}",
      "{\"1\":1e400}", "[[[[[]]]]]", "\"\\u0000\"", "[{\"role\":\"user\",\"content\":\"\xe9\"}]",
      "[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":1}]}]",
      "\"\"", "[\"\"]", "[\"\", \"a\"]", "{\"type\":\"json_object\"}", "{\"include_usage\":1}", "2147483648",
  };
  return v;
}

const std::vector<std::string>& keys() {
  static const std::vector<std::string> k = {
      "prompt", "max_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "logit_bias", "stop", "stream",
      "stream_options", "echo", "logprobs", "top_logprobs", "n", "best_of", "messages", "tools", "content",
      "tokens", "add_special", "parse_special", "with_pieces", "chat_template_kwargs", "repetition_penalty",
      "presence_penalty", "frequency_penalty", "cache_salt", "response_format", "ignore_eos", "suffix",
      "guided_json", "guided_regex", "guided_choice"};
  return k;
}

std::string nested(Rng& rng, size_t depth) {
  const bool arrays = pick(rng, 2) == 0;
  std::string s;
  for (size_t i = 0; i < depth; ++i) s += arrays ? "[" : "{\"a\":";
  s += "1";
  for (size_t i = 0; i < depth; ++i) s += arrays ? "]" : "}";
  return s;
}

std::string invalid_utf8(Rng& rng) {
  static const std::vector<std::string> forms = {"\x80", "\xbf", "\xc0\xaf", "\xc5", "\xe2\x82", "\xed\xa0\x80",
                                                 "\xf4\x90\x80\x80", "\xf8\x88\x80\x80\x80", "\xfe", "\xff"};
  return pick_of(rng, forms);
}

// A body with one field replaced, bytes flipped, cut, or wrapped deep.
std::string mutate_body(Rng& rng, std::string body, std::string& kind) {
  switch (pick(rng, 7)) {
    case 0: {
      kind = "field";
      const std::string value = pick(rng, 6) == 0 ? nested(rng, 1 + pick(rng, 200)) : pick_of(rng, bad_values());
      return body.substr(0, body.size() - 1) + ",\"" + pick_of(rng, keys()) + "\":" + value + "}";
    }
    case 1:
      kind = "flip";
      for (size_t i = 0, n = 1 + pick(rng, 4); i < n; ++i) body[pick(rng, body.size())] ^= static_cast<char>(1 << pick(rng, 8));
      return body;
    case 2: kind = "truncate"; return body.substr(0, pick(rng, body.size()));
    case 3: {
      kind = "utf8";
      const size_t at = body.find('"', pick(rng, body.size()));
      return at == std::string::npos ? body : body.insert(at + 1, invalid_utf8(rng));
    }
    case 4: kind = "deep"; return nested(rng, pick(rng, 3) == 0 ? 200000 : 60 + pick(rng, 2000));
    case 5: {
      kind = "deep-field";
      return body.substr(0, body.size() - 1) + ",\"" + pick_of(rng, keys()) + "\":" + nested(rng, 50 + pick(rng, 5000)) + "}";
    }
    default: kind = "seed"; return body;
  }
}

std::string percent_bytes(Rng& rng) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string s;
  for (size_t i = 0, n = 1 + pick(rng, 4); i < n; ++i) {
    const auto b = static_cast<unsigned>(pick(rng, 256));
    s += '%';
    s += kHex[b >> 4];
    s += kHex[b & 15];
  }
  return s;
}

HostileRequest path_request(Rng& rng) {
  static const std::vector<std::string> prefixes = {"/", "/v1/", "/v1/models/", "/tokenize/", "/health/", "/metrics?"};
  static const std::vector<std::string> methods = {"GET", "POST", "PUT", "DELETE", "OPTIONS", "HEAD", "BREW"};
  std::string path = pick_of(rng, prefixes);
  switch (pick(rng, 3)) {
    case 0: path += percent_bytes(rng); break;
    case 1: path += invalid_utf8(rng); break;
    default: path += std::string(1 + pick(rng, 3000), 'a') + percent_bytes(rng); break;
  }
  const std::string method = pick_of(rng, methods);
  std::string bytes = method + " " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n";
  // Every request says how long its body is: without it httplib waits for a
  // PUT's or POST's body until the client closes, which is not what is tested here.
  bytes += method == "POST" ? "Content-Length: 2\r\n\r\n{}" : "Content-Length: 0\r\n\r\n";
  return {bytes, false, "path"};
}

HostileRequest framing_request(Rng& rng) {
  static const std::vector<std::string> heads = {
      "GARBAGE\r\nConnection: close\r\n\r\n",
      "GET\r\n\r\n",
      "GET / HTTP/9.9\r\nConnection: close\r\n\r\n",
      "POST /v1/completions HTTP/1.1\r\nContent-Length: abc\r\nConnection: close\r\n\r\n{}",
      "POST /v1/completions HTTP/1.1\r\nContent-Length: -5\r\nConnection: close\r\n\r\n{}",
      "POST /v1/completions HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n{}",
      "POST /v1/completions HTTP/1.1\r\nContent-Length: 100\r\nConnection: close\r\n\r\n{\"prompt\":",
      "POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\nzz\r\n",
      "POST /tokenize HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 9\r\nConnection: close\r\n\r\n{}",
      "GET / HTTP/1.1\r\nBad Header Without Colon\r\n\r\n",
      "\xff\xfe\xfd\r\n\r\n",
  };
  HostileRequest r{pick_of(rng, heads), true, "framing"};
  if (pick(rng, 3) == 0) r.bytes.insert(pick(rng, r.bytes.size()), 1, static_cast<char>(pick(rng, 256)));
  return r;
}

}  // namespace

HostileRequest hostile_request(uint64_t seed, uint64_t index) {
  Rng rng(seed * 0x9E3779B97F4A7C15ull + index);
  const size_t family = pick(rng, 10);
  if (family == 0) return path_request(rng);
  if (family == 1) return framing_request(rng);
  const auto& [path, body] = pick_of(rng, seeds());
  std::string kind;
  std::string mutated = mutate_body(rng, body, kind);
  const std::string route = pick(rng, 8) == 0 ? pick_of(rng, seeds()).first : path;  // a body for another route
  return {http_post(route, mutated), false, kind};
}

std::string shown(const std::string& bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < bytes.size() && i < 300; ++i) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return bytes.size() > 300 ? out + "..." : out;
}

}  // namespace kvlm::test
