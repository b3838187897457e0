#include "router/usage_tally.h"

namespace kvlm::router {
namespace {

using Json = nlohmann::ordered_json;

int64_t int_field(const Json& o, const char* key) {
  if (!o.is_object()) return 0;
  const auto it = o.find(key);
  return it != o.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}

const Json* object_field(const Json& o, const char* key) {
  if (!o.is_object()) return nullptr;
  const auto it = o.find(key);
  return it != o.end() && it->is_object() ? &*it : nullptr;
}

}  // namespace

int64_t usage_total(const Json& usage) {
  if (!usage.is_object()) return 0;
  if (usage.contains("total_tokens")) return int_field(usage, "total_tokens");
  if (usage.contains("input_tokens") || usage.contains("output_tokens"))
    return int_field(usage, "input_tokens") + int_field(usage, "output_tokens");
  return int_field(usage, "prompt_tokens") + int_field(usage, "completion_tokens");
}

int64_t body_usage_total(std::string_view body) {
  if (body.find("\"usage\"") == std::string_view::npos) return 0;
  const Json j = Json::parse(body, nullptr, false);
  const Json* usage = object_field(j, "usage");
  return usage ? usage_total(*usage) : 0;
}

void UsageTally::feed_event(std::string_view data) {
  if (data.find("\"usage\"") == std::string_view::npos) return;
  const Json j = Json::parse(data, nullptr, false);
  if (!j.is_object()) return;
  const std::string type = j.value("type", "");
  if (type == "message_start") {
    if (const Json* message = object_field(j, "message"))
      if (const Json* usage = object_field(*message, "usage")) {
        input_ = int_field(*usage, "input_tokens");
        output_ = int_field(*usage, "output_tokens");
      }
  } else if (type == "message_delta") {
    if (const Json* usage = object_field(j, "usage")) output_ = int_field(*usage, "output_tokens");
  } else if (const Json* response = object_field(j, "response")) {
    if (const Json* usage = object_field(*response, "usage")) reported_ = usage_total(*usage);
  } else if (const Json* usage = object_field(j, "usage")) {
    reported_ = usage_total(*usage);
  }
}

int64_t UsageTally::total() const { return reported_ > 0 ? reported_ : input_ + output_; }

}  // namespace kvlm::router
