// Stop strings over streamed text: holds back the tail that could still grow
// into a stop string, so the client never sees part of one.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kvlm {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  // Appends newly decoded text. Returns the text now safe to emit. After a
  // match, stopped() is true and the returned text ends just before the stop
  // string; later calls return "".
  std::string push(std::string_view text);
  // Whatever was held back (call at the end when no stop string matched).
  std::string flush();
  bool stopped() const { return stopped_; }
  // The stop string that matched (after stopped()).
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace kvlm
