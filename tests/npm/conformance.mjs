// The conformance run of tests/e2e/conformance_test.cpp: the unmodified
// official openai npm client and LangChain JS against one `kvlm serve` of a
// random-weight model with a real chat template (Qwen2.5's, the hermes
// tool-call format). Each case prints what the client got, or the error it
// threw, into one JSON object; the C++ test checks it.
//
// Random weights write gibberish, so no case depends on what they write:
// cases compare two answers of the same model (greedy, streamed and not, a
// list of prompts and each prompt alone), or read output a grammar forces
// (tool calls, JSON schemas with bounded strings and numbers, a guided
// choice that spells a call). LangChain's jsonMode (any JSON object, which
// ends only when the model closes it) is left out for that reason.
//
// Usage: node conformance.mjs BASE_URL API_KEY
import OpenAI from "openai";
import { zodFunction, zodResponseFormat } from "openai/helpers/zod";
import { z } from "zod";
import { ChatOpenAI, OpenAI as LangChainOpenAI } from "@langchain/openai";
import { tool as langchainTool } from "@langchain/core/tools";

const [base, key] = process.argv.slice(2);
const client = new OpenAI({ baseURL: base + "/v1", apiKey: key, maxRetries: 0 });
const model = "kvlm-tiny";
const out = {};

// What a client threw: its class (the SDK's error classes follow the
// status), status, OpenAI code and param.
function thrown(e) {
  return { thrown: e?.constructor?.name ?? "?", status: e?.status ?? null, code: e?.code ?? e?.error?.code ?? null,
           param: e?.param ?? e?.error?.param ?? null, message: String(e?.message ?? e) };
}
async function run(name, f) {
  try {
    out[name] = await f();
  } catch (e) {
    out[name] = thrown(e);
  }
}
const calls = (m) => (m.tool_calls ?? []).map((c) => ({ id: c.id, type: c.type, name: c.function.name,
                                                       arguments: c.function.arguments }));
const choiceFacts = (c) => ({ finish_reason: c.finish_reason, content: c.message.content ?? null,
                              tool_calls: calls(c.message), function_call: c.message.function_call ?? null });

// --- models and names ------------------------------------------------------
await run("models", async () => ({ ids: (await client.models.list()).data.map((m) => m.id),
                                   retrieved: (await client.models.retrieve("gpt-4o-mini")).id }));
await run("model_retrieve_unknown", () => client.models.retrieve("gpt-5"));
const question = [{ role: "user", content: "What is the weather in Paris?" }];
await run("chat_unknown_model", () => client.chat.completions.create({ model: "gpt-5", messages: question, max_tokens: 2 }));
await run("chat_without_model", async () => (await client.chat.completions.create({ messages: question, max_tokens: 2 })).model);
await run("chat_alias", async () => (await client.chat.completions.create({ model: "gpt-4o-mini", messages: question,
                                                                               max_tokens: 2 })).model);

// --- chat, streaming with usage, n, logprobs -------------------------------
const chat = { model, temperature: 0, max_tokens: 12,
               messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "Tell me a story." }] };
await run("chat", async () => {
  const r = await client.chat.completions.create(chat);
  return { role: r.choices[0].message.role, content: r.choices[0].message.content,
           finish_reason: r.choices[0].finish_reason, usage: r.usage, object: r.object };
});
await run("chat_stream", async () => {
  const stream = await client.chat.completions.create({ ...chat, stream: true, stream_options: { include_usage: true } });
  let content = "", finish_reason = null, usage = null, chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      content += c.delta?.content ?? "";
      finish_reason = c.finish_reason ?? finish_reason;
    }
  }
  return { content, finish_reason, usage, chunks };
});
await run("chat_n", async () => {
  const r = await client.chat.completions.create({ ...chat, n: 3, temperature: 1, seed: 5 });
  return { indices: r.choices.map((c) => c.index), contents: r.choices.map((c) => c.message.content), usage: r.usage };
});
await run("chat_logprobs", async () => {
  const r = await client.chat.completions.create({ ...chat, logprobs: true, top_logprobs: 2 });
  const content = r.choices[0].logprobs.content;
  return { num_tokens: content.length, num_top: content.map((t) => t.top_logprobs.length),
           text: content.map((t) => t.token).join(""), message: r.choices[0].message.content,
           completion_tokens: r.usage.completion_tokens };
});

// --- messages ----------------------------------------------------------------
await run("unknown_role", () => client.chat.completions.create({ model, max_tokens: 2,
                                                                  messages: [{ role: "robot", content: "hi" }] }));
