// The official openai npm client's Responses API against `kvlm serve`:
// responses.create plain, streamed (the raw events, and the client's own
// accumulating responses.stream), with a function tool round trip (a forced
// call, its function_call_output, the answer), with text.format json_schema,
// over two turns joined by previous_response_id, retrieve and delete, and a
// refused built-in tool. Prints one JSON object that
// tests/e2e/openai_responses_test.cpp checks.
// Usage: node openai_responses.mjs BASE_URL
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.argv[2] + "/v1", apiKey: "sk-kvlm-test", maxRetries: 0 });
const model = (await client.models.list()).data[0].id;
const base = { model, temperature: 0, max_output_tokens: 24 };

function summary(r) {
  return { id: r.id, object: r.object, status: r.status, output: r.output, output_text: r.output_text ?? null,
           usage: r.usage, previous_response_id: r.previous_response_id ?? null,
           incomplete_details: r.incomplete_details ?? null };
}

const out = {};
out.plain = summary(await client.responses.create({ ...base, input: "Once upon a time",
                                                    instructions: "You tell short stories." }));
// Streamed: the events as they come, and their text.
const events = [];
let text = "";
let last = null;
const stream = await client.responses.create({ ...base, input: "Once upon a time",
                                               instructions: "You tell short stories.", stream: true });
let sequence = true;
for await (const e of stream) {
  if (e.sequence_number !== events.length) sequence = false;
  events.push(e.type);
  if (e.type === "response.output_text.delta") text += e.delta;
  if (e.type === "response.completed" || e.type === "response.incomplete") last = e.response;
}
out.streamed = { events, text, sequence, response: summary(last) };
// The client's own accumulating helper.
const helper = await client.responses.stream({ ...base, input: "Once upon a time",
                                               instructions: "You tell short stories." }).finalResponse();
out.helper = summary(helper);

const tools = [{ type: "function", name: "get_weather", description: "Current weather in a city", strict: true,
                 parameters: { type: "object", properties: { city: { type: "string", enum: ["Paris", "Lima"] } },
                               required: ["city"], additionalProperties: false } }];
async function roundTrip(streamed) {
  const ask = { ...base, max_output_tokens: 200, tools, parallel_tool_calls: false,
                tool_choice: { type: "function", name: "get_weather" }, input: "What is the weather in Paris?" };
  let first;
  const argDeltas = [];
  if (streamed) {
    const s = await client.responses.create({ ...ask, stream: true });
    for await (const e of s) {
      if (e.type === "response.function_call_arguments.delta") argDeltas.push(e.delta);
      if (e.type === "response.completed" || e.type === "response.incomplete") first = e.response;
    }
  } else {
    first = await client.responses.create(ask);
  }
  const call = first.output.find((o) => o.type === "function_call");
  const input = [{ role: "user", content: "What is the weather in Paris?" }, call,
                 { type: "function_call_output", call_id: call.call_id, output: "21 degrees and sunny" }];
  const second = await client.responses.create({ ...base, tools, input, max_output_tokens: 8 });
  return { call: summary(first), arg_deltas: argDeltas, answer: summary(second) };
}
// A long argument streams in pieces (how many depends on how fast the
// stream is read: a slow reader gets merged events).
const note = [{ type: "function", name: "take_note", strict: true,
                parameters: { type: "object", properties: { text: { type: "string",
                  enum: ["the quick brown fox jumps over the lazy dog and runs far away"] } },
                              required: ["text"], additionalProperties: false } }];
const longDeltas = [];
for await (const e of await client.responses.create({ ...base, max_output_tokens: 200, tools: note,
    tool_choice: "required", parallel_tool_calls: false, input: "Note this.", stream: true }))
  if (e.type === "response.function_call_arguments.delta") longDeltas.push(e.delta);
out.long_arg_deltas = longDeltas;
out.tool = await roundTrip(false);
out.tool_stream = await roundTrip(true);

out.json = summary(await client.responses.create({ ...base, max_output_tokens: 100, input: "How old is Tom?",
  text: { format: { type: "json_schema", name: "person", strict: true,
    schema: { type: "object", properties: { age: { type: "integer", minimum: 0, maximum: 99 } },
              required: ["age"], additionalProperties: false } } } }));

// Two turns: the second continues the first from its stored conversation.
const turn1 = await client.responses.create({ ...base, input: "The cat sat on the mat. Tell me about the cat." });
const turn2 = await client.responses.create({ ...base, previous_response_id: turn1.id, input: "And then?" });
out.turns = [summary(turn1), summary(turn2)];
out.retrieved = summary(await client.responses.retrieve(turn1.id));
await client.responses.del(turn1.id);
out.deleted = true;
try {
  await client.responses.retrieve(turn1.id);
  out.retrieve_deleted = null;
} catch (e) {
  out.retrieve_deleted = e.status;
}
try {
  await client.responses.create({ ...base, input: "hi", tools: [{ type: "web_search_preview" }] });
  out.refused = null;
} catch (e) {
  out.refused = { status: e.status, message: e.error?.message ?? String(e) };
}
console.log(JSON.stringify(out));
