// The package as a consumer gets it: packed, installed into a scratch folder, imported as ESM, with its types.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, test } from "node:test";
import { fileURLToPath } from "node:url";

const PACKAGE = dirname(dirname(fileURLToPath(import.meta.url)));
const TSC = join(PACKAGE, "node_modules", "typescript", "bin", "tsc");
const npm = process.platform === "win32" ? "npm.cmd" : "npm";

/** Runs a command; on failure, an error carrying its output. */
function sh(command, args, cwd) {
  try {
    return execFileSync(command, args, { cwd, encoding: "utf8", stdio: "pipe" });
  } catch (error) {
    throw new Error(`${command} ${args.join(" ")} failed:\n${error.stdout}${error.stderr}`);
  }
}

test("npm pack + install into a scratch folder gives working ESM and .d.ts, with no dependencies", () => {
  const scratch = mkdtempSync(join(tmpdir(), "agent-signal-consumer-"));
  after(() => rmSync(scratch, { recursive: true, force: true }));
  const quiet = ["--no-audit", "--no-fund", "--loglevel=error"];
  sh(npm, ["pack", "--pack-destination", scratch, ...quiet], PACKAGE);
  const [tarball] = readdirSync(scratch).filter((name) => name.endsWith(".tgz"));
  assert.ok(tarball, "npm pack made a tarball");
  writeFileSync(join(scratch, "package.json"), JSON.stringify({ name: "consumer", private: true, type: "module" }));
  sh(npm, ["install", "--offline", ...quiet, `./${tarball}`], scratch);
  const installed = readdirSync(join(scratch, "node_modules"));
  assert.deepEqual(installed.filter((name) => !name.startsWith(".")), ["@agent-signal"], "no runtime dependency");

  writeFileSync(
    join(scratch, "use.mjs"),
    `import { AgentSignal, AgentSignalError, enqueueAgentSignalSourceEvent } from "@agent-signal/client";
const client = new AgentSignal({ baseUrl: "http://127.0.0.1:1" });
console.log([typeof client.events.send, typeof client.receipts.stream, typeof AgentSignalError, typeof enqueueAgentSignalSourceEvent].join(" "));`,
  );
  const out = sh(process.execPath, ["use.mjs"], scratch);
  assert.equal(out.trim(), "function function function function");

  // ESM only: CommonJS code loads it with a dynamic import, as the README says
  writeFileSync(
    join(scratch, "use.cjs"),
    `import("@agent-signal/client").then(({ AgentSignal }) => console.log(typeof new AgentSignal({ baseUrl: "http://127.0.0.1:1" }).events.send));`,
  );
  assert.equal(sh(process.execPath, ["use.cjs"], scratch).trim(), "function");

  writeFileSync(
    join(scratch, "use.ts"),
    `import { AgentSignal, type IngestResults } from "@agent-signal/client";
export const sent: Promise<IngestResults> = new AgentSignal({ baseUrl: "http://x" }).events.send({ sourceType: "t", sourceId: "s", payload: {} });
`,
  );
  const compilerOptions = { strict: true, noEmit: true, module: "NodeNext", moduleResolution: "NodeNext", target: "ES2022", lib: ["ES2022", "DOM"], types: [] };
  writeFileSync(join(scratch, "tsconfig.json"), JSON.stringify({ compilerOptions, files: ["use.ts"] }));
  sh(process.execPath, [TSC, "-p", "tsconfig.json"], scratch);
});
