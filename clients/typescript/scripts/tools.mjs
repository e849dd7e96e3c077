// Paths and runners the package scripts share.
import { spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

export const PACKAGE = dirname(dirname(fileURLToPath(import.meta.url)));
export const SNAPSHOT = join(PACKAGE, "openapi.json");
export const GENERATED = join(PACKAGE, "src", "generated", "openapi.ts");
const TSC = join(PACKAGE, "node_modules", "typescript", "bin", "tsc");
const OPENAPI_TS = join(PACKAGE, "node_modules", "openapi-typescript", "bin", "cli.js");
// Fields with a default stay optional (a request may leave them out; a response may omit them).
const OPENAPI_TS_FLAGS = ["--default-non-nullable", "false"];

/** A failure the scripts report in one line (main() prints it and sets the exit code). */
export class Failure extends Error {}

/** Runs `command` in the package folder with inherited output; a Failure naming `what` when it fails. */
export function run(command, args, what) {
  const result = spawnSync(command, args, { cwd: PACKAGE, stdio: "inherit" });
  if (result.status !== 0) throw new Failure(`${what} failed (exit ${result.status ?? result.signal})`);
}

/** Runs `body`, printing a Failure's message (no stack) and exiting 1 through process.exitCode. */
export function main(body) {
  try {
    body();
  } catch (error) {
    if (!(error instanceof Failure)) throw error;
    console.error(`\n${error.message}`);
    process.exitCode = 1;
  }
}

export function tsc(args, what) {
  run(process.execPath, [TSC, ...args], what);
}

/** openapi-typescript on the snapshot, writing the generated types (or, with `--check`, comparing them). */
export function openapiTs(extra, what) {
  run(process.execPath, [OPENAPI_TS, SNAPSHOT, ...OPENAPI_TS_FLAGS, "-o", GENERATED, ...extra], what);
}
