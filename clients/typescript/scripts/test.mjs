// `npm test`'s runner, after `npm run check`: node's test runner over test/*.test.mjs, four files at a time where
// node has the flag (20.10 and later: on two cores node ran them one by one, and most of their time is waiting
// on timers); one at a time on an older node, which the package itself supports (package.json's engines).
import { spawnSync } from "node:child_process";
import { readdirSync } from "node:fs";

const [major, minor] = process.versions.node.split(".").map(Number);
const concurrent = major > 20 || (major === 20 && minor >= 10);
const files = readdirSync("test")
  .filter((name) => name.endsWith(".test.mjs"))
  .sort()
  .map((name) => `test/${name}`);
const args = ["--test", ...(concurrent ? ["--test-concurrency=4"] : []), "--test-reporter=spec", ...files];
const run = spawnSync(process.execPath, args, { stdio: "inherit" });
process.exit(run.status ?? 1);
