// llama.cpp (through node-llama-cpp, CPU only) on one GGUF: for each prompt length, a prompt
// of seeded random token ids is prefilled into a cleared sequence, then `gen` tokens are decoded
// greedily. Prints one JSON object like `tq bench --json` (medians per length in `points`).
// Usage: node llama_bench.mjs MODEL.gguf THREADS LENGTHS(comma) GEN REPEAT VOCAB
import path from "node:path";
import { createRequire } from "node:module";

const cache = process.env.TQ_CACHE || path.join(process.env.HOME, ".cache", "turboquant");
const require = createRequire(path.join(cache, "npm", "package.json"));
const { getLlama } = await import(require.resolve("node-llama-cpp"));

const [modelPath, threadsArg, lengthsArg, genArg, repeatArg, vocabArg] = process.argv.slice(2);
const threads = Number(threadsArg), gen = Number(genArg), repeat = Number(repeatArg);
const lengths = lengthsArg.split(",").map(Number);

let seed = 1234567;
const rand = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
const median = (v) => { const s = [...v].sort((a, b) => a - b); const n = s.length;
  return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2; };

const llama = await getLlama({ gpu: false, build: "never", maxThreads: threads, logLevel: "error" });
const model = await llama.loadModel({ modelPath, gpuLayers: 0 });
const maxLen = Math.max(...lengths) + gen + 8;
const context = await model.createContext({ contextSize: maxLen, batchSize: Math.max(...lengths),
                                              threads: { ideal: threads, min: threads } });
const seq = context.getSequence();
const vocab = Number(vocabArg);
const points = [];
for (const len of lengths) {
  const pre = [], dec = [], ttft = [];
  for (let r = 0; r < repeat; r++) {
    const prompt = Array.from({ length: len }, () => Math.floor(rand() * (vocab - 1000)) + 500);
    await seq.clearHistory();
    const t0 = performance.now();
    // The prompt minus its last token without logits, then the last one with the first output.
    await seq.evaluateWithoutGeneratingNewTokens(prompt.slice(0, -1));
    const it = seq.evaluate(prompt.slice(-1), { temperature: 0 });
    let next = await it.next();
    const first = (performance.now() - t0) / 1000;
    const t1 = performance.now();
    let n = 0;
    while (n < gen && !next.done) { next = await it.next(); n++; }
    await it.return();
    const g = (performance.now() - t1) / 1000;
    pre.push(len / first); ttft.push(first); dec.push(n / g);
  }
  points.push({ prompt_len: len, prefill_tok_s: median(pre), decode_tok_s: median(dec),
                ttft_s: median(ttft) });
}
console.log(JSON.stringify({ model: modelPath, threads, gen, repeat, points,
                             engine: "llama.cpp via node-llama-cpp" }));
await context.dispose(); await model.dispose(); await llama.dispose();