await run("null_assistant_and_developer", async () => {
  const r = await client.chat.completions.create({ model, max_tokens: 2, messages: [
    { role: "developer", content: "Be brief." }, { role: "user", content: "hi" },
    { role: "assistant", content: null }, { role: "user", content: "again" }] });
  return r.choices[0].finish_reason;
});

// --- completions: lists of prompts, scoring --------------------------------
const prompts = ["Once upon a time", "The little dog"];
const completion = { model, max_tokens: 6, temperature: 0 };
await run("completion_singles", async () => {
  const rs = [];
  for (const prompt of prompts) rs.push(await client.completions.create({ ...completion, prompt }));
  return rs.map((r) => ({ text: r.choices[0].text, usage: r.usage }));
});
await run("completion_list", async () => {
  const r = await client.completions.create({ ...completion, prompt: prompts, n: 2 });
  return { choices: r.choices.map((c) => ({ index: c.index, text: c.text, finish_reason: c.finish_reason })),
           usage: r.usage };
});
await run("completion_list_stream", async () => {
  const stream = await client.completions.create({ ...completion, prompt: prompts, n: 2, stream: true,
                                                   stream_options: { include_usage: true } });
  const texts = {}, reasons = {};
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      texts[c.index] = (texts[c.index] ?? "") + c.text;
      if (c.finish_reason) reasons[c.index] = c.finish_reason;
    }
  }
  return { texts, reasons, usage };
});
await run("completion_token_lists", async () => {
  const r = await client.completions.create({ ...completion, prompt: [[1, 300, 301], [1, 400]], echo: true });
  return r.choices.map((c) => ({ index: c.index, text: c.text }));
});
await run("completion_logprobs", async () => {
  const r = await client.completions.create({ ...completion, prompt: "Once upon a time", logprobs: 2 });
  const lp = r.choices[0].logprobs;
  return { num_tokens: lp.tokens.length, tokens_text: lp.tokens.join(""), text: r.choices[0].text,
           num_top: lp.top_logprobs.map((t) => Object.keys(t).length), completion_tokens: r.usage.completion_tokens };
});
// Scoring: a prompt's token logprobs must be the ones the model gave while
// generating. Generate one token greedily after `ids` (return_token_ids
// names it), then score ids + that token with echo and max_tokens 0.
await run("score", async () => {
  const ids = [1, 300, 301, 302, 303];
  const gen = await client.completions.create({ model, prompt: ids, max_tokens: 1, temperature: 0, logprobs: 0,
                                                return_token_ids: true });
  const next = gen.choices[0].token_ids[0];
  const scored = await client.completions.create({ model, prompt: [...ids, next], echo: true, max_tokens: 0, logprobs: 0 });
  const lp = scored.choices[0].logprobs;
  return { generated_logprob: gen.choices[0].logprobs.token_logprobs[0], token_logprobs: lp.token_logprobs,
           text: scored.choices[0].text, finish_reason: scored.choices[0].finish_reason, usage: scored.usage };
});
await run("score_text", async () => {
  const prompt = "Once upon a time there was";
  const r = await client.completions.create({ model, prompt, echo: true, max_tokens: 0, logprobs: 1 });
  const lp = r.choices[0].logprobs;
  return { prompt, text: r.choices[0].text, tokens: lp.tokens, token_logprobs: lp.token_logprobs,
           top_logprobs: lp.top_logprobs, text_offset: lp.text_offset, usage: r.usage };
});

// --- tools -------------------------------------------------------------------
const weather = { type: "function", function: { name: "get_weather", description: "Current weather in a city",
  parameters: { type: "object", properties: { city: { type: "string", enum: ["Paris", "Lima"] } },
                required: ["city"], additionalProperties: false } } };
const clock = { type: "function", function: { name: "get_time", description: "Local time in a zone",
  parameters: { type: "object", properties: { zone: { type: "string", enum: ["UTC", "CET"] } },
                required: ["zone"], additionalProperties: false } } };
