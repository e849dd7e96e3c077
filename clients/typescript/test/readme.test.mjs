// The README's first example, run as written (only its baseUrl changed) against a stub that refuses everything.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, test } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";

import { errorBody, json, startStub } from "./stub.mjs";

const PACKAGE = dirname(dirname(fileURLToPath(import.meta.url)));

/** The README's first ```ts block, its lines after the import. */
function firstExample() {
  const readme = readFileSync(join(PACKAGE, "README.md"), "utf8");
  const block = /```ts\n([\s\S]*?)```/.exec(readme)?.[1] ?? "";
  const lines = block.split("\n");
  assert.match(lines[0] ?? "", /^import \{ AgentSignal \} from "@agent-signal\/client";$/);
  return lines.slice(1).join("\n");
}

test("the README's first example, its stream refused (403), rejects where it awaits `opened` and nowhere else", { timeout: 20_000 }, async () => {
  const stub = await startStub((_, response) => json(response, 403, errorBody("forbidden", "this key may not read receipts")));
  after(stub.close);
  const body = firstExample();
  assert.ok(body.includes('"http://127.0.0.1:8000"'));
  const scratch = mkdtempSync(join(tmpdir(), "agent-signal-readme-"));
  after(() => rmSync(scratch, { recursive: true, force: true }));
  const script = join(scratch, "example.mjs");
  // the caller's try/catch around the example: Node must not end the process over a promise no one handles
  writeFileSync(
    script,
    `import { AgentSignal } from ${JSON.stringify(pathToFileURL(join(PACKAGE, "dist", "index.js")).href)};
try {
${body.replaceAll('"http://127.0.0.1:8000"', JSON.stringify(stub.url))}
} catch (error) {
  console.log("refused:", error.code);
}
`,
  );
  const { code, stdout, stderr } = await new Promise((resolve) => {
    execFile(process.execPath, [script], { encoding: "utf8" }, (error, stdout, stderr) => resolve({ code: error?.code ?? 0, stdout, stderr }));
  });
  assert.equal(code, 0, stderr);
  assert.equal(stdout, "refused: forbidden\n");
});
