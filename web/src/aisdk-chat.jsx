// A chat page as an application builds it on the AI SDK: the stock useChat (@ai-sdk/react)
// and DefaultChatTransport (ai), unmodified, reading a run from the gateway. The browser
// tests (tests/browser/test_ai_sdk.py) start it with window.startChat and drive it:
//   mode "replay": the transport's defaults (a resume replays the message from its start);
//   mode "cursor": the transport's fetch notes the last SSE id read and a resume sends it
//     as Last-Event-ID (resumeStreamIsReplay: false): only the rest comes.
// A stream cut by the network is resumed (resumeStream) after 250 ms, as an app would.
import { useChat } from "@ai-sdk/react";
import { DefaultChatTransport, lastAssistantMessageIsCompleteWithApprovalResponses } from "ai";
import { createParser } from "eventsource-parser";
import { createRoot } from "react-dom/client";

const seen = { lastId: null, ids: [], posts: [], verdicts: [], errors: [], resumes: 0 };
window.seen = seen;

// The transport's fetch: the requests as sent, and the SSE ids of every response read.
function noting(input, init) {
  if (init?.method === "POST") seen.posts.push({ url: String(input), init });
  return globalThis.fetch(input, init).then(response => {
    if (!response.body) return response;
    const [mine, theirs] = response.body.tee();
    const parser = createParser({ onEvent: e => { if (e.id) { seen.lastId = e.id; seen.ids.push(e.id); } } });
    (async () => {
      const decoder = new TextDecoder();
      try { for await (const bytes of mine) parser.feed(decoder.decode(bytes, { stream: true })); }
      catch { /* the connection was cut: the transport's branch says so */ }
    })();
    return new Response(theirs, { status: response.status, statusText: response.statusText,
                                  headers: response.headers });
  });
}

function Chat({ api, runId, token, mode }) {
  const cursor = mode === "cursor";
  let retrying = false;
  const chat = useChat({
    id: runId,
    resume: true,
    transport: new DefaultChatTransport({
      api,
      headers: { Authorization: `Bearer ${token}` },
      fetch: noting,
      ...(cursor ? {
        resumeStreamIsReplay: false,
        prepareReconnectToStreamRequest: ({ headers }) => ({
          headers: seen.lastId == null ? headers : { ...headers, "Last-Event-ID": seen.lastId },
        }),
      } : {}),
    }),
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
    onData: part => seen.verdicts.push(part),
    onError: error => {
      seen.errors.push(String(error.message));
      if (/fetch|network/i.test(error.message) && !retrying) {  // cut: resume it
        retrying = true;
        setTimeout(() => { retrying = false; seen.resumes += 1; chat.resumeStream(); }, 250);
      }
    },
  });
  window.chat = chat;
  document.body.dataset.status = chat.status;
  document.body.dataset.error = chat.error ? chat.error.message : "";
  document.body.dataset.messages = JSON.stringify(chat.messages);
  return (
    <main>
      {chat.messages.map(message => (
        <section key={message.id} data-role={message.role}>
          {message.parts.map((part, i) => <Part key={i} part={part} />)}
        </section>
      ))}
      {chat.error ? <p className="error">{chat.error.message}</p> : null}
    </main>
  );
}

function Part({ part }) {
  if (part.type === "text" || part.type === "reasoning") return <p className={part.type}>{part.text}</p>;
  if (part.type.startsWith("tool-")) {
    return <p className="tool">{part.type.slice(5)} {JSON.stringify(part.input)} {part.state}
      {part.state === "approval-requested" ? (
        <button onClick={() => window.chat.addToolApprovalResponse({ id: part.approval.id, approved: true })}>
          Approve</button>) : null}
      {part.output !== undefined ? ` → ${JSON.stringify(part.output)}` : ""}</p>;
  }
  if (part.type.startsWith("data-")) return <p className="data">{part.type}: {JSON.stringify(part.data)}</p>;
  return null;
}

window.startChat = options => {
  createRoot(document.getElementById("root")).render(<Chat {...options} />);
};
