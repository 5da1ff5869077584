// @agentsandbox/client: a client of the REST API of `agentsandbox serve`
// (docs/api.md). Node built-ins only: node:http over the server's unix
// socket, or over TCP with its bearer token.
//
//   import { Sandbox } from "@agentsandbox/client";
//   const sb = await Sandbox.create({ labels: { project: "demo" }, ttl: "1h" });
//   const r = await sb.exec("make test", { onStdout: (s) => process.stdout.write(s) });
//   await sb.files.write("notes.txt", "hello\n");
//   const snap = await sb.snapshot("notes written");   // roll back with sb.restore(snap)
//   const record = await sb.kill();
//   const run = await runWorkflow({ inline: yaml });   // a whole workflow, run by the server
//
// The server is found as the CLI finds it: options.socket, else options.url
// (with options.token), else $AGENTSANDBOX_SOCKET, else $AGENTSANDBOX_URL
// with $AGENTSANDBOX_TOKEN, else serve.sock in the default state directory.

import { createHash } from "node:crypto";
import http from "node:http";
import https from "node:https";
import os from "node:os";
import path from "node:path";

/**
 * The one error of the client.
 *
 * code is the API's stable code ("not_found", "conflict", "policy_denied",
 * ... in docs/api.md), or "unavailable" when the server could not be
 * reached, "exec_error" when a command could not start or its stream
 * broke off, "output_gap" when output was lost: the server no longer had
 * it, or "integrity" when a file read does not hash to the SHA-256 the
 * server sent with it. An "output_gap" error has gaps, a list of {stream,
 * offset, next} (the bytes [offset, next) of "stdout" or "stderr" are
 * missing), and result, the ExecResult of what did come; the bytes around
 * a gap are never run together silently. status is the HTTP status (0 when
 * there was none). decision is the policy decision's id for "policy_denied".
 */
export class AgentSandboxError extends Error {
  /**
   * @param {string} code
   * @param {number} status
   * @param {string} message
   * @param {string} [decision]
   */
  constructor(code, status, message, decision) {
    super(message);
    this.name = "AgentSandboxError";
    this.code = code;
    this.status = status;
    if (decision) this.decision = decision;
  }
}

const codeOfStatus = {
  400: "bad_request", 401: "unauthorized", 403: "policy_denied", 404: "not_found",
  408: "timeout", 409: "conflict", 413: "too_large", 429: "limit_exceeded", 500: "internal",
  501: "not_supported_yet", 503: "server_stopping",
};

/**
 * @typedef {object} ConnectOptions
 * @property {string} [socket] the server's unix socket
 * @property {string} [url] the server's base URL, such as http://127.0.0.1:7070
 * @property {string} [token] the bearer token for url
 */

/**
 * The default state directory's serve.sock, by the rule of
 * record.DefaultStateDir: /var/lib/agentsandbox as root, else
 * $XDG_STATE_HOME/agentsandbox (when absolute), else
 * ~/.local/state/agentsandbox.
 * @returns {string}
 */
export function defaultSocket() {
  if (typeof process.geteuid === "function" && process.geteuid() === 0) {
    return "/var/lib/agentsandbox/serve.sock";
  }
  const xdg = process.env.XDG_STATE_HOME;
  if (xdg && path.isAbsolute(xdg)) return path.join(xdg, "agentsandbox", "serve.sock");
  return path.join(os.homedir(), ".local", "state", "agentsandbox", "serve.sock");
}

/**
 * Where the server is: {socket} or {url, token}.
 * @param {ConnectOptions} [opts]
 * @returns {ConnectOptions}
 */
export function resolveConnection(opts = {}) {
  if (opts.socket) return { socket: opts.socket };
  if (opts.url) return { url: opts.url, token: opts.token ?? process.env.AGENTSANDBOX_TOKEN };
  const env = process.env;
  if (env.AGENTSANDBOX_SOCKET) return { socket: env.AGENTSANDBOX_SOCKET };
  if (env.AGENTSANDBOX_URL) return { url: env.AGENTSANDBOX_URL, token: env.AGENTSANDBOX_TOKEN };
  return { socket: defaultSocket() };
}

