// API keys for kvlm serve and kvlm router: several keys, each with a name
// (what metrics and logs show: never the key) and optional limits —
// requests per minute, tokens per minute, requests at once. Keys come from
// --api-key (repeatable, no limits) and --api-key-file, reloaded on SIGHUP
// without dropping a request.
//
// A request presents its key as `Authorization: Bearer KEY` or `x-api-key:
// KEY`. Every configured key is compared with it in full, in time that
// depends only on the keys' lengths, so the time of a refusal tells nothing
// of how much of a guess was right.
//
// The key file: one key a line, then optional fields; `#` starts a comment.
//   sk-team-a-7f3e...  name=team-a rpm=600 tpm=200000 concurrent=8
//   sk-batch-91c2...   name=batch concurrent=2
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "wire/http/message.h"

namespace kvlm {

struct KeyLimits {
  int64_t requests_per_minute = 0;  // 0: no limit
  int64_t tokens_per_minute = 0;    // prompt and completion tokens; 0: no limit
  int32_t max_concurrent = 0;       // generation requests at once; 0: no limit
};

struct ApiKey {
  std::string name;
  std::string secret;
  KeyLimits limits;
};

// The keys of --api-key-file `path`'s text; throws Error(kInvalidArgument)
// naming the file and line for a bad line or a name given twice.
std::vector<ApiKey> parse_api_key_file(std::string_view text, const std::string& path);
// The keys of --api-key values (named key-1, key-2, ...) and of the file (if
// any). Fails closed: throws Error naming the flag for an empty key and for a
// file that cannot be read, does not parse or holds no key (empty, only
// comments), so a mistake never serves without keys. No keys and no file:
// an empty set (authentication off, as asked).
std::vector<ApiKey> load_api_keys(const std::vector<std::string>& keys, const std::string& file);

// One key's counters and limits' state. Thread-safe.
class KeyState;

// A metered request's claim on its key: counted in the key's concurrent
// requests until destroyed; tokens are charged to the key as they are known.
class KeyTicket {
 public:
  explicit KeyTicket(std::shared_ptr<KeyState> key);
  ~KeyTicket();
  KeyTicket(const KeyTicket&) = delete;
  KeyTicket& operator=(const KeyTicket&) = delete;
  void charge_tokens(int64_t n);

 private:
  std::shared_ptr<KeyState> key_;
};

class ApiKeyring {
 public:
  explicit ApiKeyring(std::vector<ApiKey> keys);
  ~ApiKeyring();
  // SIGHUP: the new set. A name that stays keeps its counters and limits'
  // state; requests in flight finish under the key they came with. Throws
  // Error(kInvalidArgument), changing nothing, for an empty set while keys
  // are in use: a reload never turns authentication off.
  void replace(std::vector<ApiKey> keys);
  bool enabled() const;  // false: no key configured, every request passes

  // The key `req` presents, or null (missing or wrong; also null when the
  // ring is not enabled). `name`, when given, gets the key's name.
  std::shared_ptr<KeyState> find(const http::Request& req, std::string* name = nullptr) const;

  // A generation request under `key`'s limits: a ticket, or nullopt with
  // `res` answered 429 (Retry-After, an OpenAI error naming the limit).
  std::optional<std::unique_ptr<KeyTicket>> admit(const std::shared_ptr<KeyState>& key, http::Response& res);

  // Prometheus lines per key name: requests, refusals by limit, tokens.
  std::string metrics_text() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<KeyState>> by_name_;  // the current keys
  std::vector<std::shared_ptr<KeyState>> retired_;            // dropped by a reload (their counters stay)
};

// Whether `req` presents `key` (Bearer or x-api-key), in constant time.
bool presents_key(const http::Request& req, const std::string& key);
// `value` against `key`, every byte of `key` read whatever differs: the time
// depends on the key's length only.
bool same_secret(std::string_view value, std::string_view key);

}  // namespace kvlm
