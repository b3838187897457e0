// The official openai npm client over HTTPS (the server's certificate made
// by the test; its CA given through NODE_EXTRA_CA_CERTS), with a key sent as
// the client sends it. Prints one JSON object.
// Usage: NODE_EXTRA_CA_CERTS=cert.pem node https_client.mjs BASE_URL KEY
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.argv[2] + "/v1", apiKey: process.argv[3], maxRetries: 0 });
const out = {};
const completion = await client.completions.create({
  model: "llama", prompt: "Once upon a time", max_tokens: 8, temperature: 0,
});
out.text = completion.choices[0].text;
const stream = await client.completions.create({
  model: "llama", prompt: "Once upon a time", max_tokens: 8, temperature: 0, stream: true,
});
out.streamed = "";
for await (const chunk of stream) out.streamed += chunk.choices[0]?.text ?? "";
try {
  await new OpenAI({ baseURL: process.argv[2] + "/v1", apiKey: "wrong", maxRetries: 0 }).models.list();
  out.wrong_key = "accepted";
} catch (e) {
  out.wrong_key = e.status;
}
console.log(JSON.stringify(out));
