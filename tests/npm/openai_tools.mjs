// A tool-call round trip with the official openai npm client against
// `kvlm serve`: the model is made to call a tool (tool_choice required, or
// named), the call goes back with its result, the model answers. Non-streamed
// with chat.completions.create, streamed with the client's own accumulating
// helper (beta.chat.completions.stream -> finalChatCompletion), which checks
// the delta.tool_calls chunk shapes. Prints one JSON object that
// tests/e2e/openai_tools_test.cpp checks.
// Usage: node openai_tools.mjs BASE_URL
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.argv[2] + "/v1", apiKey: "sk-kvlm-test", maxRetries: 0 });
const model = (await client.models.list()).data[0].id;

const tools = [
  { type: "function", function: { name: "get_weather", description: "Current weather in a city",
    parameters: { type: "object", properties: { city: { type: "string", enum: ["Paris", "Lima"] } },
                  required: ["city"], additionalProperties: false } } },
  { type: "function", function: { name: "get_time", description: "Local time in a time zone",
    parameters: { type: "object", properties: { zone: { type: "string", enum: ["UTC", "CET"] } },
                  required: ["zone"], additionalProperties: false } } },
];
const question = [{ role: "user", content: "What is the weather in Paris?" }];
// The tiny test models spell special tokens byte by byte: room for that.
// DeepSeek-R1's template opens a thinking section, and a forced call's
// grammar waits for its end: a thinking budget of 0 closes it at once
// (stories260K never would). Other templates do not think: it is ignored.
const base = { model, tools, temperature: 0, parallel_tool_calls: false, max_tokens: 400, thinking_budget: 0 };

function summary(choice) {
  const m = choice.message;
  return {
    finish_reason: choice.finish_reason,
    content: m.content ?? null,
    tool_calls: (m.tool_calls ?? []).map((c) => ({ id: c.id, type: c.type, name: c.function.name,
                                                   arguments: c.function.arguments })),
  };
}

// Call, then the tool's result, then the final answer.
async function roundTrip(stream, tool_choice) {
  const ask = { ...base, messages: question, tool_choice };
  const first = stream ? await client.beta.chat.completions.stream(ask).finalChatCompletion()
                       : await client.chat.completions.create(ask);
  const call = summary(first.choices[0]);
  const messages = [...question, first.choices[0].message];
  for (const c of first.choices[0].message.tool_calls ?? [])
    messages.push({ role: "tool", tool_call_id: c.id, content: JSON.stringify({ temperature_c: 21 }) });
  const follow = { ...base, messages, max_tokens: 8 };
  const second = stream ? await client.beta.chat.completions.stream(follow).finalChatCompletion()
                        : await client.chat.completions.create(follow);
  return { call, answer: summary(second.choices[0]) };
}

const out = {};
out.required = await roundTrip(false, "required");
out.required_stream = await roundTrip(true, "required");
out.named = await roundTrip(false, { type: "function", function: { name: "get_time" } });
out.named_stream = await roundTrip(true, { type: "function", function: { name: "get_time" } });
// tool_choice none: tools rendered, nothing parsed.
const none = await client.chat.completions.create({ ...base, messages: question, tool_choice: "none", max_tokens: 8 });
out.none = summary(none.choices[0]);
console.log(JSON.stringify(out));