class Transport {
  /** @param {ConnectOptions} conn */
  constructor(conn) {
    this.conn = resolveConnection(conn);
    if (this.conn.url) {
      const u = new URL(this.conn.url);
      if (u.protocol !== "http:" && u.protocol !== "https:") {
        throw new AgentSandboxError("bad_request", 0,
          `server URL ${this.conn.url}: want http://HOST:PORT or https://HOST:PORT`);
      }
      this.base = u;
      this.prefix = u.pathname.replace(/\/+$/, "");
      this.where = `${u.origin}`;
    } else {
      this.where = `unix socket ${this.conn.socket}`;
    }
  }

  /**
   * Sends one request and resolves with the response once its status is a
   * success; an error status is thrown as AgentSandboxError.
   * @param {string} method
   * @param {string} p the path, such as /v1/sandboxes
   * @param {{json?: any, body?: Buffer|string, headers?: Record<string,string>, signal?: AbortSignal}} [o]
   * @returns {Promise<http.IncomingMessage>}
   */
  request(method, p, o = {}) {
    const headers = { ...(o.headers || {}) };
    let body = o.body;
    if (o.json !== undefined) {
      body = JSON.stringify(o.json);
      headers["content-type"] = "application/json";
    }
    if (body !== undefined) headers["content-length"] = String(Buffer.byteLength(body));
    let mod = http;
    /** @type {http.RequestOptions} */
    let ro;
    if (this.base) {
      if (this.conn.token) headers.authorization = `Bearer ${this.conn.token}`;
      mod = this.base.protocol === "https:" ? https : http;
      ro = { method, hostname: this.base.hostname, port: this.base.port, path: this.prefix + p, headers };
    } else {
      headers.host = "sandbox";
      ro = { method, socketPath: this.conn.socket, path: p, headers };
    }
    if (o.signal) ro.signal = o.signal;
    return new Promise((resolve, reject) => {
      const req = mod.request(ro, (res) => {
        if (res.statusCode >= 200 && res.statusCode < 300) return resolve(res);
        readAll(res).then((buf) => reject(this.errorOf(method, p, res.statusCode, buf)), reject);
      });
      req.on("error", (err) => reject(this.unreachable(err)));
      req.end(body);
    });
  }

  /** @returns {Promise<any>} the response's JSON (null when it has no body) */
  async json(method, p, o) {
    const res = await this.request(method, p, o);
    const buf = await readAll(res);
    if (buf.length === 0) return null;
    try {
      return JSON.parse(buf.toString("utf8"));
    } catch {
      throw new AgentSandboxError("internal", res.statusCode,
        `${method} ${p}: the server's answer is not JSON: ${preview(buf)}; is ${this.where} agentsandbox serve?`);
    }
  }

  errorOf(method, p, status, buf) {
    try {
      const e = JSON.parse(buf.toString("utf8")).error;
      if (e && e.code && e.message) return new AgentSandboxError(e.code, status, e.message, e.decision);
    } catch { /* not the API's error: described below */ }
    const code = codeOfStatus[status] || (status >= 500 ? "internal" : "bad_request");
    return new AgentSandboxError(code, status,
      `${method} ${p}: HTTP ${status} from ${this.where}: ${preview(buf)}; is it agentsandbox serve?`);
  }

  unreachable(err) {
    if (err instanceof AgentSandboxError || err.name === "AbortError") return err;
    const how = this.base
      ? "set AGENTSANDBOX_URL (and AGENTSANDBOX_TOKEN) to where it listens"
      : "set AGENTSANDBOX_SOCKET to its socket";
    return new AgentSandboxError("unavailable", 0,
      `cannot reach agentsandbox serve on ${this.where}: ${err.message}; start it with \`agentsandbox serve\` or ${how}`);
  }
}

function preview(buf) {
  const s = buf.toString("utf8").trim();
  return s.length > 200 ? `${s.slice(0, 200)}...` : s || "(empty body)";
}

