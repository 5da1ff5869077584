// Tests of the LangChain tools against a running server (see
// client.test.mjs for the variables), through the tools' invoke as an
// agent would call them.

import assert from "node:assert/strict";
import { describe, it, before, after } from "node:test";

import { StructuredTool } from "@langchain/core/tools";

import { Sandbox } from "../src/index.js";
import { runWorkflowTool, sandboxTools } from "../src/langchain.js";

const REAL = process.env.AGENTSANDBOX_TEST_REAL === "1";

const conn = process.env.AGENTSANDBOX_TEST_SOCKET
  ? { socket: process.env.AGENTSANDBOX_TEST_SOCKET }
  : process.env.AGENTSANDBOX_TEST_URL
    ? { url: process.env.AGENTSANDBOX_TEST_URL, token: process.env.AGENTSANDBOX_TEST_TOKEN }
    : null;

describe("LangChain tools", { skip: conn ? false : "no server: set AGENTSANDBOX_TEST_SOCKET or AGENTSANDBOX_TEST_URL" }, () => {
  let sb;
  let tools;
  before(async () => {
    sb = await Sandbox.create({ ...conn, labels: { test: `js-langchain-${process.pid}` }, ttl: "10m" });
    tools = Object.fromEntries(sandboxTools(sb, { maxOutputChars: 200 }).map((t) => [t.name, t]));
  });
  after(async () => {
    await sb?.kill().catch(() => {});
  });

  it("are LangChain tools with their names", () => {
    assert.deepEqual(Object.keys(tools).sort(), ["exec", "list_files", "read_file", "restore", "snapshot", "write_file"]);
    for (const t of [...Object.values(tools), runWorkflowTool(conn)]) {
      assert.ok(t instanceof StructuredTool, `${t.name} is not a StructuredTool`);
      assert.ok(t.description.length > 20);
    }
  });

  it("write_file, exec, read_file, list_files", async () => {
    assert.equal(await tools.write_file.invoke({ path: "bin/hello.sh", content: "echo hello > out.txt\necho done\n", executable: true }),
      "wrote bin/hello.sh (31 bytes, mode 0755)");
    assert.equal(await tools.exec.invoke({ command: "bin/hello.sh" }), "exit code 0\nstdout:\ndone\n\nstderr: (empty)");
    assert.equal(await tools.read_file.invoke({ path: "out.txt" }), "hello\n");
    const ls = await tools.list_files.invoke({});
    assert.match(ls, /^dir {2}bin\/$/m);
    assert.match(ls, /^file out\.txt \(6 bytes\)$/m);
    assert.match(await tools.list_files.invoke({ path: "bin" }), /^file bin\/hello\.sh \(31 bytes\)$/m);
  });

  it("exec: a failure is a result; long output is cut; cwd and timeout", async () => {
    const fail = await tools.exec.invoke({ command: "echo nope >&2; exit 2" });
    assert.equal(fail, "exit code 2\nstdout: (empty)\nstderr:\nnope\n");
    const long = await tools.exec.invoke({ command: "seq 1 1000" });
    assert.match(long, /characters cut/);
    assert.ok(long.length < 400, `${long.length} characters`);
    assert.match(long, /\n1000\n/);
    await sb.files.write("d/x", "");
    assert.match(await tools.exec.invoke({ command: "pwd", cwd: "d" }), /\/d\n/);
    assert.match(await tools.exec.invoke({ command: "sleep 20", timeout_seconds: 1 }), /\(timed out\)/);
  });

  it("tell the model about errors as text", async () => {
    assert.match(await tools.read_file.invoke({ path: "missing.txt" }), /^error \(not_found\): /);
    assert.match(await tools.write_file.invoke({ path: "../escape", content: "x" }), /^error \(bad_request\): /);
    await sb.files.write("blob", Buffer.from([0xff, 0xfe, 0x00]));
    assert.match(await tools.read_file.invoke({ path: "blob" }), /not UTF-8 text \(3 bytes\)/);
  });

  it("snapshot and restore roll the workspace back", async () => {
    await sb.files.write("state.txt", "good\n");
    const said = await tools.snapshot.invoke({ label: "good state" });
    const m = said.match(/^snapshot (sha256:[0-9a-f]{64}) of the workspace \((\d+) bytes, "good state"\); give this id to restore/);
    assert.ok(m, said);
    await sb.files.write("state.txt", "broken\n");
    assert.equal(await tools.restore.invoke({ snapshot: m[1] }), `restored the workspace to snapshot ${m[1]}`);
    assert.equal(await sb.files.readText("state.txt"), "good\n");
    assert.match(await tools.snapshot.invoke({}), /^snapshot sha256:[0-9a-f]{64} of the workspace \(\d+ bytes\); /);
    assert.match(await tools.restore.invoke({ snapshot: `sha256:${"0".repeat(64)}` }), /^error \(not_found\): /);
    await assert.rejects(tools.restore.invoke({}), /schema|snapshot|Invalid|Received/i);
  });

  it("run_workflow runs a whole workflow, or says why not", async () => {
    const runTool = runWorkflowTool({ ...conn, maxOutputChars: 200 });
    assert.equal(runTool.name, "run_workflow");
    const wf = "apiVersion: agentsandbox.dev/v1\nkind: Workflow\nname: js-langchain-run\nsteps:\n" +
      "  - name: one\n    isolation: namespace\n    run: echo one > one.txt; echo said one\n    outputs: [one.txt]\n" +
      "  - name: two\n    isolation: namespace\n    needs: [one]\n    run: echo bad >&2; exit 3\n";
    const text = await runTool.invoke({ inline: wf, isolation: "namespace" });
    if (!REAL) {
      assert.match(text, /^error \(not_supported_yet\): /);
      return;
    }
    assert.match(text, /^workflow js-langchain-run failed; record [0-9a-z]{32,64}\n/);
    assert.match(text, /\nstep one: succeeded, exit code 0, \d+ ms\n {2}outputs: one\.txt \(sha256-\S+\)\n {2}stdout:\n {4}said one\n/);
    assert.match(text, /\nstep two: failed, exit code 3, \d+ ms[^\n]*\n {2}stderr:\n {4}bad$/);
    assert.match(await runTool.invoke({ workflow: "ci.yaml" }), /^error \(bad_request\): /);
  });

  it("refuse arguments that do not match the schema", async () => {
    await assert.rejects(tools.exec.invoke({}), /schema|command|Invalid|Received/i);
    await assert.rejects(tools.write_file.invoke({ path: "a" }), /schema|content|Invalid|Received/i);
  });
});
