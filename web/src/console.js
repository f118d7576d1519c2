// The review console (GET /review#access_token=...): a tenant's open tickets across the
// queues its token reviews, one ticket's run up to its pause, claim and release, the answer
// form rendered from the ticket's response_schema by JSON Editor, and the verdict. Every
// value shown is set as text; the state the browser tests wait for is on
// document.body.dataset.
//
// The token never rides in a URL the browser sends: the page takes it from the URL's
// fragment (never sent to a server, nor in a Referer), keeps it in sessionStorage (this
// tab's, gone when it closes), clears the fragment from the address bar and history, and
// sends it as `Authorization` on every request. The streams are read with fetch rather than
// EventSource, which cannot set a header (so it would need ?access_token=, which proxies
// and histories keep); eventsource-parser reads the SSE wire format.
import { JSONEditor } from "@json-editor/json-editor";
import { EventSourceParserStream } from "eventsource-parser/stream";

const STORED = "symfonic-console-token";
const fragment = new URLSearchParams(location.hash.slice(1));
if (fragment.get("access_token")) {
  sessionStorage.setItem(STORED, fragment.get("access_token"));
  history.replaceState(null, "", location.pathname + location.search);
}
const token = sessionStorage.getItem(STORED) || "";
const auth = { Authorization: "Bearer " + token };
const dataset = document.body.dataset;
const $ = (id) => document.getElementById(id);
// The largest response_schema rendered as a form; a larger one gets a JSON text box.
const MAX_FORM_SCHEMA = 64 * 1024;
// How long a lost stream waits before it is opened again (what EventSource would do).
const RECONNECT_MS = 2000;

// One SSE stream read with fetch: `on(name, data)` for each message, until `controller`
// aborts it; a stream that ends or fails is opened again, with Last-Event-ID, after
// RECONNECT_MS. `status(state)` is told "live" and "reconnecting".
async function stream(url, on, controller, status) {
  let last = "";
  while (!controller.signal.aborted) {
    try {
      const headers = { ...auth, Accept: "text/event-stream" };
      if (last) headers["Last-Event-ID"] = last;
      const response = await fetch(url, { headers, signal: controller.signal, cache: "no-store" });
      if (!response.ok) throw new Error("HTTP " + response.status);
      if (status) status("live");
      const reader = response.body.pipeThrough(new TextDecoderStream())
        .pipeThrough(new EventSourceParserStream()).getReader();
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        if (value.id) last = value.id;
        if (on(value.event || "message", value.data) === false) { controller.abort(); return; }
      }
    } catch (error) {
      if (controller.signal.aborted) return;
    }
    if (status) status("reconnecting");
    await new Promise((resolve) => setTimeout(resolve, RECONNECT_MS));
  }
}

let tickets = [];
let selected = null; // the ticket id shown
let shown = null; // its latest state (kept once it leaves the open tickets: answered)
let editor = null;
let runStream = null;

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function age(seconds) {
  const s = Math.round(seconds);
  return s < 120 ? s + " s" : s < 7200 ? Math.round(s / 60) + " min" : Math.round(s / 3600) + " h";
}

function ordered(list) {
  const order = $("order").value;
  const key = { newest: (t) => -t.ticket.routed_at, oldest: (t) => t.ticket.routed_at,
                expiring: (t) => t.ticket.expires_at }[order];
  return [...list].sort((a, b) => key(a) - key(b));
}

function renderQueue() {
  const now = Date.now() / 1000;
  const body = $("queue");
  body.replaceChildren();
  for (const t of ordered(tickets)) {
    const row = el("tr");
    row.dataset.ticket = t.ticket.ticket_id;
    if (t.ticket.ticket_id === selected) row.className = "selected";
    row.append(el("td", t.ticket.queue), el("td", t.ticket.name), el("td", t.ticket.run_id),
               el("td", age(now - t.ticket.routed_at) + " ago"),
               el("td", "in " + age(t.ticket.expires_at - now)),
               el("td", t.holder ? "claimed by " + t.holder : "open",
                  t.holder ? "claimed" : ""));
    row.addEventListener("click", () => select(t.ticket.ticket_id));
    body.append(row);
  }
  dataset.tickets = ordered(tickets).map((t) => t.ticket.ticket_id).join(",");
  $("empty").hidden = tickets.length > 0;
}

function current() {
  const found = tickets.find((t) => t.ticket.ticket_id === selected);
  if (found) shown = found;
  return found || (shown && shown.ticket.ticket_id === selected ? shown : null);
}

