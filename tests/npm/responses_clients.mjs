// The Responses API as application code drives it, against `kvlm serve`:
// a three-turn chat through the Vercel AI SDK's default OpenAI provider
// (`ai` + `@ai-sdk/openai`: Responses with store, each earlier assistant turn
// sent back as an item_reference) and the same conversation sent as plain
// messages; items the token limit cut (a message and a function call, whole,
// streamed and in the final event) through the official openai client; and a
// response's input items listed page by page both ways. Prints one JSON
// object that tests/e2e/responses_clients_test.cpp checks.
// Usage: node responses_clients.mjs BASE_URL
import { createOpenAI } from "@ai-sdk/openai";
import { generateText } from "ai";
import OpenAI from "openai";

const baseURL = process.argv[2] + "/v1";
const client = new OpenAI({ baseURL, apiKey: "sk-kvlm-test", maxRetries: 0 });
const model = (await client.models.list()).data[0].id;
const out = {};

// The AI SDK's requests' input, to see what it sent.
const inputs = [];
const recording = async (url, init) => {
  if (String(url).endsWith("/responses") && init?.body) inputs.push(JSON.parse(init.body).input);
  return fetch(url, init);
};
const provider = createOpenAI({ baseURL, apiKey: "sk-kvlm-test", fetch: recording });
const questions = ["Once upon a time there was a cat.", "What did the cat do?", "And then?"];
const messages = [];
const texts = [];
for (const question of questions) {
  messages.push({ role: "user", content: question });
  const result = await generateText({ model: provider(model), messages, temperature: 0, maxOutputTokens: 12,
                                      maxRetries: 0 });
  texts.push(result.text);
  messages.push(...result.response.messages);
}
out.ai_sdk = { texts, inputs };
// The same conversation as plain messages, not stored.
const plain = [];
questions.forEach((q, i) => {
  plain.push({ role: "user", content: q });
  if (i < 2) plain.push({ role: "assistant", content: texts[i] });
});
const direct = await client.responses.create({ model, input: plain, temperature: 0, max_output_tokens: 12,
                                               store: false });
out.plain_third = direct.output_text;

// Items cut by max_output_tokens: the plain response, the stream's
// output_item.done events and its response.incomplete event.
async function cutItems(ask) {
  const whole = await client.responses.create(ask);
  const done = [];
  let final = null;
  for await (const e of await client.responses.create({ ...ask, stream: true })) {
    if (e.type === "response.output_item.done") done.push({ type: e.item.type, status: e.item.status });
    if (e.type === "response.completed" || e.type === "response.incomplete") final = e;
  }
  const statuses = (r) => r.output.map((o) => ({ type: o.type, status: o.status ?? null }));
  return { status: whole.status, reason: whole.incomplete_details?.reason ?? null, whole: statuses(whole),
           done, final_type: final.type, final: statuses(final.response) };
}
out.cut_message = await cutItems({ model, input: "Once upon a time", temperature: 0, max_output_tokens: 4 });
const note = [{ type: "function", name: "take_note", strict: true,
                parameters: { type: "object", properties: { text: { type: "string",
                  enum: ["the quick brown fox jumps over the lazy dog and runs far away"] } },
                              required: ["text"], additionalProperties: false } }];
out.cut_call = await cutItems({ model, input: "Note this.", temperature: 0, tools: note, tool_choice: "required",
                                parallel_tool_calls: false, max_output_tokens: 40 });

// Input items, listed two at a time each way by the client's own paging.
const turns = ["one", "two", "three", "four", "five"].map((t, i) =>
  ({ role: i % 2 ? "assistant" : "user", content: `Turn ${t}.` }));
const listed = await client.responses.create({ model, input: turns, max_output_tokens: 2 });
async function walk(order) {
  const items = [];
  let pages = 0;
  for await (const page of (await client.responses.inputItems.list(listed.id, { limit: 2, order })).iterPages()) {
    pages += 1;
    items.push(...page.data.map((item) => ({ id: item.id, type: item.type, role: item.role,
                                             text: item.content?.[0]?.text ?? null })));
  }
  return { pages, items };
}
out.input_items = { asc: await walk("asc"), desc: await walk("desc") };
console.log(JSON.stringify(out));
