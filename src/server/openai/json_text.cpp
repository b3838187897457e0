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

std::string dump_json(const Json& j) {
  return j.dump(-1, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace);
}

}  // namespace kvlm::openai
