// The server's admission limits (server.h ServerConfig): the 503 they answer
// and the queue check before a generation request is submitted.
#include <fmt/format.h>

#include "engine/engine.h"
#include "server/routes.h"

namespace kvlm {

void send_overloaded(httplib::Response& res, int retry_after_s, const std::string& message, const char* code) {
  openai::RequestError e{503, message, std::nullopt, "server_error"};
  e.code = code;
  send_error(res, e);
  res.set_header("Retry-After", std::to_string(retry_after_s));
}

bool refuse_when_queue_full(ServerContext& ctx, int32_t num_choices, httplib::Response& res) {
  if (ctx.max_queued_requests < 0) return false;
  // Requests past max_seqs wait; an idle engine takes any request (even one
  // whose choices alone exceed the cap), so a big `n` is never refused forever.
  const int32_t num_unfinished = ctx.engine.num_unfinished();
  const int64_t capacity = static_cast<int64_t>(ctx.engine.config().max_seqs) + ctx.max_queued_requests;
  if (num_unfinished == 0 || num_unfinished + num_choices <= capacity) return false;
  ++ctx.num_rejected_queue;
  send_overloaded(res, ctx.retry_after_s,
                  fmt::format("the server is busy: {} requests are running or waiting and at most {} may wait "
                              "(--max-queued-requests); retry later",
                              num_unfinished, ctx.max_queued_requests),
                  "queue_full");
  return true;
}

}  // namespace kvlm
