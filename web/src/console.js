// The review console (GET /review?access_token=...): a tenant's open tickets across its
// queues, one ticket's run up to its pause, claim and release, the answer form rendered
// from the ticket's response_schema by JSON Editor, and the verdict. Every value shown is
// set as text; the state the browser tests wait for is on document.body.dataset.
import { JSONEditor } from "@json-editor/json-editor";

const query = new URLSearchParams(location.search);
const token = query.get("access_token") || "";
const auth = { Authorization: "Bearer " + token };
const dataset = document.body.dataset;
const $ = (id) => document.getElementById(id);
// The largest response_schema rendered as a form; a larger one gets a JSON text box.
const MAX_FORM_SCHEMA = 64 * 1024;

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
  if (runStream) runStream.close();
  const lines = $("run");
  lines.replaceChildren();
  let text = null;
  const url = "v1/runs/" + encodeURIComponent(t.ticket.run_id) + "/events?access_token=" +
    encodeURIComponent(token);
  runStream = new EventSource(url);
  const add = (line, cls) => { text = null; lines.append(el("div", line, cls)); };
  runStream.addEventListener("text_delta", (m) => {
    const e = JSON.parse(m.data).event;
    if (!text) { text = el("div", "", "text"); lines.append(text); }
    text.textContent += e.text;
  });
  runStream.addEventListener("tool_call_start", (m) => add("tool " + JSON.parse(m.data).event.tool_name, "tool"));
  runStream.addEventListener("tool_result", (m) => {
    const r = JSON.parse(m.data).event.result;
    add("→ " + (typeof r === "string" ? r : JSON.stringify(r)), "tool");
  });
  for (const kind of ["ask_user", "interrupt"]) {
    runStream.addEventListener(kind, (m) => add("paused: " + (JSON.parse(m.data).event.name || kind), "pause"));
  }
  runStream.addEventListener("end", (m) => {
    const end = JSON.parse(m.data).end;
    add("run " + end.status, "end");
    if (end.status === "paused") { dataset.context = "paused"; runStream.close(); }
  });
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
  dataset.verdict = action + ":" + verdict.outcome;
  dataset.busy = "";
}

function listen() {
  const events = new EventSource("v1/reviews/events?access_token=" + encodeURIComponent(token));
  events.addEventListener("tickets", (m) => {
    tickets = JSON.parse(m.data).tickets;
    renderQueue();
    renderTicket();
    dataset.status = "live";
  });
  events.onerror = () => { dataset.status = "reconnecting"; };
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