/** @returns {Promise<Buffer>} */
function readAll(stream) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    stream.on("data", (c) => chunks.push(c));
    stream.on("end", () => resolve(Buffer.concat(chunks)));
    stream.on("error", reject);
    stream.on("aborted", () => reject(new AgentSandboxError("exec_error", 0,
      "the server closed the connection mid-answer; check that agentsandbox serve is still running")));
  });
}

/**
 * Throws AgentSandboxError "integrity" unless buf hashes to res's
 * X-Agentsandbox-Sha256 trailer (read once res has ended). An answer
 * without the trailer (an older server) is not checked.
 * @param {string} what
 * @param {Buffer} buf
 * @param {http.IncomingMessage} res
 */
export function checkSha256(what, buf, res) {
  const want = res.trailers?.["x-agentsandbox-sha256"];
  if (!want) return;
  const got = createHash("sha256").update(buf).digest("hex");
  if (got !== want.toLowerCase()) {
    throw new AgentSandboxError("integrity", res.statusCode,
      `${what}: the ${buf.length} bytes received hash to sha256 ${got}, but the server says ${want} ` +
      "(X-Agentsandbox-Sha256): the answer was damaged on the way; read it again");
  }
}

/**
 * Calls onEvent for each NDJSON line of res as it arrives.
 * @param {http.IncomingMessage} res
 * @param {(ev: any) => void} onEvent
 */
async function readEvents(res, onEvent) {
  let pending = "";
  res.setEncoding("utf8");
  try {
    for await (const chunk of res) {
      pending += chunk;
      let nl;
      while ((nl = pending.indexOf("\n")) >= 0) {
        const line = pending.slice(0, nl).trim();
        pending = pending.slice(nl + 1);
        if (line) onEvent(parseEvent(line));
      }
    }
  } catch (err) {
    if (err instanceof AgentSandboxError) throw err;
    throw new AgentSandboxError("exec_error", res.statusCode,
      `the exec's stream broke off: ${err.message}; reattach to a background exec with its output({stdout, stderr, follow: true})`);
  }
  if (pending.trim()) onEvent(parseEvent(pending.trim()));
}

function parseEvent(line) {
  try {
    return JSON.parse(line);
  } catch {
    throw new AgentSandboxError("exec_error", 200, `the exec's stream has a line that is not JSON: ${line.slice(0, 200)}`);
  }
}

/** A duration for the API: a Go duration string, or a number of seconds. */
function duration(v, name) {
  if (v === undefined || v === null) return undefined;
  if (typeof v === "number") {
    if (!(v >= 0)) throw new AgentSandboxError("bad_request", 0, `${name} ${v}: want seconds >= 0 or a string such as "10m"`);
    return `${v}s`;
  }
  if (typeof v === "string") return v;
  throw new AgentSandboxError("bad_request", 0, `${name}: want a number of seconds or a string such as "10m", not ${typeof v}`);
}

function q(s) {
  return encodeURIComponent(s);
}

function filePath(p) {
  if (typeof p !== "string" || p === "") {
    throw new AgentSandboxError("bad_request", 0, "file path: want a non-empty path relative to the workspace, such as \"src/main.py\"");
  }
  return p.split("/").map(q).join("/");
}

/**
 * @typedef {object} ExecResult
 * @property {string} execId
 * @property {number|null} exitCode null when the exec has not ended (output without follow)
 * @property {string} stdout
 * @property {string} stderr
 * @property {string} [signal] the signal that ended it, such as "SIGKILL"
 * @property {boolean} timedOut
 * @property {number} [durationMs]
 * @property {number} stdoutOffset where the next stdout byte would start (for reattaching)
 * @property {number} stderrOffset
 */

/** Collects an exec's events into an ExecResult, calling the callbacks as output arrives. */
class Collector {
  constructor(o = {}, stdoutFrom = 0, stderrFrom = 0) {
    this.cb = { stdout: o.onStdout, stderr: o.onStderr };
    this.chunks = { stdout: [], stderr: [] };
    this.pos = { stdout: stdoutFrom, stderr: stderrFrom };
    /** @type {{stream: string, offset: number, next: number}[]} output the server did not send */
    this.gaps = [];
    this.execId = "";
    this.exit = null;
  }

