// Reads a run from the gateway as the AI SDK's UI message stream with the official `ai`
// package, for tests/browser/test_ai_sdk.py:
//   node test/read-run.mjs '{"url": ..., "headers": {...}, "cuts": "every"}'
// prints one JSON object: the response's header, its SSE events (id and data), every chunk
// checked against the package's own `uiMessageChunkSchema` (by its `parseJsonEventStream`,
// the parser DefaultChatTransport uses), the messages `readUIMessageStream` rebuilt, and,
// for each cut seq (every SSE id of the whole response but its last), the message rebuilt from the chunks up to the cut followed by a second
// response asked for with `Last-Event-ID: <cut>` (an exact resume rebuilds the same).
import { createParser } from "eventsource-parser";
import { parseJsonEventStream, readUIMessageStream, uiMessageChunkSchema } from "ai";

const spec = JSON.parse(process.argv[2]);

async function read(headers) {
  const response = await fetch(spec.url, { headers: { ...spec.headers, ...headers } });
  if (!response.ok) throw new Error(`HTTP ${response.status}: ${await response.text()}`);
  const [raw, parsed] = response.body.tee();
  const events = [];
  const parser = createParser({ onEvent: e => events.push({ id: e.id ?? null, data: e.data }) });
  const decoding = (async () => {
    const decoder = new TextDecoder();
    for await (const bytes of raw) parser.feed(decoder.decode(bytes, { stream: true }));
  })();
  const chunks = [];
  const invalid = [];
  for await (const result of parseJsonEventStream({ stream: parsed, schema: uiMessageChunkSchema })) {
    if (result.success) chunks.push(result.value);
    else invalid.push({ raw: result.rawValue, error: String(result.error) });
  }
  await decoding;
  return { header: response.headers.get("x-vercel-ai-ui-message-stream"), events, chunks, invalid };
}

async function rebuild(chunks) {
  const stream = new ReadableStream({
    start(controller) { for (const c of chunks) controller.enqueue(c); controller.close(); },
  });
  const errors = [];
  const byId = new Map();
  for await (const message of readUIMessageStream({ stream, onError: e => errors.push(String(e)) })) {
    byId.set(message.id, message);
  }
  return { messages: [...byId.values()], errors };
}

// The chunks of the events up to the one whose id is `cut` (the [DONE] line is no chunk).
function upTo(events, cut) {
  const end = events.findIndex(e => e.id === String(cut));
  if (end < 0) throw new Error(`no event with id ${cut}`);
  return events.slice(0, end + 1).filter(e => e.data !== "[DONE]").map(e => JSON.parse(e.data));
}

const whole = await read({});
const out = { ...whole, ...(await rebuild(whole.chunks)), resumed: [] };
const ids = whole.events.filter(e => e.id !== null).map(e => Number(e.id));
for (const cut of spec.cuts === "every" ? ids.slice(0, -1) : []) {
  const rest = await read({ "Last-Event-ID": String(cut) });
  const rebuilt = await rebuild([...upTo(whole.events, cut), ...rest.chunks]);
  out.resumed.push({ cut, events: rest.events, invalid: rest.invalid, ...rebuilt });
}
process.stdout.write(JSON.stringify(out));
