#include "wire/http/body_memory.h"

#include <fmt/format.h>

#include "wire/http/front.h"
#include "wire/openai/json_text.h"

namespace kvlm {

int64_t take_body_memory(MemoryBudget& budget, int retry_after_s, std::atomic<int64_t>& num_rejected,
                         const http::Request& req, http::Response& res) {
  if (req.body.empty()) return 0;
  const int64_t need = openai::parsed_json_bytes(req.body);
  if (budget.try_take(need)) return need;
  const double mib = 1 << 20;
  if (need > budget.limit()) {
    send_error(res, {413, fmt::format("the request body would take about {:.0f} MiB once parsed, more than the server "
                                      "gives all requests together (--body-mem {:.0f} MiB)",
                                      need / mib, budget.limit() / mib)});
  } else {
    ++num_rejected;
    send_overloaded(res, retry_after_s,
                    fmt::format("the server is holding {:.0f} of {:.0f} MiB of parsed request bodies (--body-mem) and "
                                "this one needs {:.0f} MiB more; retry later",
                                budget.num_bytes_in_use() / mib, budget.limit() / mib, need / mib),
                    "body_memory_exhausted");
  }
  return 0;
}

}  // namespace kvlm
