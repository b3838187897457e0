// The routes of a router with a model host (model_host.h): the models it
// can start, loading and unloading them, sleep and wake-up, and the lease a
// routed request takes on its model.
#include <fmt/format.h>

#include "common/error.h"
#include "router/context.h"
#include "router/metrics_merge.h"
#include "router/model_routes.h"
#include "wire/anthropic/models.h"
#include "wire/http/front.h"
#include "wire/openai/json_text.h"

namespace kvlm::router {

namespace {

// llama.cpp's router lists each model's state the same way (`status.value`).
Json model_json(const HostedModel& m) {
  Json status = {{"value", m.state}};
  if (!m.error.empty()) status["error"] = m.error;
  return Json{{"id", m.name}, {"object", "model"}, {"created", m.created}, {"owned_by", "kvlm"},
              {"status", std::move(status)}};
}

// A worker already serving `name` as a LoRA adapter (a flag the host passes
// to every model's worker): routed as usual, with no lease.
bool served_as_adapter(RouterContext& ctx, const std::string& name) {
  std::lock_guard lock(ctx.workers.mu());
  for (const auto& w : ctx.workers.all_locked())
    if (w->loras && w->loras->count(name)) return true;
  return false;
}

// The model a load, unload or sleep request names: {"model": NAME} in the
// body or ?model=NAME; nullopt for none.
std::optional<std::string> named_model(const http::Request& req) {
  if (const Json body = Json::parse(req.body, nullptr, false); body.is_object())
    if (const auto it = body.find("model"); it != body.end() && it->is_string()) return it->get<std::string>();
  static const std::string key = "model=";
  if (req.query.starts_with(key)) return req.query.substr(key.size(), req.query.find('&') - key.size());
  return std::nullopt;
}

void send_ok(http::Response& res, Json extra = Json::object()) {
  extra["success"] = true;
  res.set_content(openai::dump_json(extra), "application/json");
}

void send_busy(http::Response& res, const std::string& model) {
  openai::RequestError e{409, fmt::format("model '{}' has requests in flight; try again when they are done", model),
                         std::string("model")};
  e.code = "model_busy";
  send_error(res, e);
}

// Runs a host action, answering its Error as the client's fault or ours.
template <typename F>
void host_action(http::Response& res, F&& f) {
  try {
    f();
  } catch (const Error& e) {
    send_error(res, error_for(e));
  }
}

}  // namespace

bool lease_model(RouterContext& ctx, std::string& model, ModelHost::Lease& lease, http::Response& res) {
  ModelHost* host = ctx.config.model_host;
  if (!host) return true;
  if (model.empty()) model = host->default_model();
  if (!host->hosts(model)) {
    if (served_as_adapter(ctx, model)) return true;
    send_model_not_found(res, model);
    return false;
  }
  try {
    lease = host->acquire(model);
    return true;
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kUnavailable) {
      send_overloaded(res, ctx.config.retry_after_s, e.what(), "model_unavailable");
    } else {
      send_error(res, error_for(e));
    }
    return false;
  }
}

void handle_host_models(RouterContext& ctx, const http::Request& req, http::Response& res) {
  const std::vector<HostedModel> models = ctx.config.model_host->models();
  if (anthropic::asks_anthropic(req)) {
    std::vector<std::string> names;
    for (const HostedModel& m : models) names.push_back(m.name);
    auto page = anthropic::model_page(names, models.empty() ? 0 : models[0].created, req);
    if (auto* e = std::get_if<openai::RequestError>(&page)) return send_error(res, *e);
    return res.set_content(openai::dump_json(std::get<Json>(page)), "application/json");
  }
  Json data = Json::array();
  for (const HostedModel& m : models) data.push_back(model_json(m));
  res.set_content(openai::dump_json(Json{{"object", "list"}, {"data", std::move(data)}}), "application/json");
}

void handle_host_model(RouterContext& ctx, const http::Request& req, http::Response& res) {
  const std::string id = req.matches.size() > 1 ? req.matches[1] : "";
  for (const HostedModel& m : ctx.config.model_host->models())
    if (m.name == id)
      return res.set_content(openai::dump_json(anthropic::asks_anthropic(req) ? anthropic::model_json(m.name, m.created)
                                                                             : model_json(m)),
                             "application/json");
  if (served_as_adapter(ctx, id)) return handle_proxied(ctx, req, res);
  send_model_not_found(res, id);
}

void handle_models_load(RouterContext& ctx, const http::Request& req, http::Response& res) {
  const std::optional<std::string> model = named_model(req);
  if (!model) return send_error(res, {400, "give the model to load: {\"model\": NAME}", std::string("model")});
  host_action(res, [&] {
    ctx.config.model_host->load(*model);
    send_ok(res);
  });
}

void handle_models_unload(RouterContext& ctx, const http::Request& req, http::Response& res) {
  const std::optional<std::string> model = named_model(req);
  if (!model) return send_error(res, {400, "give the model to unload: {\"model\": NAME}", std::string("model")});
  host_action(res, [&] {
    const std::string busy = ctx.config.model_host->unload(*model);
    if (!busy.empty()) return send_busy(res, busy);
    send_ok(res);
  });
}

void handle_sleep(RouterContext& ctx, const http::Request& req, http::Response& res) {
  host_action(res, [&] {
    const std::string busy = ctx.config.model_host->sleep(named_model(req));
    if (!busy.empty()) return send_busy(res, busy);
    send_ok(res);
  });
}

void handle_wake_up(RouterContext& ctx, const http::Request& req, http::Response& res) {
  host_action(res, [&] {
    ctx.config.model_host->wake_up(named_model(req));
    send_ok(res);
  });
}

void handle_is_sleeping(RouterContext& ctx, const http::Request&, http::Response& res) {
  res.set_content(openai::dump_json(Json{{"is_sleeping", ctx.config.model_host->sleeping()}}), "application/json");
}

std::string host_metrics_text(const ModelHost& host) {
  const std::vector<HostedModel> models = host.models();
  std::string out;
  auto family = [&](const char* name, const char* type, const char* help, auto value) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
    for (const HostedModel& m : models)
      out += fmt::format("{}{{model_name=\"{}\"}} {}\n", name, prometheus_label_value(m.name), value(m));
  };
  family("kvlm_model_loaded", "gauge", "1 while the model's worker is loaded and ready.",
         [](const HostedModel& m) { return m.state == "loaded" ? 1 : 0; });
  family("kvlm_model_sleeping", "gauge", "1 while the model sleeps (its memory given back until a request).",
         [](const HostedModel& m) { return m.state == "sleeping" ? 1 : 0; });
  family("kvlm_model_memory_bytes", "gauge", "Resident memory of the model's worker when last measured.",
         [](const HostedModel& m) { return m.memory_bytes; });
  family("kvlm_model_loads_total", "counter", "Times the model's worker was started.",
         [](const HostedModel& m) { return m.num_loads; });
  family("kvlm_model_load_seconds", "gauge", "Seconds the model's last load took, from start to ready.",
         [](const HostedModel& m) { return m.last_load_seconds; });
  return out;
}

}  // namespace kvlm::router