  event(ev) {
    if (ev.execId) this.execId = ev.execId;
    switch (ev.type) {
      case "stdout":
      case "stderr": {
        let b = ev.base64 !== undefined ? Buffer.from(ev.base64, "base64") : Buffer.from(ev.text || "", "utf8");
        const off = ev.offset || 0;
        // Bytes skipped without a gap event are a gap all the same.
        if (off > this.pos[ev.type]) this.gaps.push({ stream: ev.type, offset: this.pos[ev.type], next: off });
        if (off < this.pos[ev.type]) b = b.subarray(Math.min(b.length, this.pos[ev.type] - off));
        if (b.length === 0) return;
        this.pos[ev.type] = Math.max(this.pos[ev.type], off) + b.length;
        this.chunks[ev.type].push(b);
        const cb = this.cb[ev.type];
        if (cb) cb(b.toString("utf8"));
        return;
      }
      case "gap": {
        const s = ev.stream;
        if ((s === "stdout" || s === "stderr") && ev.next > this.pos[s]) {
          this.gaps.push({ stream: s, offset: Math.max(ev.offset || 0, this.pos[s]), next: ev.next });
          this.pos[s] = ev.next;
        }
        return;
      }
      case "exit":
        this.exit = ev.exit || {};
        return;
      case "error":
        throw new AgentSandboxError("exec_error", 200, ev.error || "the command could not start");
      default:
        return; // started, and types a newer server may add
    }
  }

  /** Throws output_gap when output was lost; else returns the result. */
  checked() {
    const r = this.result();
    if (this.gaps.length === 0) return r;
    const what = this.gaps.map((g) => `${g.stream} bytes ${g.offset} to ${g.next}`).join(", ");
    const err = new AgentSandboxError("output_gap", 200, `output was lost, the server no longer had it: ${what}`);
    err.gaps = this.gaps;
    err.result = r;
    throw err;
  }

  /** @returns {ExecResult} */
  result() {
    const e = this.exit;
    return {
      execId: this.execId,
      exitCode: e ? e.exitCode ?? 0 : null,
      stdout: Buffer.concat(this.chunks.stdout).toString("utf8"),
      stderr: Buffer.concat(this.chunks.stderr).toString("utf8"),
      signal: e?.signal,
      timedOut: Boolean(e?.timedOut),
      durationMs: e?.durationMs,
      stdoutOffset: this.pos.stdout,
      stderrOffset: this.pos.stderr,
    };
  }
}

/** A background exec: its state, output, wait and signals. */
export class Exec {
  /** @param {Sandbox} sandbox @param {string} id */
  constructor(sandbox, id) {
    this.sandbox = sandbox;
    this.id = id;
  }

  _path(tail = "") {
    return `/v1/sandboxes/${q(this.sandbox.id)}/execs/${q(this.id)}${tail}`;
  }

  /** The ExecInfo: running, exit, stdoutBytes, stderrBytes. */
  info() {
    return this.sandbox._t.json("GET", this._path());
  }

  /**
   * Its kept output from the given byte offsets; with follow, until the exit.
   * Output the server no longer has rejects with output_gap (its result is
   * what came, with the offsets to read on from).
   * @param {{stdout?: number, stderr?: number, follow?: boolean, onStdout?: (s: string) => void, onStderr?: (s: string) => void, signal?: AbortSignal}} [o]
   * @returns {Promise<ExecResult>} exitCode is null when it has not ended
   */
  async output(o = {}) {
    const from = { stdout: o.stdout || 0, stderr: o.stderr || 0 };
    const res = await this.sandbox._t.request("GET",
      this._path(`/output?stdout=${from.stdout}&stderr=${from.stderr}${o.follow ? "&follow=1" : ""}`),
      { headers: { accept: "application/x-ndjson" }, signal: o.signal });
    const c = new Collector(o, from.stdout, from.stderr);
    c.execId = this.id;
    await readEvents(res, (ev) => c.event(ev));
    return c.checked();
  }

