// Time to first token and tokens/s of one streamed answer through the openai client.
// argv[2]: {baseURL, params} -> prints {ttft, seconds, tokens, tokensPerSecond}
import OpenAI from 'openai';

const spec = JSON.parse(process.argv[2]);
const client = new OpenAI({ baseURL: spec.baseURL, apiKey: 'unused', maxRetries: 0 });
// Node's HTTP stack and the connection are set up first (the CLI's clock also starts
// with the process ready), so the figure is the server's.
await client.models.list();
const t0 = performance.now();
let first = null, usage = null;
const stream = await client.chat.completions.create({ ...spec.params, stream: true, stream_options: { include_usage: true } });
for await (const chunk of stream) {
  const d = chunk.choices[0]?.delta;
  if (first === null && d && (d.content || d.reasoning_content)) first = performance.now();
  if (chunk.usage) usage = chunk.usage;
}
const end = performance.now();
const decodeTokens = usage.completion_tokens - 1; // after the first
console.log(JSON.stringify({ ttft: (first - t0) / 1000, seconds: (end - t0) / 1000, tokens: usage.completion_tokens,
                             tokensPerSecond: decodeTokens / ((end - first) / 1000) }));
