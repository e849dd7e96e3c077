// `npm run check` (also the first step of `npm test`): what is committed is what the sources produce.
//   1. src/generated/openapi.ts is what openapi-typescript makes of the committed openapi.json
//      (tests/clients/test_typescript_client.py checks openapi.json against the Python app);
//   2. dist/ is what tsc makes of src/ (consumers install the committed dist/);
//   3. test/types.check.ts, a consumer's typed use of the package, type-checks against dist/.
import { mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";

import { Failure, PACKAGE, main, openapiTs, tsc } from "./tools.mjs";

main(() => {
  openapiTs(["--check"], "src/generated/openapi.ts is stale against openapi.json: run `npm run generate`; the check");
  const fresh = mkdtempSync(join(tmpdir(), "agent-signal-dist-"));
  try {
    tsc(["-p", "tsconfig.json", "--outDir", fresh], "tsc");
    const stale = differences(join(PACKAGE, "dist"), fresh);
    if (stale.length > 0) {
      throw new Failure(`dist/ is stale (${stale.join(", ")}): run \`npm run build\` and commit dist/`);
    }
  } finally {
    rmSync(fresh, { recursive: true, force: true });
  }
  tsc(["-p", join("test", "tsconfig.json")], "the consumer type check (test/types.check.ts)");
  console.log("check: generated types, dist/ and the consumer type check are up to date");
});

/** Files that differ, or exist on one side only, between two trees. */
function differences(left, right) {
  const a = files(left);
  const b = files(right);
  const names = [...new Set([...a.keys(), ...b.keys()])].sort();
  return names.filter((name) => a.get(name) === undefined || a.get(name) !== b.get(name));
}

function files(root, dir = root, found = new Map()) {
  let entries = [];
  try {
    entries = readdirSync(dir);
  } catch {
    return found;
  }
  for (const entry of entries) {
    const path = join(dir, entry);
    if (statSync(path).isDirectory()) files(root, path, found);
    else found.set(relative(root, path), readFileSync(path, "utf8"));
  }
  return found;
}
