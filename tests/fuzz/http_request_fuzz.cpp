// libFuzzer target: the bytes a client sends kvlm serve or kvlm router, as the
// transport's strict parser reads them (wire/http/request_parser.h). The
// input is parsed twice, once whole and once cut into reads at points its
// first byte picks; both must end the same way (the same request, or the
// same refusal), since a parser whose answer depends on how TCP cut the bytes
// is a smuggling hazard. Small limits make the limits reachable.
//
//   scripts/fuzz.sh 60 (FUZZ_TARGETS=http_request)
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "wire/http/request_parser.h"

namespace {

using kvlm::http::ParseLimits;
using kvlm::http::RequestParser;
using State = RequestParser::State;

struct Outcome {
  std::vector<std::string> requests;  // method, path, body of each complete request
  int error_status = 0;
};

Outcome parse(std::string_view bytes, size_t step) {
  const ParseLimits limits{.max_head_bytes = 2048, .max_headers = 16, .max_body_bytes = 4096};
  RequestParser p(limits);
  Outcome out;
  std::string in;
  for (size_t i = 0; i < bytes.size(); i += step) {
    in.append(bytes.substr(i, step));
    for (;;) {
      const State s = p.feed(in);
      if (s == State::kHeadDone) continue;
      if (s == State::kError) {
        out.error_status = p.error().status;
        return out;
      }
      if (s == State::kNeedMore) break;
      const kvlm::http::Request& r = p.request();
      if (r.body.size() > limits.max_body_bytes) std::abort();
      out.requests.push_back(r.method + " " + r.path + " " + r.body);
      p.reset();
    }
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  const Outcome whole = parse(bytes, bytes.size() + 1);
  const Outcome cut = parse(bytes, 1 + data[0] % 32);
  if (whole.requests != cut.requests || whole.error_status != cut.error_status) std::abort();
  return 0;
}
