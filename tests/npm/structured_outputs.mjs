// Structured outputs through the official openai npm client, unmodified:
// client.beta.chat.completions.parse with a plain JSON Schema response_format
// (no zod), guided_choice as an extra body field, and the client's view of a
// refused schema. Prints one JSON object; tests/e2e/constrained_test.cpp
// checks it. Usage: node structured_outputs.mjs BASE_URL
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.argv[2] + "/v1", apiKey: "sk-kvlm-test", maxRetries: 0 });
const out = {};
const schema = {
  type: "object",
  properties: {
    name: { type: "string", maxLength: 12 },
    age: { type: "integer", minimum: 1, maximum: 120 },
    pets: { type: "array", items: { enum: ["cat", "dog", "bird"] }, maxItems: 3 },
  },
  required: ["name", "age", "pets"],
  additionalProperties: false,
};
out.schema = schema;

const parsed = await client.beta.chat.completions.parse({
  model: "llama", seed: 11, max_tokens: 400,
  messages: [{ role: "user", content: "Describe a person as JSON." }],
  response_format: { type: "json_schema", json_schema: { name: "person", schema, strict: true } },
});
const m = parsed.choices[0].message;
out.parsed = { content: m.content, parsed: m.parsed, finish_reason: parsed.choices[0].finish_reason };

const choice = await client.chat.completions.create({
  model: "llama", seed: 3, max_tokens: 20, messages: [{ role: "user", content: "Yes or no?" }],
  guided_choice: ["yes", "no"],
});
out.choice = choice.choices[0].message.content;

try {
  await client.chat.completions.create({
    model: "llama", max_tokens: 4, messages: [{ role: "user", content: "x" }],
    response_format: { type: "json_schema", json_schema: { name: "bad", strict: true, schema: { type: "string", format: 3, if: {} } } },
  });
  out.error = null;
} catch (e) {
  out.error = { status: e.status, param: e.param ?? e.error?.param ?? null, message: e.message };
}
console.log(JSON.stringify(out));
