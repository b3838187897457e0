// Server-sent events read from a byte stream as it arrives: each complete
// event's data (its `data:` lines joined with newlines), or a comment (a
// keep-alive). Only what OpenAI-style streams and KV events use: no event
// names, ids or retry fields (ignored).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kvlm::router {

struct SseEvent {
  std::string data;
  bool comment = false;  // only comment lines (": keep-alive")
};

class SseReader {
 public:
  // Appends bytes and returns the events they complete, in order.
  std::vector<SseEvent> feed(std::string_view bytes);
  // Bytes of an event not yet complete.
  size_t num_pending() const { return buffer_.size(); }

 private:
  std::string buffer_;
};

}  // namespace kvlm::router
