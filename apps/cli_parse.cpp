#include "apps/cli_parse.h"

#include <cstdlib>
#include <string_view>

namespace kvlm::apps {

bool parse_only() {
  static const bool on = [] {
    const char* v = std::getenv("KVLM_PARSE_ONLY");
    return v != nullptr && std::string_view(v) == "1";
  }();
  return on;
}

}  // namespace kvlm::apps
