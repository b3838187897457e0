#include "router/sse.h"

namespace kvlm::router {
namespace {

// The event in `block` (its lines, without the blank line that ended it).
SseEvent parse_event(std::string_view block) {
  SseEvent ev;
  bool has_data = false, has_comment = false;
  while (!block.empty()) {
    const size_t eol = block.find('\n');
    std::string_view line = block.substr(0, eol);
    block = eol == std::string_view::npos ? std::string_view() : block.substr(eol + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    if (line.front() == ':') {
      has_comment = true;
      continue;
    }
    if (line.rfind("data:", 0) != 0) continue;
    line.remove_prefix(5);
    if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
    if (has_data) ev.data += '\n';
    ev.data.append(line);
    has_data = true;
  }
  ev.comment = has_comment && !has_data;
  return ev;
}

}  // namespace

std::vector<SseEvent> SseReader::feed(std::string_view bytes) {
  buffer_.append(bytes);
  std::vector<SseEvent> out;
  size_t start = 0;
  for (;;) {
    // An event ends at a blank line: "\n\n" (or "\r\n\r\n").
    size_t end = buffer_.find("\n\n", start);
    size_t skip = 2;
    if (const size_t crlf = buffer_.find("\r\n\r\n", start); crlf != std::string::npos && crlf < end) {
      end = crlf;
      skip = 4;
    }
    if (end == std::string::npos) break;
    SseEvent ev = parse_event(std::string_view(buffer_).substr(start, end - start));
    if (ev.comment || !ev.data.empty()) out.push_back(std::move(ev));
    start = end + skip;
  }
  buffer_.erase(0, start);
  return out;
}

}  // namespace kvlm::router
