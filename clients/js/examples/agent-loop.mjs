#!/usr/bin/env node
// A scripted agent loop: what an agent does with a sandbox through its
// LangChain tools, without the model. An agent calls a tool, reads the text
// it returns, and decides the next call; here the calls are a fixed list:
// write a script, run it (it fails), read the error and the script, fix it,
// run it again, read the file it wrote, list the workspace. Each call goes
// through the tool's invoke, as a LangChain agent's would. Last it kills the
// sandbox and prints the id of its execution record (check it with
// `agentsandbox records show ID` and `agentsandbox records verify ID`).
//
//   cd clients/js && npm ci && node examples/agent-loop.mjs
//
// The server is found as by the client: $AGENTSANDBOX_SOCKET, else
// $AGENTSANDBOX_URL with $AGENTSANDBOX_TOKEN, else the default socket.

import { AgentSandboxError, Sandbox } from "../src/index.js";
import { sandboxTools } from "../src/langchain.js";

const BROKEN = `#!/bin/sh
# Counts the words of notes.txt into report.txt.
set -e
wc -w < notse.txt > report.txt
echo counted
`;

// fail stops the loop; main kills the sandbox on the way out.
function fail(why) {
  throw new Error(why);
}

/** Calls a tool as an agent would and shows the call and its answer. */
async function call(tools, name, args) {
  const shown = JSON.stringify(args);
  console.log(`tool> ${name}(${shown.length > 100 ? `${shown.slice(0, 96)}...}` : shown})`);
  const out = await tools[name].invoke(args);
  console.log(out.replace(/^/gm, "  | "));
  return out;
}

async function main() {
  const sb = await Sandbox.create({ labels: { example: "agent-loop" }, ttl: "10m", idleTimeout: "5m" });
  console.log(`sandbox ${sb.id}`);
  try {
    const tools = Object.fromEntries(sandboxTools(sb).map((t) => [t.name, t]));

    await call(tools, "write_file", { path: "notes.txt", content: "the quick brown fox jumps over the lazy dog\n" });
    await call(tools, "write_file", { path: "count.sh", content: BROKEN, executable: true });
    let out = await call(tools, "exec", { command: "./count.sh", timeout_seconds: 60 });
    if (out.startsWith("exit code 0")) fail("the broken script succeeded; the sandbox is not what this example expects");

    // The "model" reads the error, reads the script, finds the misspelt
    // file name, and writes the script again with it fixed.
    const misspelt = /notse\.txt/.exec(out);
    if (!misspelt) fail(`the error does not name the missing file:\n${out}`);
    const script = await call(tools, "read_file", { path: "count.sh" });
    await call(tools, "write_file", { path: "count.sh", content: script.replace("notse.txt", "notes.txt"), executable: true });

    out = await call(tools, "exec", { command: "./count.sh", timeout_seconds: 60 });
    if (!out.startsWith("exit code 0")) fail(`the fixed script failed:\n${out}`);
    const words = (await call(tools, "read_file", { path: "report.txt" })).trim();
    if (words !== "9") fail(`report.txt says ${JSON.stringify(words)}, want 9`);
    await call(tools, "list_files", {});
  } catch (err) {
    await sb.kill().catch(() => {});
    throw err;
  }
  console.log("tool> kill()");
  const record = await sb.kill();
  console.log(`record ${record}`);
}

main().catch((err) => {
  const why = err instanceof AgentSandboxError ? `${err.message} (${err.code}, HTTP ${err.status})` : err.message;
  console.error(`agent-loop: ${why}`);
  process.exitCode = 1;
});
