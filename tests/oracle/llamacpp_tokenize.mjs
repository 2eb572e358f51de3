// Tokenizes texts with llama.cpp's own vocabulary code (node-llama-cpp, vocab-only load).
// Usage: node llamacpp_tokenize.mjs MODEL.gguf TEXTS.json > IDS.json
//   TEXTS.json: a JSON array of strings; output: a JSON array of token-id arrays, no BOS,
//   special-token text treated as plain text.
// NODE_LLAMA_CPP (env) points at the package directory (default: $TQ_CACHE/npm/node_modules/node-llama-cpp).
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import url from "node:url";

const cache = process.env.TQ_CACHE || path.join(os.homedir(), ".cache", "turboquant");
const pkg = process.env.NODE_LLAMA_CPP || path.join(cache, "npm", "node_modules", "node-llama-cpp");
const { getLlama } = await import(url.pathToFileURL(path.join(pkg, "dist", "index.js")).href);

const [modelPath, textsPath] = process.argv.slice(2);
const texts = JSON.parse(fs.readFileSync(textsPath, "utf8"));
const llama = await getLlama({ gpu: false, build: "never", logLevel: "error" });
const model = await llama.loadModel({ modelPath, vocabOnly: true });
const out = texts.map((t) => Array.from(model.tokenize(t, false)));
process.stdout.write(JSON.stringify(out));
await model.dispose();
await llama.dispose();
