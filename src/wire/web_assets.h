// The chat page's static files (src/wire/web), compiled into the binary
// by cmake/embed_web.cmake. Served by routes_web.cpp.
#pragma once

#include <span>
#include <string_view>

namespace kvlm {

struct WebAsset {
  std::string_view path;          // "/index.html", "/app.js", ...
  std::string_view content_type;
  std::string_view bytes;
};

std::span<const WebAsset> web_assets();

}  // namespace kvlm