function renderTicket() {
  const t = current();
  $("ticket").hidden = !t;
  if (!t) return;
  const open = tickets.includes(t);
  $("t-name").textContent = t.ticket.name + " (" + t.ticket.kind + ")" + (open ? "" : ", closed");
  const { response_schema: _, ...details } = t.ticket.payload || {};
  $("t-payload").textContent = JSON.stringify(details, null, 1);
  $("t-queue").textContent = t.ticket.queue +
    (t.escalated ? " (escalated from " + t.escalated.from_queue + ")" : "");
  $("t-claim").textContent = t.holder ? "claimed by " + t.holder : "not claimed";
  $("t-questions").textContent = (t.ticket.questions || []).map(
    (q) => (typeof q === "string" ? q : q.question || JSON.stringify(q))).join("\n");
  const history = $("t-history");
  history.replaceChildren(...t.history.map((h) => el("li",
    new Date(h.at * 1000).toISOString().slice(11, 19) + " " + h.event +
    (h.by ? " by " + h.by : "") + (h.detail ? ": " + h.detail : ""))));
  dataset.claim = t.holder || "";
  dataset.queue = t.ticket.queue;
}

function renderForm(t) {
  if (editor) editor.destroy();
  editor = null;
  const holder = $("form");
  holder.replaceChildren();
  const schema = (t.ticket.payload || {}).response_schema;
  if (schema && typeof schema === "object" && JSON.stringify(schema).length <= MAX_FORM_SCHEMA) {
    editor = new JSONEditor(holder, { schema: { title: "Answer", ...schema }, theme: "html",
      iconlib: null,
      disable_edit_json: true, disable_properties: true, disable_collapse: true,
      show_errors: "interaction", ajax: false, use_default_values: true });
    editor.on("ready", () => { dataset.form = "schema"; });
  } else {
    const text = el("textarea");
    text.id = "raw-answer";
    text.rows = 4;
    text.placeholder = schema ? "the answer, as JSON" : "your answer";
    holder.append(text);
    dataset.form = schema ? "json" : "text";
  }
}

function answerValue() {
  if (editor) return editor.getValue();
  const text = $("raw-answer").value;
  return dataset.form === "json" ? JSON.parse(text) : text;
}

function watchRun(t) {
  if (runStream) runStream.abort();
  runStream = new AbortController();
  const lines = $("run");
  lines.replaceChildren();
  let text = null;
  const add = (line, cls) => { text = null; lines.append(el("div", line, cls)); };
  const shown = {
    text_delta: (e) => {
      if (!text) { text = el("div", "", "text"); lines.append(text); }
      text.textContent += e.event.text;
    },
    tool_call_start: (e) => add("tool " + e.event.tool_name, "tool"),
    tool_result: (e) => {
      const r = e.event.result;
      add("→ " + (typeof r === "string" ? r : JSON.stringify(r)), "tool");
    },
    ask_user: (e) => add("paused: " + (e.event.name || "ask_user"), "pause"),
    interrupt: (e) => add("paused: " + (e.event.name || "interrupt"), "pause"),
    end: (e) => {
      add("run " + e.end.status, "end");
      if (e.end.status === "paused") { dataset.context = "paused"; return false; }
      return undefined;
    },
  };
  const url = "v1/runs/" + encodeURIComponent(t.ticket.run_id) + "/events";
  stream(url, (name, data) => (shown[name] ? shown[name](JSON.parse(data)) : undefined),
         runStream);
}

function select(id) {
  selected = id;
  dataset.selected = id;
  dataset.verdict = "";
  $("verdict").textContent = "";
  renderQueue();
  renderTicket();
  const t = current();
  if (t) { renderForm(t); watchRun(t); }
}

async function post(action, body) {
  const t = current();
  if (!t) return;
  dataset.busy = action;
  const answer = await fetch("v1/reviews/tickets/" + encodeURIComponent(t.ticket.ticket_id) +
    "/" + action, { method: "POST", headers: { ...auth, "Content-Type": "application/json" },
                    body: JSON.stringify(body || {}) });
  const verdict = await answer.json();
  const said = verdict.outcome + (verdict.detail ? ": " + verdict.detail : "");
  $("verdict").textContent = action + ": " + said;
  $("verdict").className = answer.ok ? "ok" : "refused";
  // (what a test checks: the HTTP status, not only the outcome's spelling)
  dataset.verdict = action + ":" + verdict.outcome + ":" + answer.status;
  dataset.busy = "";
}

function listen() {
  stream("v1/reviews/events", (name, data) => {
    if (name !== "tickets") return;
    tickets = JSON.parse(data).tickets;
    renderQueue();
    renderTicket();
  }, new AbortController(), (state) => { dataset.status = state; });
}

$("order").addEventListener("change", renderQueue);
$("claim").addEventListener("click", () => post("claim"));
$("release").addEventListener("click", () => post("release"));
$("answer-form").addEventListener("submit", (e) => {
  e.preventDefault();
  let value;
  try { value = answerValue(); } catch (err) {
    $("verdict").textContent = "not JSON: " + err.message;
    return;
  }
  post("answer", { answer: value });
});
listen();