  /**
   * Waits for its end.
   * @returns {Promise<{exitCode: number, signal?: string, timedOut: boolean, durationMs?: number}>}
   */
  async wait() {
    const ev = await this.sandbox._t.json("POST", this._path("/wait"));
    if (ev && ev.type === "error") throw new AgentSandboxError("exec_error", 200, ev.error || "the command failed");
    const e = (ev && ev.exit) || {};
    return { exitCode: e.exitCode ?? 0, signal: e.signal, timedOut: Boolean(e.timedOut), durationMs: e.durationMs };
  }

  /** Signals its process group: "SIGTERM" (default), "SIGINT", "SIGKILL", ... */
  async signal(sig = "SIGTERM") {
    await this.sandbox._t.json("POST", this._path("/signal"), { json: { signal: sig } });
  }

  kill() {
    return this.signal("SIGKILL");
  }
}

/** The files of a sandbox's workspace; paths are relative to it, slash-separated. */
export class Files {
  /** @param {Sandbox} sandbox */
  constructor(sandbox) {
    this.sandbox = sandbox;
  }

  _path(kind, p) {
    return `/v1/sandboxes/${q(this.sandbox.id)}/${kind}${p ? `/${filePath(p)}` : ""}`;
  }

  /**
   * The file's bytes, checked against the SHA-256 the server sends after
   * them (the trailer X-Agentsandbox-Sha256): bytes that do not match are
   * an AgentSandboxError with code "integrity".
   * @returns {Promise<Buffer>}
   */
  async read(p) {
    const res = await this.sandbox._t.request("GET", this._path("files", p));
    const buf = await readAll(res);
    checkSha256(`read ${p}`, buf, res);
    return buf;
  }

  /** @returns {Promise<string>} the file as UTF-8 text */
  async readText(p) {
    return (await this.read(p)).toString("utf8");
  }

  /**
   * Writes a file, creating its parent directories.
   * @param {string} p
   * @param {string|Uint8Array|ArrayBuffer} data
   * @param {{mode?: number|string}} [o] permission bits, such as 0o755 or "0755" (default 0644)
   * @returns {Promise<object>} its FileInfo, with sha256
   */
  write(p, data, o = {}) {
    let tail = "";
    if (o.mode !== undefined) {
      const m = typeof o.mode === "number" ? o.mode.toString(8).padStart(4, "0") : o.mode;
      tail = `?mode=${q(m)}`;
    }
    let body;
    if (typeof data === "string") body = data;
    else if (data instanceof ArrayBuffer) body = Buffer.from(data);
    else if (ArrayBuffer.isView(data)) body = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
    else throw new AgentSandboxError("bad_request", 0, `write ${p}: want the content as a string, Buffer or Uint8Array`);
    return this.sandbox._t.json("PUT", this._path("files", p) + tail,
      { body, headers: { "content-type": "application/octet-stream" } });
  }

  /** @returns {Promise<object[]>} the FileInfos of a directory ("" or omitted: the workspace) */
  async list(dir = "") {
    return (await this.sandbox._t.json("GET", this._path("ls", dir))).files || [];
  }

  /** @returns {Promise<object>} a FileInfo (a symlink is not followed) */
  stat(p) {
    return this.sandbox._t.json("GET", this._path("stat", p));
  }

  /** @returns {Promise<boolean>} */
  async exists(p) {
    try {
      await this.stat(p);
      return true;
    } catch (err) {
      if (err instanceof AgentSandboxError && err.code === "not_found") return false;
      throw err;
    }
  }

  /** Removes a file, or a directory (one that is not empty needs recursive). */
  async remove(p, o = {}) {
    await this.sandbox._t.json("DELETE", this._path("files", p) + (o.recursive ? "?recursive=1" : ""));
  }
}

