#include "wire/http/api_keys.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "common/error.h"
#include "wire/http/front.h"

namespace kvlm {

// Token buckets refilled continuously: `rate` per minute, at most `rate`
// held. A request takes from them; tokens are charged after the fact, so the
// tokens bucket may go below zero and then refuses until it refills.
class KeyState {
 public:
  KeyState(ApiKey key) : key_(std::move(key)) {
    requests_ = static_cast<double>(key_.limits.requests_per_minute);
    tokens_ = static_cast<double>(key_.limits.tokens_per_minute);
    refilled_ = Clock::now();
  }
  const ApiKey& key() const { return key_; }
  void set_key(ApiKey key) {
    std::lock_guard lock(mu_);
    key_ = std::move(key);
  }

  // nullopt: admitted (a concurrent slot taken); else (retry after s, why, which limit).
  std::optional<std::tuple<int, std::string, std::string>> try_admit() {
    std::lock_guard lock(mu_);
    refill();
    const KeyLimits& l = key_.limits;
    if (l.max_concurrent > 0 && num_running_ >= l.max_concurrent) {
      ++refused_["concurrent"];
      return std::tuple{1, fmt::format("{} requests at once", l.max_concurrent), std::string("concurrent")};
    }
    if (l.requests_per_minute > 0 && requests_ < 1) {
      ++refused_["requests_per_minute"];
      return std::tuple{wait_s(1 - requests_, l.requests_per_minute),
                        fmt::format("{} requests per minute", l.requests_per_minute),
                        std::string("requests_per_minute")};
    }
    if (l.tokens_per_minute > 0 && tokens_ <= 0) {
      ++refused_["tokens_per_minute"];
      return std::tuple{wait_s(1 - tokens_, l.tokens_per_minute),
                        fmt::format("{} tokens per minute", l.tokens_per_minute), std::string("tokens_per_minute")};
    }
    if (l.requests_per_minute > 0) requests_ -= 1;
    ++num_running_;
    ++num_requests_;
    return std::nullopt;
  }
  void end() {
    std::lock_guard lock(mu_);
    --num_running_;
  }
  void charge(int64_t n) {
    std::lock_guard lock(mu_);
    refill();
    tokens_ -= static_cast<double>(n);
    num_tokens_ += n;
  }
  std::string metrics_lines() const {
    std::lock_guard lock(mu_);
    std::string name;
    for (char c : key_.name) name += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
    std::string out = fmt::format("kvlm_api_key_requests_total{{key=\"{}\"}} {}\n", name, num_requests_);
    out += fmt::format("kvlm_api_key_tokens_total{{key=\"{}\"}} {}\n", name, num_tokens_);
    out += fmt::format("kvlm_api_key_requests_running{{key=\"{}\"}} {}\n", name, num_running_);
    for (const char* why : {"concurrent", "requests_per_minute", "tokens_per_minute"}) {
      const auto it = refused_.find(why);
      out += fmt::format("kvlm_api_key_rejected_total{{key=\"{}\",limit=\"{}\"}} {}\n", name, why,
                         it == refused_.end() ? 0 : it->second);
    }
    return out;
  }

 private:
  using Clock = std::chrono::steady_clock;
  void refill() {
    const auto now = Clock::now();
    const double minutes = std::chrono::duration<double>(now - refilled_).count() / 60.0;
    refilled_ = now;
    const KeyLimits& l = key_.limits;
    if (l.requests_per_minute > 0)
      requests_ = std::min<double>(requests_ + minutes * l.requests_per_minute, l.requests_per_minute);
    if (l.tokens_per_minute > 0)
      tokens_ = std::min<double>(tokens_ + minutes * l.tokens_per_minute, l.tokens_per_minute);
  }
  static int wait_s(double missing, int64_t per_minute) {
    return std::max(1, static_cast<int>(std::ceil(missing * 60.0 / static_cast<double>(per_minute))));
  }

