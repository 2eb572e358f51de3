// The `openai` npm package against `tq serve`: chat (streamed and not), completions, logprobs,
// n choices and an error.
// Usage: node serve_openai_client.cjs BASE_URL MODEL; prints one JSON object.
const path = require("path");
const { OpenAI } = require(path.join(process.env.TQ_NPM, "node_modules", "openai"));

// Tools mode (argv[4] == "tools"): the request {messages, tools} from stdin, answered streamed
// and not; prints both tool_calls lists.
async function tools(client, model) {
  const req = JSON.parse(require("fs").readFileSync(0, "utf8"));
  const kw = { model, ...req, temperature: 0, max_tokens: 60 };
  const plain = await client.chat.completions.create(kw);
  const calls = [];
  let finish = null;
  for await (const chunk of await client.chat.completions.create({ ...kw, stream: true })) {
    if (!chunk.choices.length) continue;
    for (const tc of chunk.choices[0].delta.tool_calls || []) {
      calls[tc.index] = calls[tc.index] || { name: "", arguments: "" };
      calls[tc.index].name += tc.function.name || "";
      calls[tc.index].arguments += tc.function.arguments || "";
    }
    finish = chunk.choices[0].finish_reason || finish;
  }
  console.log(JSON.stringify({
    plain: plain.choices[0].message.tool_calls.map((c) => c.function),
    plain_finish: plain.choices[0].finish_reason, streamed: calls, streamed_finish: finish,
  }));
}

async function main() {
  const [baseURL, model, mode] = process.argv.slice(2);
  const client = new OpenAI({ baseURL, apiKey: "none", maxRetries: 0 });
  if (mode === "tools") return tools(client, model);
  const messages = [{ role: "user", content: "Name a colour." }];
  const chat = await client.chat.completions.create({ model, messages, max_tokens: 12, temperature: 0 });
  let streamed = "";
  let usage = null;
  const stream = await client.chat.completions.create({
    model, messages, max_tokens: 12, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  for await (const chunk of stream) {
    if (chunk.choices.length) streamed += chunk.choices[0].delta.content || "";
    if (chunk.usage) usage = chunk.usage;
  }
  const completion = await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 8, temperature: 0 });
  const lp = await client.chat.completions.create({
    model, messages, max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 2,
  });
  const logprobs = lp.choices[0].logprobs.content.map((t) => [t.token, t.logprob, t.top_logprobs.length]);
  const many = await client.chat.completions.create({ model, messages, max_tokens: 6, temperature: 0.9, seed: 3, n: 2 });
  let streamedLogprobs = 0;
  const lpStream = await client.chat.completions.create({
    model, messages, max_tokens: 6, temperature: 0, logprobs: true, stream: true,
  });
  for await (const chunk of lpStream) {
    if (chunk.choices.length && chunk.choices[0].logprobs) streamedLogprobs += chunk.choices[0].logprobs.content.length;
  }
  let error = null;
  try {
    await client.chat.completions.create({ model, messages, temperature: 7 });
  } catch (e) {
    error = { status: e.status, code: e.code, param: e.param };
  }
  console.log(JSON.stringify({
    chat: chat.choices[0].message.content, finish: chat.choices[0].finish_reason,
    usage: chat.usage, streamed, stream_usage: usage, completion: completion.choices[0].text, error,
    logprobs, logprobs_text: lp.choices[0].message.content, streamed_logprobs: streamedLogprobs,
    n_choices: many.choices.map((c) => c.index),
  }));
}

main().catch((e) => { console.error(String(e)); process.exit(1); });
