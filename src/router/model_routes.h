// The routes of a router with a model host (model_host.h; internal to
// router/): GET /v1/models and /v1/models/{id} list every model the host
// can start with its state; POST /models/load and /models/unload; vLLM's
// POST /sleep, /wake_up and GET /is_sleeping.
#pragma once

#include <string>

#include "router/context.h"
#include "router/model_host.h"

namespace kvlm::router {

// Before routing: with a model host, the request's model (the default one
// when it names none; filled into `model`) is started if need be and
// leased. False when it cannot be (answered: 404 for a model the host does
// not know and no worker serves as an adapter, 503 when it cannot load).
bool lease_model(RouterContext& ctx, std::string& model, ModelHost::Lease& lease, http::Response& res);

void handle_host_models(RouterContext& ctx, const http::Request& req, http::Response& res);
void handle_host_model(RouterContext& ctx, const http::Request& req, http::Response& res);
void handle_models_load(RouterContext& ctx, const http::Request& req, http::Response& res);
void handle_models_unload(RouterContext& ctx, const http::Request& req, http::Response& res);
void handle_sleep(RouterContext& ctx, const http::Request& req, http::Response& res);
void handle_wake_up(RouterContext& ctx, const http::Request& req, http::Response& res);
void handle_is_sleeping(RouterContext& ctx, const http::Request& req, http::Response& res);

// The host's per-model series (kvlm_model_*{model="NAME"}).
std::string host_metrics_text(const ModelHost& host);

}  // namespace kvlm::router
