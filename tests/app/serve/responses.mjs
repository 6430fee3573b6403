// Drives k3 serve's POST /v1/responses with the official openai client. argv[2]: a JSON
// spec {baseURL, calls: [{params}]}. Prints one JSON array with, per call, what the
// client saw: the response (non-streamed, with the client's output_text), or the streamed
// events' types, the output_text and reasoning deltas joined (and the logprobs the text
// deltas carry), and the final response.
import OpenAI from 'openai';

const spec = JSON.parse(process.argv[2]);
const client = new OpenAI({ baseURL: spec.baseURL, apiKey: 'unused', maxRetries: 0, timeout: 60000 });

async function one(call) {
  const out = { response: null, output_text: null, events: [], sequence: [], text: '', textDeltas: 0,
                reasoning: '', reasoningDeltas: 0, arguments: '', deltaLogprobs: [] };
  try {
    if (!call.params.stream) {
      const r = await client.responses.create(call.params);
      out.response = r;
      out.output_text = r.output_text;
    } else {
      const stream = await client.responses.create(call.params);
      for await (const e of stream) {
        out.events.push(e.type);
        out.sequence.push(e.sequence_number);
        if (e.type === 'response.output_text.delta') {
          out.text += e.delta; out.textDeltas++;
          if (e.logprobs) out.deltaLogprobs.push(...e.logprobs);
        }
        if (e.type === 'response.reasoning_text.delta') { out.reasoning += e.delta; out.reasoningDeltas++; }
        if (e.type === 'response.function_call_arguments.delta') out.arguments += e.delta;
        if (e.type === 'response.completed' || e.type === 'response.incomplete') out.response = e.response;
      }
    }
  } catch (e) {
    out.error = { status: e.status ?? null, message: e.error?.message ?? e.message,
                  type: e.error?.type ?? null, param: e.error?.param ?? null };
  }
  return out;
}

const results = [];
for (const call of spec.calls) results.push(await one(call));
console.log(JSON.stringify(results));
