// LangChain tools over one sandbox: exec, read_file, write_file,
// list_files, snapshot and restore; and run_workflow, which runs a whole
// workflow on the server. They are made with tool() from
// @langchain/core/tools and zod schemas.
//
//   import { Sandbox } from "@agentsandbox/client";
//   import { runWorkflowTool, sandboxTools } from "@agentsandbox/client/langchain";
//   const sb = await Sandbox.create();
//   const tools = [...sandboxTools(sb), runWorkflowTool()];  // bind them to a chat model, or
//   await tools[0].invoke({ command: "ls" });                // call them yourself
//
// A tool answers with text for the model. A failure of the sandbox (a
// missing file, a refused path, a policy denial) is text too, starting with
// "error", so that the model can act on it; a command's non-zero exit is
// its result, not an error.

import { tool } from "@langchain/core/tools";
import { z } from "zod";

import { AgentSandboxError, runWorkflow } from "./index.js";

/**
 * s cut to at most max characters: its head and tail, with what was cut
 * said in between.
 * @param {string} s
 * @param {number} max
 */
export function truncate(s, max) {
  if (s.length <= max) return s;
  const head = Math.floor(max * 0.4);
  const tail = max - head;
  return `${s.slice(0, head)}\n[... ${s.length - head - tail} characters cut ...]\n${s.slice(s.length - tail)}`;
}

/**
 * An exec result as text for a model.
 * @param {import("./index.js").ExecResult} r
 * @param {number} max characters of each stream
 */
export function formatExecResult(r, max) {
  let head = `exit code ${r.exitCode}`;
  if (r.signal) head += ` (killed by ${r.signal})`;
  if (r.timedOut) head += " (timed out)";
  const parts = [head];
  parts.push(r.stdout ? `stdout:\n${truncate(r.stdout, max)}` : "stdout: (empty)");
  parts.push(r.stderr ? `stderr:\n${truncate(r.stderr, max)}` : "stderr: (empty)");
  return parts.join("\n");
}

function indent(s) {
  return `    ${s.replace(/\n+$/, "").split("\n").join("\n    ")}`;
}

/**
 * A run's result as text for a model: the outcome and record, then each
 * step's status, exit code, outputs and the end of its output.
 * @param {import("./index.js").RunInfo} run
 * @param {number} max characters of each step's stdout and of its stderr
 */
export function formatRunInfo(run, max) {
  const lines = [`workflow ${run.workflow} ${run.status}; record ${run.record || "(none)"}`];
  if (run.error) lines.push(`error: ${run.error}`);
  for (const st of run.steps || []) {
    let head = `step ${st.name}: ${st.status}, exit code ${st.exitCode}`;
    if (st.signal) head += ` (killed by ${st.signal})`;
    head += `, ${st.durationMs} ms`;
    if (st.detail) head += ` (${st.detail})`;
    lines.push(head);
    if (st.outputs?.length) lines.push(`  outputs: ${st.outputs.map((o) => `${o.path} (${o.narHash})`).join(", ")}`);
    if (st.stdout) lines.push(`  stdout:\n${indent(truncate(st.stdout, max))}`);
    if (st.stderr) lines.push(`  stderr:\n${indent(truncate(st.stderr, max))}`);
  }
  return lines.join("\n");
}

function errorText(err) {
  if (err instanceof AgentSandboxError) return `error (${err.code}): ${err.message}`;
  throw err;
}

/**
 * The LangChain tools of a sandbox.
 * @param {import("./index.js").Sandbox} sandbox
 * @param {{maxOutputChars?: number, defaultTimeout?: string|number}} [o]
 *   maxOutputChars bounds each of stdout, stderr and a file read (default 10000);
 *   defaultTimeout is an exec's timeout when the model gives none (default "5m").
 */
