// Bundles the browser code with esbuild, so no browser loads anything from a CDN:
//   console: src/console.js (the review console, with @json-editor/json-editor) into the
//     Python package, symfonic_stream/gateway/static/console.js, which the gateway serves
//     (package data: `make wheel` fails when the wheel lacks it);
//   agui-client: src/agui-client.js (the stock @ag-ui/client HttpAgent, unmodified) into
//     web/build/agui-client.js, which the browser tests load into their page;
//   aisdk-chat: src/aisdk-chat.jsx (a React page on the stock useChat and
//     DefaultChatTransport of the AI SDK) into web/build/aisdk-chat.js, for the same tests.
// Run by `make web` (and so by `make venv`): `npm ci && node build.mjs` (both); the
// Dockerfile's web stage builds only the console: `node build.mjs console`.
import { build } from "esbuild";

const common = { bundle: true, format: "iife", target: "es2020", minify: true,
                 legalComments: "eof", logLevel: "warning" };
const bundles = {
  console: { entryPoints: ["src/console.js"],
             outfile: "../symfonic_stream/gateway/static/console.js" },
  "agui-client": { entryPoints: ["src/agui-client.js"], outfile: "build/agui-client.js" },
  "aisdk-chat": { entryPoints: ["src/aisdk-chat.jsx"], outfile: "build/aisdk-chat.js",
                  jsx: "automatic", define: { "process.env.NODE_ENV": '"production"' } },
};
const chosen = process.argv.slice(2);
for (const name of chosen) {
  if (!(name in bundles)) {
    console.error(`build.mjs: no bundle ${name} (${Object.keys(bundles).join(", ")})`);
    process.exit(2);
  }
}
for (const name of chosen.length ? chosen : Object.keys(bundles)) {
  await build({ ...common, ...bundles[name] });
}
