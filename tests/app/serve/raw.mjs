// Bodies the openai client never sends (malformed JSON, oversized). argv[2]:
//   {url, method, headers, body, repeat: {text, times}} -> prints {status, body}
const spec = JSON.parse(process.argv[2]);
const body = spec.repeat ? spec.repeat.text.repeat(spec.repeat.times) : spec.body;
const res = await fetch(spec.url, { method: spec.method ?? 'POST', headers: spec.headers ?? { 'Content-Type': 'application/json' }, body });
const text = await res.text();
let parsed = null;
try { parsed = JSON.parse(text); } catch { parsed = text; }
console.log(JSON.stringify({ status: res.status, body: parsed }));