  mutable std::mutex mu_;
  ApiKey key_;
  double requests_ = 0, tokens_ = 0;
  Clock::time_point refilled_;
  int32_t num_running_ = 0;
  int64_t num_requests_ = 0, num_tokens_ = 0;
  std::map<std::string, int64_t> refused_;
};

bool same_secret(std::string_view value, std::string_view key) {
  unsigned diff = value.size() == key.size() ? 0u : 1u;
  for (size_t i = 0; i < key.size(); ++i)
    diff |= static_cast<unsigned char>(key[i]) ^ static_cast<unsigned char>(i < value.size() ? value[i] : 0);
  return diff == 0;
}

namespace {

// What `req` presents as its key: the bearer token, else x-api-key.
std::string presented(const http::Request& req) {
  const std::string auth = req.get_header_value("Authorization");
  if (auth.rfind("Bearer ", 0) == 0) return auth.substr(7);
  return req.get_header_value("x-api-key");
}

int64_t field_value(const std::string& path, int line, const std::string& field, const std::string& value) {
  try {
    size_t used = 0;
    const long long v = std::stoll(value, &used);
    if (used == value.size() && v >= 0) return v;
  } catch (const std::exception&) {
  }
  throw_error(ErrorCode::kInvalidArgument, "{} line {}: {} must be a non-negative integer, got '{}'", path, line, field,
              value);
}

ApiKey parse_line(const std::string& path, int line, std::istringstream& in) {
  ApiKey k;
  in >> k.secret;
  for (std::string field; in >> field;) {
    const size_t eq = field.find('=');
    const std::string name = field.substr(0, eq), value = eq == std::string::npos ? "" : field.substr(eq + 1);
    if (name == "name" && !value.empty()) k.name = value;
    else if (name == "rpm") k.limits.requests_per_minute = field_value(path, line, name, value);
    else if (name == "tpm") k.limits.tokens_per_minute = field_value(path, line, name, value);
    else if (name == "concurrent") k.limits.max_concurrent = static_cast<int32_t>(field_value(path, line, name, value));
    else
      throw_error(ErrorCode::kInvalidArgument, "{} line {}: unknown field '{}' (name=, rpm=, tpm=, concurrent=)", path,
                  line, field);
  }
  if (k.name.empty()) k.name = fmt::format("line-{}", line);
  return k;
}

}  // namespace

std::vector<ApiKey> parse_api_key_file(std::string_view text, const std::string& path) {
  std::vector<ApiKey> keys;
  std::set<std::string> names;
  std::istringstream lines{std::string(text)};
  int num = 0;
  for (std::string line; std::getline(lines, line);) {
    ++num;
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.erase(hash);
    std::istringstream in(line);
    if (std::string probe; !(std::istringstream(line) >> probe)) continue;  // blank
    ApiKey k = parse_line(path, num, in);
    if (!names.insert(k.name).second)
      throw_error(ErrorCode::kInvalidArgument, "{} line {}: the name '{}' is used twice", path, num, k.name);
    keys.push_back(std::move(k));
  }
  return keys;
}

namespace {

// The text of --api-key-file `path`; throws Error naming the file when it
// cannot be read (missing, a folder, no permission).
std::string read_api_key_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw_error(ErrorCode::kInvalidArgument, "--api-key-file {}: is a folder, not a key file", path);
  std::ifstream in(path);
  if (!in) throw_error(ErrorCode::kNotFound, "--api-key-file {}: cannot read it: {}", path, std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) throw_error(ErrorCode::kInvalidArgument, "--api-key-file {}: cannot read it", path);
  return text.str();
}

}  // namespace

std::vector<ApiKey> load_api_keys(const std::vector<std::string>& keys, const std::string& file) {
  std::vector<ApiKey> out;
  for (size_t i = 0; i < keys.size(); ++i) {
    // An empty key would match a request that presents none: refused rather
    // than skipped, since skipping the only key turned authentication off.
    if (keys[i].empty())
      throw_error(ErrorCode::kInvalidArgument,
                  "--api-key \"\": an empty key would turn authentication off; give the key, or leave --api-key "
                  "out to serve without keys");
    out.push_back({fmt::format("key-{}", i + 1), keys[i], {}});
  }
  if (file.empty()) return out;
  std::vector<ApiKey> from_file = parse_api_key_file(read_api_key_file(file), file);
  // A key file that names no key (empty, truncated, only comments) is a
  // mistake, never a wish to serve without keys: that is leaving it out.
  if (from_file.empty())
    throw_error(ErrorCode::kInvalidArgument,
                "--api-key-file {}: holds no key (it is empty or has only comments and blank lines); "
                "authentication would be off",
                file);
  for (ApiKey& k : from_file) out.push_back(std::move(k));
  return out;
}

