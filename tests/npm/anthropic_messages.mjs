// The official @anthropic-ai/sdk npm client against `kvlm serve`'s
// POST /v1/messages: a plain message, the same streamed (the client's own
// accumulating MessageStream, which checks the event shapes), a tool use
// round trip (a forced call, its tool_result, the answer) streamed and not,
// messages.countTokens of the plain and the tool requests, and a refused
// request. Prints one JSON object that
// tests/e2e/anthropic_messages_test.cpp checks.
// Usage: node anthropic_messages.mjs BASE_URL
import Anthropic from "@anthropic-ai/sdk";

const client = new Anthropic({ baseURL: process.argv[2], apiKey: "sk-kvlm-test", maxRetries: 0 });
const model = "kvlm";
const question = [{ role: "user", content: "Once upon a time" }];
const base = { model, max_tokens: 24, temperature: 0, system: "You tell short stories." };

const tools = [
  { name: "get_weather", description: "Current weather in a city",
    input_schema: { type: "object", properties: { city: { type: "string", enum: ["Paris", "Lima"] } },
                    required: ["city"], additionalProperties: false } },
];

function summary(m) {
  return { id: m.id, type: m.type, role: m.role, stop_reason: m.stop_reason, stop_sequence: m.stop_sequence,
           content: m.content, usage: m.usage };
}

async function roundTrip(stream, tool_choice) {
  const ask = { ...base, max_tokens: 200, tools, tool_choice,
                messages: [{ role: "user", content: "What is the weather in Paris?" }] };
  const first = stream ? await client.messages.stream(ask).finalMessage() : await client.messages.create(ask);
  const messages = [...ask.messages, { role: "assistant", content: first.content }];
  const results = first.content.filter((b) => b.type === "tool_use")
    .map((b) => ({ type: "tool_result", tool_use_id: b.id, content: "21 degrees and sunny" }));
  messages.push({ role: "user", content: [...results, { type: "text", text: "Thanks." }] });
  const follow = { ...base, tools, messages, max_tokens: 8 };
  const second = stream ? await client.messages.stream(follow).finalMessage() : await client.messages.create(follow);
  return { call: summary(first), answer: summary(second) };
}

const out = {};
out.plain = summary(await client.messages.create({ ...base, messages: question }));
let streamedText = "";
const s = client.messages.stream({ ...base, messages: question });
s.on("text", (t) => { streamedText += t; });
out.streamed = summary(await s.finalMessage());
out.streamed_text = streamedText;
out.tool = await roundTrip(false, { type: "tool", name: "get_weather" });
out.tool_stream = await roundTrip(true, { type: "any", disable_parallel_tool_use: true });
// count_tokens takes the request without max_tokens; its count is what the
// message's usage says it read.
const { max_tokens: _, temperature: __, ...countable } = base;
out.counted_plain = await client.messages.countTokens({ ...countable, messages: question });
out.counted_tool = await client.messages.countTokens({ ...countable, tools,
  messages: [{ role: "user", content: "What is the weather in Paris?" }], tool_choice: { type: "tool", name: "get_weather" } });
try {
  await client.messages.create({ model, messages: question });  // no max_tokens
  out.refused = null;
} catch (e) {
  out.refused = { status: e.status, type: e.error?.error?.type ?? null, message: e.error?.error?.message ?? null };
}
console.log(JSON.stringify(out));
