// Pure tests: where the client looks for the server, and how the LangChain
// tools cut long text. No server needed.

import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { Readable } from "node:stream";
import { it, beforeEach, afterEach } from "node:test";

import { AgentSandboxError, Sandbox, defaultSocket, resolveConnection } from "../src/index.js";
import { formatExecResult, formatRunInfo, truncate } from "../src/langchain.js";

const keys = ["AGENTSANDBOX_SOCKET", "AGENTSANDBOX_URL", "AGENTSANDBOX_TOKEN", "XDG_STATE_HOME"];
let saved;
beforeEach(() => {
  saved = Object.fromEntries(keys.map((k) => [k, process.env[k]]));
  for (const k of keys) delete process.env[k];
});
afterEach(() => {
  for (const k of keys) {
    if (saved[k] === undefined) delete process.env[k];
    else process.env[k] = saved[k];
  }
});

it("finds the default socket by the state directory's rule", () => {
  if (process.geteuid() === 0) {
    assert.equal(defaultSocket(), "/var/lib/agentsandbox/serve.sock");
    return;
  }
  assert.equal(defaultSocket(), path.join(os.homedir(), ".local/state/agentsandbox/serve.sock"));
  process.env.XDG_STATE_HOME = "/x/state";
  assert.equal(defaultSocket(), "/x/state/agentsandbox/serve.sock");
  process.env.XDG_STATE_HOME = "relative/state";
  assert.equal(defaultSocket(), path.join(os.homedir(), ".local/state/agentsandbox/serve.sock"));
});

it("prefers options, then $AGENTSANDBOX_SOCKET, then $AGENTSANDBOX_URL", () => {
  assert.deepEqual(resolveConnection(), { socket: defaultSocket() });
  process.env.AGENTSANDBOX_URL = "http://127.0.0.1:7070";
  process.env.AGENTSANDBOX_TOKEN = "t1";
  assert.deepEqual(resolveConnection(), { url: "http://127.0.0.1:7070", token: "t1" });
  process.env.AGENTSANDBOX_SOCKET = "/run/as.sock";
  assert.deepEqual(resolveConnection(), { socket: "/run/as.sock" });
  assert.deepEqual(resolveConnection({ socket: "/other.sock" }), { socket: "/other.sock" });
  assert.deepEqual(resolveConnection({ url: "http://h:1", token: "t2" }), { url: "http://h:1", token: "t2" });
  assert.deepEqual(resolveConnection({ url: "http://h:1" }), { url: "http://h:1", token: "t1" });
});

it("cuts long text in the middle and says how much", () => {
  assert.equal(truncate("short", 10), "short");
  const s = "a".repeat(50) + "MIDDLE" + "z".repeat(50);
  const t = truncate(s, 20);
  assert.ok(t.startsWith("a".repeat(8)));
  assert.ok(t.endsWith("z".repeat(12)));
  assert.match(t, /\[\.\.\. 86 characters cut \.\.\.\]/);
  assert.doesNotMatch(t, /MIDDLE/);
});

it("formats an exec result for a model", () => {
  const text = formatExecResult({ exitCode: 137, signal: "SIGKILL", timedOut: true, stdout: "", stderr: "boom\n" }, 100);
  assert.equal(text, "exit code 137 (killed by SIGKILL) (timed out)\nstdout: (empty)\nstderr:\nboom\n");
});

it("formats a run for a model", () => {
  const text = formatRunInfo({
    workflow: "ci", status: "failed", record: "r1", error: "step test failed",
    steps: [
      { name: "build", status: "succeeded", exitCode: 0, durationMs: 12, stdout: "built\nok\n", stderr: "",
        outputs: [{ path: "out", narHash: "sha256-AAAA=", narSize: 96 }] },
      { name: "test", status: "failed", exitCode: 137, signal: "SIGKILL", durationMs: 5, detail: "oom", stdout: "", stderr: "x".repeat(50), outputs: [] },
    ],
  }, 20);
  assert.equal(text, [
    "workflow ci failed; record r1",
    "error: step test failed",
    "step build: succeeded, exit code 0, 12 ms",
    "  outputs: out (sha256-AAAA=)",
    "  stdout:",
    "    built",
    "    ok",
    "step test: failed, exit code 137 (killed by SIGKILL), 5 ms (oom)",
    "  stderr:",
    `    ${"x".repeat(8)}`,
    "    [... 30 characters cut ...]",
    `    ${"x".repeat(12)}`,
  ].join("\n"));
  assert.equal(formatRunInfo({ workflow: "w", status: "error", steps: [] }, 10), "workflow w error; record (none)");
});

