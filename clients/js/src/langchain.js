// LangChain tools over one sandbox: exec, read_file, write_file and
// list_files, made with tool() from @langchain/core/tools and zod schemas.
//
//   import { Sandbox } from "@agentsandbox/client";
//   import { sandboxTools } from "@agentsandbox/client/langchain";
//   const sb = await Sandbox.create();
//   const tools = sandboxTools(sb);            // bind them to a chat model, or
//   await tools[0].invoke({ command: "ls" });  // call them yourself
//
// A tool answers with text for the model. A failure of the sandbox (a
// missing file, a refused path, a policy denial) is text too, starting with
// "error", so that the model can act on it; a command's non-zero exit is
// its result, not an error.

import { tool } from "@langchain/core/tools";
import { z } from "zod";

import { AgentSandboxError } from "./index.js";

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

  return [exec, readFile, writeFile, listFiles];
}
