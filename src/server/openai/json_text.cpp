#include "server/openai/json_text.h"

#include <fmt/format.h>

#include "common/error.h"

namespace kvlm::openai {

Json parse_json(std::string_view text) {
  // The callback runs as each container opens, before its children exist, so
  // the depth is refused before any deep value is built. depth counts from 0
  // at the top-level container.
  const Json::parser_callback_t limit_depth = [](int depth, Json::parse_event_t event, Json&) {
    if ((event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) &&
        depth >= kMaxJsonDepth)
      throw_error(ErrorCode::kInvalidArgument, "JSON nested deeper than {} levels", kMaxJsonDepth);
    return true;
  };
  // nlohmann's parser ends its input at a NUL byte, so "{...}\0{...}" would
  // read as its first object: JSON text holds no raw NUL anywhere.
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos)
    throw_error(ErrorCode::kInvalidArgument, "not valid JSON: a NUL byte at offset {}", nul);
  try {
    return Json::parse(text.begin(), text.end(), limit_depth);
  } catch (const nlohmann::json::parse_error& e) {
    throw_error(ErrorCode::kInvalidArgument, "not valid JSON: {}", e.what());
  } catch (const nlohmann::json::out_of_range& e) {
    // 406: a number such as 1e400 that does not fit a double.
    throw_error(ErrorCode::kInvalidArgument, "not valid JSON (a number out of range): {}", e.what());
  } catch (const nlohmann::json::exception& e) {
    throw_error(ErrorCode::kInvalidArgument, "not valid JSON: {}", e.what());
  }
}

int64_t parsed_json_bytes(std::string_view text) {
  constexpr int64_t kSlotBytes = 48, kMemberBytes = 96, kContainerBytes = 64, kStringBytes = 48;
  int64_t num_commas = 0, num_members = 0, num_containers = 0, num_strings = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    switch (c) {
      case '"': in_string = true; ++num_strings; break;
      case ',': ++num_commas; break;
      case ':': ++num_members; break;
      case '[':
      case '{': ++num_containers; break;
      default: break;
    }
  }
  // Each container holds one value more than its commas separate.
  const int64_t num_values = 1 + num_commas + num_containers;
  return 2 * static_cast<int64_t>(text.size()) + num_values * kSlotBytes + num_members * kMemberBytes +
         num_containers * kContainerBytes + num_strings * kStringBytes;
}

std::string dump_json(const Json& j) {
  return j.dump(-1, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace);
}

}  // namespace kvlm::openai
