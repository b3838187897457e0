#include "apps/cli_parse.h"

#include <cstdlib>
#include <sstream>
#include <string_view>

namespace kvlm::apps {

bool parse_only() {
  static const bool on = [] {
    const char* v = std::getenv("KVLM_PARSE_ONLY");
    return v != nullptr && std::string_view(v) == "1";
  }();
  return on;
}

std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

}  // namespace kvlm::apps