export function sandboxTools(sandbox, o = {}) {
  const max = o.maxOutputChars ?? 10000;
  const defaultTimeout = o.defaultTimeout ?? "5m";

  const exec = tool(
    async ({ command, cwd, timeout_seconds }) => {
      try {
        const r = await sandbox.exec(command, {
          cwd: cwd || undefined,
          timeout: timeout_seconds ?? defaultTimeout,
        });
        return formatExecResult(r, max);
      } catch (err) {
        return errorText(err);
      }
    },
    {
      name: "exec",
      description:
        "Run a shell command (/bin/sh -c) in the sandbox's workspace and return its exit code, stdout and stderr " +
        "(long output is cut in the middle). A non-zero exit code is a result to read, not a tool failure.",
      schema: z.object({
        command: z.string().min(1).describe("the shell command, such as \"python3 main.py 2>&1 | tail -50\""),
        cwd: z.string().optional().describe("the directory to run in, relative to the workspace"),
        timeout_seconds: z.number().positive().optional().describe("kill the command after this many seconds"),
      }),
    },
  );

  const readFile = tool(
    async ({ path }) => {
      try {
        const buf = await sandbox.files.read(path);
        const text = buf.toString("utf8");
        if (text.includes("\uFFFD") && !Buffer.from(text, "utf8").equals(buf)) {
          return `${path} is not UTF-8 text (${buf.length} bytes); inspect it with exec, such as "od -c ${path} | head"`;
        }
        return truncate(text, max);
      } catch (err) {
        return errorText(err);
      }
    },
    {
      name: "read_file",
      description: "Read a text file of the sandbox's workspace (long files are cut in the middle).",
      schema: z.object({
        path: z.string().min(1).describe("the file's path relative to the workspace, such as \"src/main.py\""),
      }),
    },
  );

  const writeFile = tool(
    async ({ path, content, executable }) => {
      try {
        const info = await sandbox.files.write(path, content, { mode: executable ? 0o755 : 0o644 });
        return `wrote ${info.path} (${info.size} bytes, mode ${info.mode})`;
      } catch (err) {
        return errorText(err);
      }
    },
    {
      name: "write_file",
      description: "Write (create or replace) a file of the sandbox's workspace; parent directories are created.",
      schema: z.object({
        path: z.string().min(1).describe("the file's path relative to the workspace"),
        content: z.string().describe("the whole new content of the file"),
        executable: z.boolean().optional().describe("make it executable (mode 0755), as a script needs"),
      }),
    },
  );

  const listFiles = tool(
    async ({ path }) => {
      try {
        const files = await sandbox.files.list(path || "");
        if (files.length === 0) return `${path || "the workspace"} is empty`;
        const lines = files.map((f) => (f.type === "dir" ? `dir  ${f.path}/` : `${f.type.padEnd(4)} ${f.path} (${f.size} bytes)`));
        return truncate(lines.join("\n"), max);
      } catch (err) {
        return errorText(err);
      }
    },
    {
      name: "list_files",
      description: "List a directory of the sandbox's workspace (the workspace itself when no path is given).",
      schema: z.object({
        path: z.string().optional().describe("the directory relative to the workspace; omit it for the workspace"),
      }),
    },
  );

  const snapshot = tool(
    async ({ label }) => {
      try {
        const snap = await sandbox.snapshot(label || undefined);
        return `snapshot ${snap.id} of the workspace (${snap.size} bytes${snap.label ? `, "${snap.label}"` : ""}); ` +
          "give this id to restore to roll back to it";
      } catch (err) {
        return errorText(err);
      }
    },
    {
      name: "snapshot",
      description:
        "Save the sandbox's workspace files (not its running processes) as a snapshot, before a risky change, " +
        "and return its id, to roll back to with restore. The same files always give the same id.",
      schema: z.object({
        label: z.string().optional().describe("a note to recognise the snapshot by, such as \"tests pass\""),
      }),
    },
  );

  const restore = tool(
    async ({ snapshot: id }) => {
      try {
        await sandbox.restore(id);
        return `restored the workspace to snapshot ${id}`;
      } catch (err) {
        return errorText(err);
      }
    },
    {
      name: "restore",
      description:
        "Roll the sandbox's whole workspace back to a snapshot taken earlier: files written since are lost. " +
        "No command may be running in the sandbox.",
      schema: z.object({
        snapshot: z.string().min(1).describe("the snapshot's id, sha256:<hex>, as the snapshot tool returned it"),
      }),
    },
  );

  return [exec, readFile, writeFile, listFiles, snapshot, restore];
}

/**
 * The LangChain tool run_workflow: a whole workflow run by the server (not
 * in a sandbox of the agent's), each step in its own sandbox.
 * @param {import("./index.js").ConnectOptions & {maxOutputChars?: number}} [o]
 *   where the server is (as for Sandbox.create); maxOutputChars bounds each
 *   step's stdout and stderr in the answer (default 10000)
 */
export function runWorkflowTool(o = {}) {
  const max = o.maxOutputChars ?? 10000;
  const conn = { socket: o.socket, url: o.url, token: o.token };
  return tool(
    async ({ workflow, inline, isolation }) => {
      try {
        return formatRunInfo(await runWorkflow({ ...conn, workflow, inline, isolation }), max);
      } catch (err) {
        return errorText(err);
      }
    },
    {
      name: "run_workflow",
      description:
        "Run a whole agentsandbox workflow (YAML: apiVersion agentsandbox.dev/v1, kind Workflow, name, steps with run, " +
        "needs, outputs, resources and network) as `agentsandbox apply` would, each step in its own sandbox, and wait " +
        "for it to end. Give either workflow (a file in the server's template directory) or inline (the YAML itself). " +
        "Returns each step's status, exit code, outputs and the end of its output, and the id of the run's execution " +
        "record. A failed step is a result to read, not a tool failure.",
      schema: z.object({
        workflow: z.string().min(1).optional().describe("a workflow file in the server's template directory, such as \"ci.yaml\""),
        inline: z.string().min(1).optional().describe("the workflow's YAML itself, instead of a file"),
        isolation: z.enum(["namespace", "vm", "auto"]).optional().describe("overrides every step's isolation"),
      }),
    },
  );
}
