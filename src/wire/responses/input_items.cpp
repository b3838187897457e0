#include "wire/responses/input_items.h"

#include <charconv>

#include <fmt/format.h>

#include "tokenizer/unicode.h"
#include "wire/responses/responses.h"

namespace kvlm::responses {

namespace {

const char* id_prefix(const std::string& type) {
  if (type == "function_call") return "fc";
  if (type == "function_call_output") return "fco";
  if (type == "reasoning") return "rs";
  return "msg";
}

openai::RequestError bad_param(const char* param, std::string message) {
  openai::RequestError e{400, std::move(message), std::string(param)};
  e.code = "invalid_value";
  return e;
}

}  // namespace

Json listed_item(const Json& given) {
  Json item = given;
  if (!item.contains("type")) item["type"] = "message";
  const std::string type = item["type"].is_string() ? item["type"].get<std::string>() : "message";
  if (type == "message") {
    const bool assistant = item.value("role", "") == "assistant";
    if (item.contains("content") && item["content"].is_string()) {
      const Json part = {{"type", assistant ? "output_text" : "input_text"}, {"text", item["content"]}};
      item["content"] = Json::array({part});
    }
  }
  item["id"] = item_id(id_prefix(type));
  if (type != "reasoning" && !item.contains("status")) item["status"] = "completed";
  return item;
}

std::variant<InputItemsQuery, openai::RequestError> read_input_items_query(const std::string& limit,
                                                                           const std::string& order,
                                                                           const std::string& after) {
  InputItemsQuery q;
  if (!limit.empty()) {
    int n = 0;
    const auto [end, ec] = std::from_chars(limit.data(), limit.data() + limit.size(), n);
    if (ec != std::errc() || end != limit.data() + limit.size() || n < 1 || n > 100)
      return bad_param("limit", "'limit' must be an integer from 1 to 100");
    q.limit = static_cast<size_t>(n);
  }
  if (!order.empty() && order != "asc" && order != "desc") return bad_param("order", "'order' must be asc or desc");
  q.ascending = order == "asc";
  if (!after.empty()) q.after = after;
  return q;
}

std::variant<Json, openai::RequestError> input_items_page(const Json& items, const InputItemsQuery& q) {
  const size_t n = items.size();
  // The i-th item in the order asked for.
  const auto at = [&](size_t i) -> const Json& { return items[q.ascending ? i : n - 1 - i]; };
  size_t start = 0;
  if (q.after) {
    while (start < n && at(start).value("id", "") != *q.after) ++start;
    if (start == n)
      return bad_param("after", fmt::format("'after': no input item '{}' in this response",
                                            unicode::sanitize_utf8(*q.after)));
    ++start;
  }
  Json data = Json::array();
  for (size_t i = start; i < n && data.size() < q.limit; ++i) data.push_back(at(i));
  const Json first = data.empty() ? Json(nullptr) : data.front()["id"];
  const Json last = data.empty() ? Json(nullptr) : data.back()["id"];
  return Json{{"object", "list"}, {"data", std::move(data)}, {"first_id", first}, {"last_id", last},
              {"has_more", start + q.limit < n}};
}

}  // namespace kvlm::responses