/**
 * @typedef {object} CreateOptions
 * @property {string} [template] a workflow step, "path/to/workflow.yaml#step"
 * @property {string} [isolation] namespace (default), vm or auto
 * @property {string[]} [packages]
 * @property {Record<string, any>} [resources] such as {memory: "1GiB", vcpu: 2}
 * @property {string[]|{allow: string[]}} [network] the hosts it may reach
 * @property {Record<string,string>} [env]
 * @property {string|number} [ttl] a duration ("2h") or seconds
 * @property {string|number} [idleTimeout]
 * @property {Record<string,string>} [labels]
 * @property {string|{id: string}} [fromSnapshot] a snapshot (or its id) to fork: the workspace starts as its
 */

/**
 * @typedef {object} SnapshotInfo
 * @property {string} id the NAR hash of the workspace, "sha256:<hex>": the same files, the same id
 * @property {string} sandbox the sandbox it was taken of
 * @property {string} [label]
 * @property {string} created
 * @property {number} size bytes of the NAR
 */

/**
 * @typedef {object} NetworkInfo
 * @property {string[]} allow the sandbox's network.allow now
 * @property {string[]} deny the policy's egress_deny, which no allow entry opens
 */

function snapshotId(s, name) {
  const id = typeof s === "string" ? s : s && typeof s === "object" ? s.id : undefined;
  if (typeof id !== "string" || id === "") {
    throw new AgentSandboxError("bad_request", 0, `${name}: want a snapshot or its id ("sha256:..."), not ${JSON.stringify(s)}`);
  }
  return id;
}

function entries(list, name) {
  if (!Array.isArray(list) || list.some((e) => typeof e !== "string" || e === "")) {
    throw new AgentSandboxError("bad_request", 0,
      `${name}: want entries such as "pypi.org:443", "*.example.com:443" or "198.51.100.0/24:5432", not ${JSON.stringify(list)}`);
  }
  return list;
}

/**
 * A sandbox's egress: the hosts, *.domains and CIDR:ports it may reach.
 * Only a sandbox created with network entries can be granted more (one
 * created without answers conflict); a server that cannot change them (the
 * test fake) answers not_supported_yet.
 */
export class Network {
  /** @param {Sandbox} sandbox */
  constructor(sandbox) {
    this.sandbox = sandbox;
  }

  /** @returns {Promise<NetworkInfo>} the rules in force */
  get() {
    return this.sandbox._t.json("GET", this.sandbox._path("/network"));
  }

  /**
   * Revokes, then grants, in one change.
   * @param {{grant?: string[], revoke?: string[]}} u
   * @returns {Promise<NetworkInfo>} the rules after it
   */
  async update(u = {}) {
    const body = {};
    if (u.grant?.length) body.grant = entries(u.grant, "grant");
    if (u.revoke?.length) body.revoke = entries(u.revoke, "revoke");
    if (!body.grant && !body.revoke) {
      throw new AgentSandboxError("bad_request", 0, "network update: give entries to grant, to revoke or both");
    }
    return this.sandbox._t.json("POST", this.sandbox._path("/network"), { json: body });
  }

  /**
   * Allows entries, such as "pypi.org:443".
   * @param {...string} e
   * @returns {Promise<NetworkInfo>}
   */
  grant(...e) {
    return this.update({ grant: e });
  }

  /**
   * Takes entries away.
   * @param {...string} e
   * @returns {Promise<NetworkInfo>}
   */
  revoke(...e) {
    return this.update({ revoke: e });
  }
}

/** A sandbox of `agentsandbox serve`. */
export class Sandbox {
  /** @param {string} id @param {Transport} t @param {object} [info] */
  constructor(id, t, info) {
    this.id = id;
    this._t = t;
    /** The Info last seen. */
    this.lastInfo = info;
    this.files = new Files(this);
    this.network = new Network(this);
  }

