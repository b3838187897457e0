// Drives `kvlm serve` (or `kvlm router`) /v1/embeddings with the official
// openai npm client and prints what it got as one JSON object;
// tests/e2e/embeddings_test.cpp checks it. Vectors are printed as the hex of
// their float32 bytes, so the test compares bits.
// Usage: node openai_embeddings.mjs BASE_URL
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.argv[2] + "/v1", apiKey: "sk-kvlm-test", maxRetries: 0 });
const hex = (v) => Buffer.from(new Float32Array(v).buffer).toString("hex");
const out = {};

// The client asks for base64 unless told otherwise, and decodes it.
const one = await client.embeddings.create({ model: "llama", input: "Once upon a time, there was a cat." });
out.alone = { vector: hex(one.data[0].embedding), dim: one.data[0].embedding.length, object: one.object,
              index: one.data[0].index, usage: one.usage, model: one.model };
const floats = await client.embeddings.create({ input: "Once upon a time, there was a cat.",
                                                encoding_format: "float", model: "llama" });
out.float_vector = hex(floats.data[0].embedding);

const texts = [];
for (let i = 0; i < 16; i++) texts.push(i === 5 ? "Once upon a time, there was a cat." : `Story ${i}: the dog ran ${i} times.`);
const batch = await client.embeddings.create({ model: "llama", input: texts });
out.batch = { vectors: batch.data.map((d) => hex(d.embedding)), indices: batch.data.map((d) => d.index),
              usage: batch.usage };

const tokens = await client.embeddings.create({ model: "llama", input: [[1, 403, 407, 261, 378]], encoding_format: "float" });
out.tokens_vector = hex(tokens.data[0].embedding);

for (const [name, body] of [["dimensions", { model: "llama", input: "x", dimensions: 8 }],
                            ["unknown_model", { model: "gpt-4", input: "x" }],
                            ["empty", { model: "llama", input: "" }]]) {
  try {
    await client.embeddings.create(body);
    out[name] = null;
  } catch (e) {
    out[name] = { status: e.status, param: e.param ?? e.error?.param ?? null, code: e.code ?? e.error?.code ?? null };
  }
}
console.log(JSON.stringify(out));
