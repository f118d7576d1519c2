// Bundles the browser code with esbuild, so no browser loads anything from a CDN:
//   src/console.js (the review console, with @json-editor/json-editor) into the Python
//   package, symfonic_stream/gateway/static/console.js, which the gateway serves;
//   src/agui-client.js (the stock @ag-ui/client HttpAgent, unmodified) into
//   build/web/agui-client.js, which the browser tests load into their page.
// Run by `make web` (and so by `make venv`): `npm ci && node build.mjs`.
import { build } from "esbuild";

const common = { bundle: true, format: "iife", target: "es2020", minify: true,
                 legalComments: "eof", logLevel: "warning" };
await build({ ...common, entryPoints: ["src/console.js"],
              outfile: "../symfonic_stream/gateway/static/console.js" });
await build({ ...common, entryPoints: ["src/agui-client.js"],
              outfile: "../build/web/agui-client.js" });