  /**
   * Creates a sandbox.
   * @param {CreateOptions & ConnectOptions} [opts]
   * @returns {Promise<Sandbox>}
   */
  static async create(opts = {}) {
    const t = new Transport(opts);
    const spec = {};
    for (const k of ["template", "isolation", "packages", "resources", "env", "labels"]) {
      if (opts[k] !== undefined) spec[k] = opts[k];
    }
    if (opts.network !== undefined) spec.network = Array.isArray(opts.network) ? { allow: opts.network } : opts.network;
    if (opts.ttl !== undefined) spec.ttl = duration(opts.ttl, "ttl");
    if (opts.idleTimeout !== undefined) spec.idleTimeout = duration(opts.idleTimeout, "idleTimeout");
    if (opts.fromSnapshot !== undefined) spec.fromSnapshot = snapshotId(opts.fromSnapshot, "fromSnapshot");
    const info = await t.json("POST", "/v1/sandboxes", { json: spec });
    return new Sandbox(info.id, t, info);
  }

  /**
   * A sandbox that exists, by its id (checked with the server).
   * @param {string} id
   * @param {ConnectOptions} [conn]
   */
  static async connect(id, conn = {}) {
    const sb = new Sandbox(id, new Transport(conn));
    await sb.info();
    return sb;
  }

  /**
   * The sandboxes, all or those with every given label.
   * @param {{labels?: Record<string,string>} & ConnectOptions} [opts]
   * @returns {Promise<object[]>} their Infos
   */
  static async list(opts = {}) {
    const t = new Transport(opts);
    const qs = Object.entries(opts.labels || {}).map(([k, v]) => `label=${q(`${k}=${v}`)}`).join("&");
    return (await t.json("GET", `/v1/sandboxes${qs ? `?${qs}` : ""}`)).sandboxes || [];
  }

  /** The server's health: {ok, version}. */
  static health(conn = {}) {
    return new Transport(conn).json("GET", "/v1/health");
  }

  _path(tail = "") {
    return `/v1/sandboxes/${q(this.id)}${tail}`;
  }

  /** @returns {Promise<object>} its Info, fresh */
  async info() {
    this.lastInfo = await this._t.json("GET", this._path());
    return this.lastInfo;
  }

  /** Moves its expiry to now+ttl and/or sets its idle timeout. */
  async extend(o = {}) {
    const body = {};
    if (o.ttl !== undefined) body.ttl = duration(o.ttl, "ttl");
    if (o.idleTimeout !== undefined) body.idleTimeout = duration(o.idleTimeout, "idleTimeout");
    this.lastInfo = await this._t.json("POST", this._path("/extend"), { json: body });
    return this.lastInfo;
  }

  /**
   * Runs a command: a string runs with /bin/sh -c, an array as argv. A
   * non-zero exit is data (exitCode), not an error; an AgentSandboxError
   * means it did not run (or, code "exec_error", could not start). The
   * command waits for this reader, so every byte comes; output the server
   * did not send all the same rejects with output_gap.
   * With background it returns an Exec as soon as the command has started.
   * @param {string|string[]} cmd
   * @param {{cwd?: string, env?: Record<string,string>, timeout?: string|number, stdin?: string,
   *          onStdout?: (s: string) => void, onStderr?: (s: string) => void,
   *          background?: boolean, signal?: AbortSignal}} [o]
   * @returns {Promise<ExecResult>} (or Promise<Exec> with background)
   */
  async exec(cmd, o = {}) {
    const req = {};
    if (typeof cmd === "string") req.shell = cmd;
    else if (Array.isArray(cmd) && cmd.length > 0) req.argv = cmd.map(String);
    else throw new AgentSandboxError("bad_request", 0, "exec: want a shell command string or a non-empty argv array");
    if (o.cwd !== undefined) req.cwd = o.cwd;
    if (o.env !== undefined) req.env = o.env;
    if (o.timeout !== undefined) req.timeout = duration(o.timeout, "timeout");
    if (o.stdin !== undefined) req.stdin = o.stdin;
    if (o.background) {
      req.background = true;
      const info = await this._t.json("POST", this._path("/exec"), { json: req });
      return new Exec(this, info.id);
    }
    const res = await this._t.request("POST", this._path("/exec"),
      { json: req, headers: { accept: "application/x-ndjson" }, signal: o.signal });
    const c = new Collector(o);
    await readEvents(res, (ev) => c.event(ev));
    if (!c.exit) {
      throw new AgentSandboxError("exec_error", 200,
        `the exec ${c.execId || ""} stream ended before the command's exit; check the sandbox with info() and run the command again`);
    }
    return c.checked();
  }

