// Drives `kvlm serve` with the official openai npm client and prints what it
// got as one JSON object; tests/e2e/openai_client_test.cpp checks it.
// Usage: node openai_client.mjs BASE_URL
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.argv[2] + "/v1", apiKey: "sk-kvlm-test", maxRetries: 0 });
const out = {};

const models = await client.models.list();
out.models = models.data.map((m) => m.id);

const completion = await client.completions.create({
  model: out.models[0], prompt: "Once upon a time", max_tokens: 20, temperature: 0,
});
out.completion = { text: completion.choices[0].text, finish_reason: completion.choices[0].finish_reason,
                   usage: completion.usage };

const chat = await client.chat.completions.create({
  model: out.models[0], temperature: 0, max_tokens: 16,
  messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "Tell me a story." }],
});
out.chat = { content: chat.choices[0].message.content, role: chat.choices[0].message.role,
             finish_reason: chat.choices[0].finish_reason, usage: chat.usage };

const stream = await client.chat.completions.create({
  model: out.models[0], temperature: 0, max_tokens: 16, stream: true, stream_options: { include_usage: true },
  messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "Tell me a story." }],
});
let streamed = "", chunks = 0, streamUsage = null, streamReason = null;
for await (const chunk of stream) {
  chunks++;
  if (chunk.usage) streamUsage = chunk.usage;
  for (const c of chunk.choices) {
    streamed += c.delta?.content ?? "";
    if (c.finish_reason) streamReason = c.finish_reason;
  }
}
out.chat_stream = { content: streamed, chunks, usage: streamUsage, finish_reason: streamReason };

const three = await client.completions.create({
  model: out.models[0], prompt: "Once upon a time", max_tokens: 12, temperature: 0.8, seed: 7, n: 3,
});
out.n3 = { indices: three.choices.map((c) => c.index), texts: three.choices.map((c) => c.text),
           usage: three.usage };

try {
  await client.completions.create({ model: out.models[0], prompt: "x", temperature: 7 });
  out.error = null;
} catch (e) {
  out.error = { status: e.status, message: e.message, param: e.param ?? e.error?.param ?? null };
}

console.log(JSON.stringify(out));
