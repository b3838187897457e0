#include "wire/anthropic/models.h"

#include <charconv>
#include <ctime>

#include <fmt/format.h>

#include "wire/anthropic/messages.h"

namespace kvlm::anthropic {

namespace {

bool under(const std::string& path, std::string_view prefix) {
  return path == prefix || (path.starts_with(prefix) && path[prefix.size()] == '/');
}

openai::RequestError bad_param(const char* param, std::string message) {
  return openai::RequestError{400, std::move(message), std::string(param)};
}

// The index of `id` in `ids`, or nullopt.
std::optional<size_t> index_of(const std::vector<std::string>& ids, const std::string& id) {
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] == id) return i;
  return std::nullopt;
}

}  // namespace

bool asks_anthropic(const http::Request& req) { return req.has_header("anthropic-version"); }

Json model_json(const std::string& id, int64_t created) {
  const std::time_t t = static_cast<std::time_t>(created);
  std::tm utc{};
  gmtime_r(&t, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return {{"type", "model"}, {"id", id}, {"display_name", id}, {"created_at", stamp}};
}

std::variant<Json, openai::RequestError> model_page(const std::vector<std::string>& ids, int64_t created,
                                                    const http::Request& req) {
  size_t limit = 20;
  if (const std::string s = req.get_param_value("limit"); !s.empty()) {
    int n = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
    if (ec != std::errc() || end != s.data() + s.size() || n < 1 || n > 1000)
      return bad_param("limit", "limit: must be an integer from 1 to 1000");
    limit = static_cast<size_t>(n);
  }
  // The page runs forward from after_id, or ends just before before_id.
  size_t begin = 0, end = ids.size();
  for (const char* param : {"after_id", "before_id"}) {
    const std::string id = req.get_param_value(param);
    if (id.empty()) continue;
    const std::optional<size_t> at = index_of(ids, id);
    if (!at) return bad_param(param, fmt::format("{}: no model '{}'", param, id));
    if (param[0] == 'a') begin = *at + 1;
    else end = *at;
  }
  const bool backward = req.has_param("before_id") && !req.has_param("after_id");
  if (end < begin) end = begin;
  if (end - begin > limit) {
    if (backward) begin = end - limit;
    else end = begin + limit;
  }
  Json data = Json::array();
  for (size_t i = begin; i < end; ++i) data.push_back(model_json(ids[i], created));
  const bool more = backward ? begin > 0 : end < ids.size();
  return Json{{"data", data}, {"has_more", more},
              {"first_id", data.empty() ? Json(nullptr) : data.front()["id"]},
              {"last_id", data.empty() ? Json(nullptr) : data.back()["id"]}};
}

void shape_error(const http::Request& req, http::Response& res) {
  if (res.status < 400 || res.later == http::Response::Later::kStream) return;
  if (!under(req.path, "/v1/messages") && !(under(req.path, "/v1/models") && asks_anthropic(req))) return;
  if (res.status == 503) res.status = 529;  // what Anthropic answers when it cannot take a request now
  rewrite_error(res.status, res.body);
}

}  // namespace kvlm::anthropic
