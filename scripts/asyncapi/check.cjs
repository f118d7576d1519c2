// Parses an AsyncAPI document with the official parser (@asyncapi/parser) and exits 1 when
// it reports an error or a warning (Spectral severities 0 and 1); information and hints are
// printed only. Relative $refs (the JSON Schema files beside the document) are resolved.
// Usage: node check.cjs schemas/asyncapi.yaml   (scripts/asyncapi-check.sh installs the parser)
"use strict";
const path = require("path");
const { Parser, fromFile } = require("@asyncapi/parser");

const SEVERITY = ["error", "warning", "information", "hint"];

async function main(file) {
  const { document, diagnostics } = await fromFile(new Parser(), path.resolve(file)).parse();
  const counts = [0, 0, 0, 0];
  for (const d of diagnostics) {
    counts[d.severity] += 1;
    console.log(`${file}: ${SEVERITY[d.severity]} ${d.code}: ${d.message} at /${d.path.join("/")}`);
  }
  const failed = !document || counts[0] + counts[1] > 0;
  console.log(`${file}: ${counts[0]} errors, ${counts[1]} warnings (@asyncapi/parser)` +
              (document ? "" : "; not parsed"));
  return failed ? 1 : 0;
}

main(process.argv[2]).then((code) => process.exit(code), (error) => {
  console.error(error);
  process.exit(1);
});