// A sandbox whose every request answers these NDJSON events.
function answering(events) {
  const t = {
    where: "test",
    request: async () => {
      const res = Readable.from([Buffer.from(events.map((e) => JSON.stringify(e) + "\n").join(""))], { objectMode: false });
      res.statusCode = 200;
      return res;
    },
  };
  return new Sandbox("sb-1", t);
}

const gapEvents = [
  { type: "stdout", execId: "x1", text: "abc" },
  { type: "gap", execId: "x1", stream: "stdout", offset: 3, next: 10 },
  { type: "stdout", execId: "x1", offset: 10, text: "xyz" },
  { type: "stderr", execId: "x1", offset: 4, text: "late" }, // skipped 0-4 without saying
  { type: "stdout", execId: "x1", offset: 12, text: "zw" }, // "z" again, then "w"
  { type: "exit", execId: "x1", exit: { exitCode: 0 } },
];

function isGap(err) {
  assert.ok(err instanceof AgentSandboxError, `want an AgentSandboxError, got ${err}`);
  assert.equal(err.code, "output_gap");
  assert.deepEqual(err.gaps, [{ stream: "stdout", offset: 3, next: 10 }, { stream: "stderr", offset: 0, next: 4 }]);
  assert.match(err.message, /stdout bytes 3 to 10/);
  assert.equal(err.result.stdout, "abcxyzw");
  assert.equal(err.result.stderr, "late");
  assert.equal(err.result.exitCode, 0);
  assert.equal(err.result.stdoutOffset, 14);
  return true;
}

it("rejects output the server did not send instead of running it together", async () => {
  await assert.rejects(answering(gapEvents).exec("true"), isGap);
  await assert.rejects(answering(gapEvents).getExec("x1").output({ follow: true }), isGap);
  const r = await answering(gapEvents.slice(2, 3)).getExec("x1").output({ stdout: 10 });
  assert.equal(r.stdout, "xyz");
  assert.equal(r.stdoutOffset, 13);
});

// A scripted server on a unix socket of its own answers a file read with a
// chunked body and the trailer it is given.
async function trailerServer(trailer) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "as-js-"));
  const sock = path.join(dir, "s.sock");
  const srv = http.createServer((req, res) => {
    if (!req.url.includes("/files/")) { // Sandbox.connect's look-up
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ id: "sb-1", state: "running" }));
      return;
    }
    res.writeHead(200, { "content-type": "application/octet-stream", trailer: "X-Agentsandbox-Sha256" });
    res.write("hello");
    if (trailer !== undefined) res.addTrailers({ "X-Agentsandbox-Sha256": trailer });
    res.end();
  });
  await new Promise((resolve) => srv.listen(sock, resolve));
  return { sb: await Sandbox.connect("sb-1", { socket: sock }), close: () => { srv.close(); fs.rmSync(dir, { recursive: true }); } };
}

it("refuses a file read whose bytes do not match the sha256 trailer", async () => {
  const s = await trailerServer("0".repeat(64));
  try {
    await assert.rejects(s.sb.files.read("f"), (err) => {
      assert.ok(err instanceof AgentSandboxError);
      assert.equal(err.code, "integrity");
      assert.match(err.message, /damaged/);
      return true;
    });
  } finally {
    s.close();
  }
});

it("takes a file read whose bytes match the sha256 trailer, or that has none", async () => {
  for (const trailer of [createHash("sha256").update("hello").digest("hex"), undefined]) {
    const s = await trailerServer(trailer);
    try {
      assert.deepEqual(await s.sb.files.read("f"), Buffer.from("hello"));
    } finally {
      s.close();
    }
  }
});
