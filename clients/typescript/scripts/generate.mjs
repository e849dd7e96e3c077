// `npm run generate`: the server's OpenAPI document → openapi.json → src/generated/openapi.ts → dist/.
//
// The document comes from the Python app itself (scripts/dump_openapi.py: create_web_app(settings).openapi()),
// run with $PYTHON, else the repository's .venv (`make check` creates it), else python3.
import { spawnSync } from "node:child_process";
import { existsSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { Failure, PACKAGE, SNAPSHOT, main, openapiTs, tsc } from "./tools.mjs";

main(() => {
  const venv = join(PACKAGE, "..", "..", ".venv", "bin", "python");
  const python = process.env.PYTHON || (existsSync(venv) ? venv : "python3");
  const dumped = spawnSync(python, [join(PACKAGE, "scripts", "dump_openapi.py")], {
    cwd: PACKAGE,
    encoding: "utf8",
    maxBuffer: 64 * 1024 * 1024,
    stdio: ["ignore", "pipe", "inherit"],
  });
  if (dumped.status !== 0 || !dumped.stdout.startsWith("{")) {
    throw new Failure(`dumping the OpenAPI document with ${python} failed (exit ${dumped.status}); is the repository's .venv installed (make check)?`);
  }
  writeFileSync(SNAPSHOT, dumped.stdout);
  console.log(`openapi.json: ${dumped.stdout.length} characters from ${python}`);
  openapiTs([], "openapi-typescript");
  rmSync(join(PACKAGE, "dist"), { recursive: true, force: true });
  tsc(["-p", "tsconfig.json"], "tsc (dist/)");
  console.log("generated src/generated/openapi.ts and rebuilt dist/; commit openapi.json, src/generated and dist");
});
