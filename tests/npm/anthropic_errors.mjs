// The official @anthropic-ai/sdk client's error classes and model list
// against `kvlm serve` (or `kvlm router`): each refusal on Anthropic's
// routes raises the class the SDK maps its status to (a 404 sub-route, an
// unknown model, a bad request, a wrong key, a key past its requests per
// minute, a server that cannot queue more), and models.list / retrieve read
// Anthropic's model objects. The server has the keys sk-main (no limits)
// and sk-limited (one request a minute), one sequence at a time and no
// queue, and is slowed per token so a stream keeps it busy. Prints one JSON
// object that tests/e2e/responses_clients_test.cpp checks.
// Usage: node anthropic_errors.mjs BASE_URL
import Anthropic from "@anthropic-ai/sdk";

const baseURL = process.argv[2];
const main = new Anthropic({ baseURL, apiKey: "sk-main", maxRetries: 0 });
const model = "kvlm";
const ask = { model, max_tokens: 4, messages: [{ role: "user", content: "Once upon a time" }] };

// The class an SDK call raised (or "ok"), its status and Anthropic's error type.
async function raised(call) {
  try {
    await call();
    return { class: "ok" };
  } catch (e) {
    return { class: e.constructor.name, status: e.status ?? null, type: e.error?.error?.type ?? null,
             envelope: e.error?.type ?? null };
  }
}

const out = {};
// A route of the API kvlm does not have (message batches): its 404 in Anthropic's shape.
out.not_found_route = await raised(() => main.messages.batches.retrieve("msgbatch_01"));
out.not_found_model = await raised(() => main.messages.create({ ...ask, model: "claude-nope" }));
out.bad_request = await raised(() => main.messages.create({ model, messages: ask.messages }));
out.authentication = await raised(() =>
  new Anthropic({ baseURL, apiKey: "sk-wrong", maxRetries: 0 }).messages.create(ask));
const limited = new Anthropic({ baseURL, apiKey: "sk-limited", maxRetries: 0 });
out.limited_first = await raised(() => limited.messages.create(ask));
out.rate_limit = await raised(() => limited.messages.create(ask));
// One stream holds the only sequence; the next request finds no room.
const busy = await main.messages.create({ ...ask, max_tokens: 200, stream: true });
const events = busy[Symbol.asyncIterator]();
await events.next();
out.overloaded = await raised(() => main.messages.create(ask));
busy.controller.abort();

const models = [];
for await (const m of main.models.list()) models.push(m);
out.models = models;
out.model = await main.models.retrieve(model);
out.model_missing = await raised(() => main.models.retrieve("claude-nope"));
console.log(JSON.stringify(out));
