// Tokenizes strings with @huggingface/tokenizers (Hugging Face's JavaScript
// implementation of tokenizer.json), for tests/e2e/hf_checkpoint_cli_test.cpp:
//   node hf_tokenize.mjs DIR STRINGS.json
// DIR holds tokenizer.json and tokenizer_config.json; STRINGS.json is a JSON
// list of strings. Prints a JSON list of id lists, special tokens not added.
import { readFileSync } from "node:fs";
import { Tokenizer } from "@huggingface/tokenizers";

const [dir, stringsPath] = process.argv.slice(2);
const tokenizerJson = JSON.parse(readFileSync(`${dir}/tokenizer.json`, "utf8"));
const tokenizerConfig = JSON.parse(readFileSync(`${dir}/tokenizer_config.json`, "utf8"));
const tokenizer = new Tokenizer(tokenizerJson, tokenizerConfig);
const strings = JSON.parse(readFileSync(stringsPath, "utf8"));
const ids = strings.map((s) => Array.from(tokenizer.encode(s, { add_special_tokens: false }).ids));
process.stdout.write(JSON.stringify(ids));