const tools = { model, messages: question, tools: [weather, clock], temperature: 0, max_tokens: 400 };
// Under auto the model decides; a guided choice that spells a call in the
// template's format makes it call, so the auto path parses a real call.
const spelled = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>';
const auto = { ...tools, tool_choice: "auto", guided_choice: [spelled] };
const required = { ...tools, tool_choice: "required", parallel_tool_calls: false };
const named = { ...tools, tool_choice: { type: "function", function: { name: "get_time" } }, parallel_tool_calls: false };
for (const [name, params] of [["auto", auto], ["required", required], ["named", named]]) {
  await run(`tools_${name}`, async () => choiceFacts((await client.chat.completions.create(params)).choices[0]));
  // The client's own accumulating stream helper reads the delta.tool_calls chunks.
  await run(`tools_${name}_stream`, async () =>
    choiceFacts((await client.beta.chat.completions.stream(params).finalChatCompletion()).choices[0]));
}
await run("tools_round_trip", async () => {
  const first = await client.chat.completions.create(required);
  const messages = [...question, first.choices[0].message];
  for (const c of first.choices[0].message.tool_calls ?? [])
    messages.push({ role: "tool", tool_call_id: c.id, content: JSON.stringify({ temperature_c: 21 }) });
  return choiceFacts((await client.chat.completions.create({ ...tools, messages, max_tokens: 8 })).choices[0]);
});
await run("tools_no_parameters", async () => choiceFacts((await client.chat.completions.create({
  ...tools, tools: [{ type: "function", function: { name: "ping" } }], parallel_tool_calls: false,
  tool_choice: { type: "function", function: { name: "ping" } } })).choices[0]));
const loose = { type: "object", properties: {
  days: { type: "array", items: { type: "integer", multipleOf: 2, minimum: 0, maximum: 9 }, uniqueItems: true, maxItems: 2 } },
  patternProperties: { "^x": { type: "string" } }, required: ["days"], additionalProperties: false, minProperties: 1 };
const loose_tool = (strict) => ({ type: "function", function: { name: "plan", parameters: loose, strict } });
for (const choice of ["auto", "required"])
  await run(`tools_loose_${choice}`, async () => choiceFacts((await client.chat.completions.create({
    ...tools, tools: [loose_tool(false)], tool_choice: choice, parallel_tool_calls: false, max_tokens: choice === "auto" ? 4 : 400 })).choices[0]));
await run("tools_strict_refused", () => client.chat.completions.create({
  ...tools, tools: [loose_tool(true)], tool_choice: "auto", max_tokens: 4 }));
// A forced call cut by max_tokens at lengths along the way: each one
// streamed and not.
await run("tools_cut", async () => {
  const cuts = [];
  for (let max_tokens = 4; max_tokens <= 80; max_tokens += 4) {
    const params = { ...tools, tool_choice: { type: "function", function: { name: "get_weather" } },
                     parallel_tool_calls: false, max_tokens };
    const whole = choiceFacts((await client.chat.completions.create(params)).choices[0]);
    const streamed = choiceFacts((await client.beta.chat.completions.stream(params).finalChatCompletion()).choices[0]);
    cuts.push({ max_tokens, whole, streamed });
    if (whole.finish_reason !== "length") break;
  }
  return cuts;
});
// OpenAI's older functions API.
const functions = { model, messages: question, temperature: 0, max_tokens: 400,
                    functions: [weather.function, clock.function], function_call: { name: "get_weather" } };
await run("functions", async () => choiceFacts((await client.chat.completions.create(functions)).choices[0]));
await run("functions_stream", async () => {
  const stream = await client.chat.completions.create({ ...functions, stream: true });
  let name = "", args = "", finish_reason = null;
  for await (const chunk of stream)
    for (const c of chunk.choices) {
      name += c.delta?.function_call?.name ?? "";
      args += c.delta?.function_call?.arguments ?? "";
      finish_reason = c.finish_reason ?? finish_reason;
    }
  return { name, arguments: args, finish_reason };
});
await run("functions_history", async () => choiceFacts((await client.chat.completions.create({
  ...functions, function_call: "none", max_tokens: 4,
  messages: [...question, { role: "assistant", content: null, function_call: { name: "get_weather", arguments: '{"city":"Paris"}' } },
             { role: "function", name: "get_weather", content: "21 C" }] })).choices[0]));

// --- structured outputs: parse with zod ---------------------------------------
const Person = z.object({ name: z.string().max(8), age: z.number().int().min(0).max(120), pet: z.enum(["cat", "dog"]) });
await run("parse_zod", async () => {
  // Sampled (temperature 1), seeded: the grammar, not greedy luck, makes it valid.
  const r = await client.beta.chat.completions.parse({ model, messages: [{ role: "user", content: "A person?" }], seed: 7,
                                                       max_tokens: 300, response_format: zodResponseFormat(Person, "person") });
  return { parsed: r.choices[0].message.parsed, content: r.choices[0].message.content, finish_reason: r.choices[0].finish_reason };
});
await run("parse_zod_tool", async () => {
  const r = await client.beta.chat.completions.parse({ model, messages: [{ role: "user", content: "Record a person." }],
    max_tokens: 300, seed: 8, tools: [zodFunction({ name: "record", parameters: Person })], parallel_tool_calls: false,
    tool_choice: { type: "function", function: { name: "record" } } });
  const c = r.choices[0].message.tool_calls[0];
  return { name: c.function.name, parsed_arguments: c.function.parsed_arguments, finish_reason: r.choices[0].finish_reason };
});

