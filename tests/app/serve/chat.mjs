// Drives k3 serve with the official openai client. argv[2]: a JSON spec
//   {baseURL, apiKey, concurrent,
//    calls: [{params, kind, abortAfterChunks, abortAfterMs, delayMs, afterFirstChunkOf}]}
// kind: "chat" (default), "completions" (client.completions.create) or "retrieve"
// (client.models.retrieve(params.model)). logprobs: what the client got (streamed: the
// chunks' entries concatenated).
// prints one JSON array with, per call, what the client saw. afterFirstChunkOf: start
// once call N (concurrent) has received its first chunk, i.e. while N is generating.
// abortAfterMs: the client gives up (closes the connection) after that long.
import OpenAI from 'openai';

const spec = JSON.parse(process.argv[2]);
const client = new OpenAI({ baseURL: spec.baseURL, apiKey: spec.apiKey ?? 'unused', maxRetries: 0, timeout: 60000 });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const firstChunk = spec.calls.map(() => { let resolve; const p = new Promise((r) => { resolve = r; }); return { p, resolve }; });

async function one(call, index) {
  if (call.afterFirstChunkOf !== undefined) await firstChunk[call.afterFirstChunkOf].p;
  if (call.delayMs) await sleep(call.delayMs);
  const t0 = performance.now();
  const out = { content: '', reasoning: '', finish_reason: null, usage: null, tool_calls: null,
                chunks: 0, reasoningChunks: 0, contentChunks: 0, reasoningAfterContent: false, mixedChunks: 0 };
  try {
    if (call.kind === 'retrieve') {
      Object.assign(out, await client.models.retrieve(call.params.model));
    } else if (call.kind === 'completions' && !call.params.stream) {
      const r = await client.completions.create(call.params);
      Object.assign(out, { id: r.id, object: r.object, model: r.model, content: r.choices[0].text,
                           finish_reason: r.choices[0].finish_reason, usage: r.usage,
                           logprobs: r.choices[0].logprobs });
    } else if (call.kind === 'completions') {
      const stream = await client.completions.create(call.params);
      for await (const chunk of stream) {
        out.chunks++;
        out.object = chunk.object;
        if (chunk.usage) out.usage = chunk.usage;
        const c = chunk.choices[0];
        if (c) { out.content += c.text; if (c.finish_reason) out.finish_reason = c.finish_reason; }
      }
    } else if (!call.params.stream) {
      const options = call.abortAfterMs ? { signal: AbortSignal.timeout(call.abortAfterMs) } : {};
      const r = await client.chat.completions.create(call.params, options);
      const m = r.choices[0].message;
      Object.assign(out, { id: r.id, object: r.object, model: r.model, content: m.content,
                           reasoning: m.reasoning_content ?? '', finish_reason: r.choices[0].finish_reason,
                           usage: r.usage, tool_calls: m.tool_calls ?? null,
                           logprobs: r.choices[0].logprobs ?? null });
    } else {
      const stream = await client.chat.completions.create(call.params);
      for await (const chunk of stream) {
        out.chunks++;
        if (out.chunks === 1) firstChunk[index].resolve();
        out.object = chunk.object;
        if (chunk.usage) out.usage = chunk.usage;
        const c = chunk.choices[0];
        if (c) {
          const r = c.delta.reasoning_content, t = c.delta.content;
          if (r) { out.reasoning += r; out.reasoningChunks++; if (out.contentChunks) out.reasoningAfterContent = true; }
          if (t) { out.content += t; out.contentChunks++; }
          if (r && t) out.mixedChunks++;
          if (c.logprobs?.content) ((out.logprobs ??= { content: [] }).content.push(...c.logprobs.content));
          for (const call of c.delta.tool_calls ?? []) { // pieces of a call share its index
            const t = ((out.tool_calls ??= [])[call.index] ??= { id: call.id, type: call.type, function: { name: '', arguments: '' } });
            t.function.name += call.function?.name ?? '';
            t.function.arguments += call.function?.arguments ?? '';
          }
          if (c.finish_reason) out.finish_reason = c.finish_reason;
        }
        if (call.abortAfterChunks && out.chunks >= call.abortAfterChunks) break; // closes the connection
      }
    }
  } catch (e) {
    out.error = { status: e.status ?? null, message: e.error?.message ?? e.message,
                  type: e.error?.type ?? null, param: e.error?.param ?? null,
                  retryAfter: e.headers?.['retry-after'] ?? null };
  }
  firstChunk[index].resolve(); // never leave a waiting call hanging
  out.ms = performance.now() - t0;
  return out;
}

const results = spec.concurrent ? await Promise.all(spec.calls.map(one))
                                : await (async () => { const r = []; for (const [i, c] of spec.calls.entries()) r.push(await one(c, i)); return r; })();
console.log(JSON.stringify(results));