  /** A background exec by its id. */
  getExec(execId) {
    return new Exec(this, execId);
  }

  /**
   * Stores the workspace's files as a content-addressed snapshot, to roll
   * back to with restore() or to fork with Sandbox.create({fromSnapshot}).
   * @param {string} [label] a note to recognise it by
   * @returns {Promise<SnapshotInfo>}
   */
  snapshot(label) {
    return this._t.json("POST", this._path("/snapshots"), { json: label ? { label } : {} });
  }

  /** @returns {Promise<SnapshotInfo[]>} the snapshots taken of this sandbox, oldest first */
  async snapshots() {
    return (await this._t.json("GET", this._path("/snapshots"))).snapshots || [];
  }

  /**
   * Replaces the workspace with a snapshot's: files written since are lost.
   * No command may be running (conflict).
   * @param {string|SnapshotInfo} snapshot the snapshot or its id
   * @returns {Promise<object>} its Info
   */
  async restore(snapshot) {
    const body = { snapshot: snapshotId(snapshot, "restore") };
    this.lastInfo = await this._t.json("POST", this._path("/restore"), { json: body });
    return this.lastInfo;
  }

  /**
   * Stops the sandbox and closes its record.
   * @returns {Promise<string>} the execution record's id
   */
  async kill() {
    this.lastInfo = await this._t.json("DELETE", this._path());
    return this.lastInfo.record;
  }

  /** For `await using sb = await Sandbox.create()`: kills it unless stopped. */
  async [Symbol.asyncDispose ?? Symbol.for("Symbol.asyncDispose")]() {
    try {
      await this.kill();
    } catch (err) {
      if (!(err instanceof AgentSandboxError && (err.code === "not_found" || err.code === "conflict"))) throw err;
    }
  }
}

/**
 * @typedef {object} RunStep
 * @property {string} name
 * @property {string} isolation
 * @property {string} status succeeded, failed, timeout, oom, error, ...
 * @property {number} exitCode
 * @property {string} [signal]
 * @property {number} durationMs
 * @property {string} stdout the last 16 KiB
 * @property {string} stderr the last 16 KiB
 * @property {{path: string, narHash: string, narSize: number}[]} outputs
 * @property {string} [detail]
 */

/**
 * @typedef {object} RunInfo
 * @property {string} [record] the run's execution record (absent only when the run stopped before writing one)
 * @property {string} workflow the workflow's name
 * @property {string} status as a record's: succeeded, failed, timeout, oom, error
 * @property {boolean} ok status is succeeded
 * @property {string} [error]
 * @property {string} started
 * @property {string} finished
 * @property {RunStep[]} steps
 */

/**
 * Runs a whole workflow on the server, as `agentsandbox apply` would, and
 * resolves when it has ended, however long that takes. A failed step is a
 * result (ok false, the step's status and exit code), not a rejection; a
 * server that does not run workflows (the test fake) rejects with
 * not_supported_yet.
 * @param {{workflow?: string, inline?: string, isolation?: string} & ConnectOptions} opts
 *   workflow: a file in the server's template directory, such as "ci.yaml";
 *   or inline: the workflow's YAML itself; isolation overrides every step's
 * @returns {Promise<RunInfo>}
 */
export async function runWorkflow(opts = {}) {
  if ((opts.workflow === undefined) === (opts.inline === undefined)) {
    throw new AgentSandboxError("bad_request", 0,
      "runWorkflow: give workflow (a file in the server's template directory) or inline (the YAML), not both or neither");
  }
  const body = opts.workflow !== undefined ? { workflow: opts.workflow } : { inline: opts.inline };
  if (opts.isolation !== undefined) body.isolation = opts.isolation;
  const info = await new Transport(opts).json("POST", "/v1/runs", { json: body });
  return { ...info, steps: info.steps || [], ok: info.status === "succeeded" };
}