// --- error classes ----------------------------------------------------------
await run("error_key", () => new OpenAI({ baseURL: base + "/v1", apiKey: "sk-wrong", maxRetries: 0 }).models.list());
await run("error_value", () => client.chat.completions.create({ ...chat, temperature: 9 }));
await run("error_type", () => client.chat.completions.create({ ...chat, n: "two" }));
await run("error_context", () => client.completions.create({ model, prompt: new Array(3000).fill(300), max_tokens: 1 }));
await run("error_max_tokens", () => client.completions.create({ model, prompt: "Once", max_tokens: 5000 }));
await run("error_unsupported", () => client.completions.create({ model, prompt: "Once", suffix: "end" }));
await run("error_route", () => client.get("/no/such/route"));

// --- CORS: what a browser would see (fetch does not enforce CORS here) ------
const origin = "http://app.example";
await run("cors_preflight", async () => {
  const r = await fetch(base + "/v1/chat/completions", { method: "OPTIONS", headers: {
    Origin: origin, "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os" } });
  return { status: r.status, allow_origin: r.headers.get("access-control-allow-origin"),
           allow_headers: r.headers.get("access-control-allow-headers"),
           allow_methods: r.headers.get("access-control-allow-methods") };
});
for (const [name, from, withKey] of [["cors_stream", origin, true], ["cors_error", origin, false],
                                     ["cors_other_origin", "http://evil.example", true]]) {
  await run(name, async () => {
    const r = await fetch(base + "/v1/chat/completions", { method: "POST", headers: {
      Origin: from, "Content-Type": "application/json", ...(withKey ? { Authorization: "Bearer " + key } : {}) },
      body: JSON.stringify({ ...chat, stream: true, max_tokens: 2 }) });
    await r.text();
    return { status: r.status, allow_origin: r.headers.get("access-control-allow-origin"),
             content_type: r.headers.get("content-type") };
  });
}

// --- LangChain JS -------------------------------------------------------------
const lc = (extra = {}) => new ChatOpenAI({ model, apiKey: key, configuration: { baseURL: base + "/v1" },
                                           temperature: 0, maxTokens: 12, maxRetries: 0, ...extra });
await run("lc_invoke", async () => {
  const m = await lc().invoke("Tell me a story.");
  return { content: m.content, finish_reason: m.response_metadata?.finish_reason ?? null, usage: m.usage_metadata ?? null };
});
await run("lc_stream", async () => {
  let content = "", usage = null;
  for await (const chunk of await lc().stream("Tell me a story.")) {
    content += chunk.content;
    if (chunk.usage_metadata) usage = chunk.usage_metadata;
  }
  return { content, usage };
});
await run("lc_logprobs", async () => {
  const m = await lc({ logprobs: true, topLogprobs: 2 }).invoke("Tell me a story.");
  const content = m.response_metadata?.logprobs?.content ?? [];
  return { num_tokens: content.length, num_top: content.map((t) => t.top_logprobs.length) };
});
await run("lc_tools", async () => {
  const getWeather = langchainTool(async ({ city }) => `21 C in ${city}`, { name: "get_weather",
    description: "Current weather in a city", schema: z.object({ city: z.enum(["Paris", "Lima"]) }) });
  const m = await lc({ maxTokens: 400 }).bindTools([getWeather], { tool_choice: "required", parallel_tool_calls: false })
    .invoke("What is the weather in Paris?");
  return { tool_calls: m.tool_calls.map((c) => ({ name: c.name, args: c.args })) };
});
for (const method of ["jsonSchema", "functionCalling"])
  await run(`lc_structured_${method}`, () => lc({ maxTokens: 400 }).withStructuredOutput(Person, { name: "person", method })
    .invoke("Describe a person."));
await run("lc_completions", async () => {
  const llm = new LangChainOpenAI({ model, apiKey: key, configuration: { baseURL: base + "/v1" }, temperature: 0,
                                    maxTokens: 6, maxRetries: 0 });
  const r = await llm.generate(prompts);  // one request with a list of prompts
  return r.generations.map((g) => g.map((x) => x.text));
});
await run("lc_error", () => new ChatOpenAI({ model, apiKey: "sk-wrong", configuration: { baseURL: base + "/v1" },
                                             maxRetries: 0 }).invoke("hi"));

console.log(JSON.stringify(out));