KeyTicket::KeyTicket(std::shared_ptr<KeyState> key) : key_(std::move(key)) {}
KeyTicket::~KeyTicket() { key_->end(); }
void KeyTicket::charge_tokens(int64_t n) { key_->charge(n); }

ApiKeyring::ApiKeyring(std::vector<ApiKey> keys) { replace(std::move(keys)); }
ApiKeyring::~ApiKeyring() = default;

void ApiKeyring::replace(std::vector<ApiKey> keys) {
  std::lock_guard lock(mu_);
  // A ring that checks keys never stops checking: an empty set here is a
  // reload that went wrong, and the keys in use stay.
  if (keys.empty() && !by_name_.empty())
    throw_error(ErrorCode::kInvalidArgument, "the new set of API keys is empty: it would turn authentication off");
  std::map<std::string, std::shared_ptr<KeyState>> next;
  for (ApiKey& k : keys) {
    auto it = by_name_.find(k.name);
    std::shared_ptr<KeyState> state = it != by_name_.end() ? it->second : nullptr;
    if (state) {
      state->set_key(k);
    } else {
      state = std::make_shared<KeyState>(k);
    }
    next.emplace(k.name, std::move(state));
  }
  for (auto& [name, state] : by_name_)
    if (!next.count(name)) retired_.push_back(state);
  by_name_ = std::move(next);
}

bool ApiKeyring::enabled() const {
  std::lock_guard lock(mu_);
  return !by_name_.empty();
}

std::shared_ptr<KeyState> ApiKeyring::find(const http::Request& req, std::string* name) const {
  const std::string value = presented(req);
  std::lock_guard lock(mu_);
  std::shared_ptr<KeyState> found;
  for (const auto& [key_name, state] : by_name_)  // every key compared: no early exit on a match
    if (same_secret(value, state->key().secret)) found = state;
  if (found && name) *name = found->key().name;  // under mu_: a reload sets keys under it
  return found;
}

std::optional<std::unique_ptr<KeyTicket>> ApiKeyring::admit(const std::shared_ptr<KeyState>& key,
                                                             http::Response& res) {
  if (auto refused = key->try_admit()) {
    const auto& [retry_after, what, limit] = *refused;
    openai::RequestError e{429,
                           fmt::format("rate limit reached for key '{}': {}; retry after {} s", key->key().name, what,
                                       retry_after),
                           std::nullopt, "requests"};
    e.code = "rate_limit_exceeded";
    send_error(res, e);
    res.set_header("Retry-After", std::to_string(retry_after));
    return std::nullopt;
  }
  return std::make_unique<KeyTicket>(key);
}

std::string ApiKeyring::metrics_text() const {
  std::lock_guard lock(mu_);
  if (by_name_.empty() && retired_.empty()) return "";
  std::string lines;
  for (const auto& [name, state] : by_name_) lines += state->metrics_lines();
  for (const auto& state : retired_) lines += state->metrics_lines();
  // One # TYPE line per metric, before its samples, as the exposition format wants.
  std::string out;
  for (const auto& [metric, type] : std::vector<std::pair<std::string, std::string>>{
           {"kvlm_api_key_requests_total", "counter"}, {"kvlm_api_key_tokens_total", "counter"},
           {"kvlm_api_key_requests_running", "gauge"}, {"kvlm_api_key_rejected_total", "counter"}}) {
    out += fmt::format("# HELP {} per API key (by name)\n# TYPE {} {}\n", metric, metric, type);
    std::istringstream in(lines);
    for (std::string l; std::getline(in, l);)
      if (l.rfind(metric + "{", 0) == 0) out += l + "\n";
  }
  return out;
}

bool presents_key(const http::Request& req, const std::string& key) { return same_secret(presented(req), key); }

}  // namespace kvlm
