"""Sandboxes, their commands, files, snapshots and network."""

import base64
import codecs
import json
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from ._errors import AgentSandboxError, OutputGapError
from ._transport import Transport, check_sha256, quote_path


def _duration(v, name):
    """A Go duration string from seconds (int or float) or a string such as "10m"."""
    if v is None:
        return None
    if isinstance(v, bool):
        raise TypeError("%s: want seconds or a duration string such as \"10m\", not a bool" % name)
    if isinstance(v, (int, float)):
        if v < 0:
            raise ValueError("%s: %r is negative" % (name, v))
        return "%gs" % v if isinstance(v, float) else "%ds" % v
    if isinstance(v, str):
        return v
    raise TypeError("%s: want seconds or a duration string such as \"10m\", got %r" % (name, v))


def _q(s):
    return urllib.parse.quote(s, safe="")


@dataclass
class Usage:
    cpu_time_ns: int = 0
    memory_bytes: int = 0
    peak_memory_bytes: int = 0
    pids: int = 0
    bytes_out: int = 0
    bytes_in: int = 0

    @classmethod
    def from_json(cls, d):
        d = d or {}
        return cls(d.get("cpuTimeNs", 0), d.get("memoryBytes", 0), d.get("peakMemoryBytes", 0),
                   d.get("pids", 0), d.get("bytesOut", 0), d.get("bytesIn", 0))


@dataclass
class SandboxInfo:
    """A sandbox as the server shows it (sandboxes.Info)."""
    id: str
    state: str
    isolation: str = ""
    labels: Dict[str, str] = field(default_factory=dict)
    created: str = ""
    expires_at: str = ""
    idle_timeout: str = ""
    last_active: str = ""
    step: Any = None
    usage: Usage = field(default_factory=Usage)
    record: Optional[str] = None
    ended: Optional[str] = None

    @classmethod
    def from_json(cls, d):
        return cls(id=d["id"], state=d.get("state", ""), isolation=d.get("isolation", ""),
                   labels=d.get("labels") or {}, created=d.get("created", ""),
                   expires_at=d.get("expiresAt", ""), idle_timeout=d.get("idleTimeout", ""),
                   last_active=d.get("lastActive", ""), step=d.get("step"),
                   usage=Usage.from_json(d.get("usage")), record=d.get("record") or None,
                   ended=d.get("ended") or None)


@dataclass
class FileInfo:
    """A file or directory in the workspace (sandboxes.FileInfo)."""
    path: str
    type: str
    size: int = 0
    mode: str = ""
    mod_time: str = ""
    sha256: Optional[str] = None

    @property
    def name(self):
        return self.path.rsplit("/", 1)[-1]

    @classmethod
    def from_json(cls, d):
        return cls(path=d.get("path", ""), type=d.get("type", ""), size=d.get("size", 0),
                   mode=d.get("mode", ""), mod_time=d.get("modTime", ""), sha256=d.get("sha256") or None)


@dataclass
class SnapshotInfo:
    """A snapshot of a workspace (sandboxes.SnapshotInfo): id is its NAR hash, "sha256:<hex>"."""
    id: str
    sandbox: str = ""
    label: str = ""
    created: str = ""
    size: int = 0

    @classmethod
    def from_json(cls, d):
        return cls(id=d["id"], sandbox=d.get("sandbox", ""), label=d.get("label", ""),
                   created=d.get("created", ""), size=d.get("size", 0))


def _snapshot_id(snapshot, name):
    """The id of a snapshot given as a SnapshotInfo or its id."""
    if isinstance(snapshot, SnapshotInfo):
        return snapshot.id
    if isinstance(snapshot, str) and snapshot:
        return snapshot
    raise TypeError("%s: want a SnapshotInfo or its id (\"sha256:...\"), got %r" % (name, snapshot))


@dataclass
class NetworkInfo:
    """A sandbox's egress rules in force (sandboxes.NetworkInfo).

    allow is its network.allow now; deny is the policy's egress_deny,
    which no allow entry opens.
    """
    allow: List[str] = field(default_factory=list)
    deny: List[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, d):
        d = d or {}
        return cls(allow=list(d.get("allow") or []), deny=list(d.get("deny") or []))


@dataclass
class CommandResult:
    """How a command ended and what it wrote. A non-zero exit_code is data, not an error."""
    exit_code: int
    stdout: str = ""
    stderr: str = ""
    signal: Optional[str] = None
    timed_out: bool = False
    duration_ms: int = 0
    cpu_time_ns: int = 0
    max_rss_bytes: int = 0
    exec_id: str = ""
    stdout_bytes: bytes = b""
    stderr_bytes: bytes = b""

    @property
    def ok(self):
        return self.exit_code == 0 and not self.signal and not self.timed_out


@dataclass
class CommandOutput:
    """Output read from a background command from byte offsets.

    stdout_offset and stderr_offset are where to read on from next time;
    result is set once the command has ended.
    """
    stdout: str
    stderr: str
    stdout_offset: int
    stderr_offset: int
    result: Optional[CommandResult] = None
    stdout_bytes: bytes = b""
    stderr_bytes: bytes = b""


def _event_bytes(ev):
    if "base64" in ev and ev["base64"]:
        return base64.b64decode(ev["base64"])
    return (ev.get("text") or "").encode("utf-8")


class _Collector:
    """Reads an NDJSON event stream line by line as it arrives."""

    def __init__(self, on_stdout=None, on_stderr=None, stdout_from=0, stderr_from=0):
        self.on = {"stdout": on_stdout, "stderr": on_stderr}
        # A character split between two events reaches a callback whole.
        self.dec = {k: codecs.getincrementaldecoder("utf-8")(errors="replace") for k in self.on}
        self.buf = {"stdout": bytearray(), "stderr": bytearray()}
        self.next = {"stdout": stdout_from, "stderr": stderr_from}
        self.gaps = []  # (stream, offset, next) of output not sent
        self.exit = None
        self.exec_id = ""

    def feed(self, resp):
        try:
            while True:
                line = resp.readline()
                if not line:
                    break
                line = line.strip()
                if not line:
                    continue
                try:
                    ev = json.loads(line)
                except ValueError:
                    raise AgentSandboxError("internal", resp.status,
                                            "the server sent a line that is not JSON in an exec stream: %r" % line[:200])
                self.event(ev)
                if ev.get("type") in ("exit", "error"):
                    break
        finally:
            resp.close()

    def event(self, ev):
        t = ev.get("type")
        if ev.get("execId"):
            self.exec_id = ev["execId"]
        if t in ("stdout", "stderr"):
            b = _event_bytes(ev)
            off = ev.get("offset", 0)
            if off > self.next[t]:  # bytes skipped without a gap event: a gap all the same
                self.gaps.append((t, self.next[t], off))
            elif off < self.next[t]:  # sent before
                b = b[self.next[t] - off:]
                off = self.next[t]
            if not b:
                return
            self.buf[t] += b
            self.next[t] = off + len(b)
            cb = self.on[t]
            if cb is not None:
                text = self.dec[t].decode(b)
                if text:
                    cb(text)
        elif t == "gap":
            s, off, nxt = ev.get("stream"), ev.get("offset", 0), ev.get("next", 0)
            if s in self.next and nxt > self.next[s]:
                self.gaps.append((s, max(off, self.next[s]), nxt))
                self.next[s] = nxt
        elif t == "exit":
            self.exit = ev.get("exit") or {}
        elif t == "error":
            raise AgentSandboxError("exec_error", 200, ev.get("error") or "the command failed without a message")

    def result(self):
        if self.exit is None:
            raise AgentSandboxError("exec_error", 200,
                                    "the exec stream ended without an exit: the server may have stopped; "
                                    "check the sandbox with info()")
        e = self.exit
        out, err = bytes(self.buf["stdout"]), bytes(self.buf["stderr"])
        return CommandResult(exit_code=e.get("exitCode", 0), stdout=out.decode("utf-8", "replace"),
                             stderr=err.decode("utf-8", "replace"), signal=e.get("signal") or None,
                             timed_out=bool(e.get("timedOut")), duration_ms=e.get("durationMs", 0),
                             cpu_time_ns=e.get("cpuTimeNs", 0), max_rss_bytes=e.get("maxRssBytes", 0),
                             exec_id=self.exec_id, stdout_bytes=out, stderr_bytes=err)


class CommandHandle:
    """A command running in the background."""

    def __init__(self, sandbox, exec_id):
        self._sb = sandbox
        self.id = exec_id

    def _path(self, tail=""):
        return "/v1/sandboxes/%s/execs/%s%s" % (_q(self._sb.id), _q(self.id), tail)

    def info(self):
        """The exec as the server keeps it: running, exit, stdoutBytes, stderrBytes (a dict)."""
        return self._sb._t.json("GET", self._path())

    def output(self, stdout=0, stderr=0, follow=False, on_stdout=None, on_stderr=None):
        """Its kept output from byte offsets; with follow, until it ends.

        Pass the offsets of the last CommandOutput to read on from there.
        Output the server no longer has raises OutputGapError once the
        stream has ended; its result is the CommandOutput of what came.
        """
        c = _Collector(on_stdout, on_stderr, stdout, stderr)
        q = {"stdout": stdout, "stderr": stderr}
        if follow:
            q["follow"] = 1
        c.feed(self._sb._t.request("GET", self._path("/output"), query=q))
        out, err = bytes(c.buf["stdout"]), bytes(c.buf["stderr"])
        o = CommandOutput(stdout=out.decode("utf-8", "replace"), stderr=err.decode("utf-8", "replace"),
                          stdout_offset=c.next["stdout"], stderr_offset=c.next["stderr"],
                          result=c.result() if c.exit is not None else None,
                          stdout_bytes=out, stderr_bytes=err)
        if c.gaps:
            raise OutputGapError(c.gaps, o)
        return o

    def wait(self, on_stdout=None, on_stderr=None):
        """Waits for its end and returns its CommandResult with all its kept output.

        Output the server no longer has raises OutputGapError once it has
        ended, with the CommandResult of what came.
        """
        try:
            o = self.output(0, 0, follow=True, on_stdout=on_stdout, on_stderr=on_stderr)
        except OutputGapError as e:
            if e.result.result is None:
                raise
            raise OutputGapError(e.gaps, e.result.result) from None
        if o.result is None:
            raise AgentSandboxError("exec_error", 200, "exec %s: its output ended without an exit" % self.id)
        return o.result

    def signal(self, signal="SIGTERM"):
        """Sends a signal (SIGTERM, SIGINT, SIGKILL, ...) to its process group."""
        self._sb._t.json("POST", self._path("/signal"), json_body={"signal": signal}, ok=(204,))

    def kill(self):
        self.signal("SIGKILL")


class Commands:
    """sandbox.commands: run commands in the sandbox."""

    def __init__(self, sandbox):
        self._sb = sandbox

    def run(self, cmd, cwd=None, env=None, timeout=None, stdin=None, on_stdout=None, on_stderr=None,
            background=False):
        """Runs cmd: a string for /bin/sh -c, or a list of arguments run as is.

        Returns a CommandResult once it exits (a non-zero exit is not an
        error), or with background=True a CommandHandle at once. on_stdout
        and on_stderr are called with each piece of output as it arrives.
        The command waits for this reader, so every byte comes; output the
        server did not send all the same raises OutputGapError (with the
        CommandResult of what came) rather than be run together.
        """
        req = {}
        if isinstance(cmd, str):
            req["shell"] = cmd
        elif isinstance(cmd, (list, tuple)) and cmd and all(isinstance(a, str) for a in cmd):
            req["argv"] = list(cmd)
        else:
            raise TypeError("cmd: want a shell command string or a non-empty list of strings, got %r" % (cmd,))
        if cwd is not None:
            req["cwd"] = cwd
        if env:
            req["env"] = dict(env)
        if timeout is not None:
            req["timeout"] = _duration(timeout, "timeout")
        if stdin is not None:
            if isinstance(stdin, bytes):
                try:
                    stdin = stdin.decode("utf-8")
                except UnicodeDecodeError:
                    raise ValueError("stdin: the API takes text only; write binary input to a file with "
                                     "files.write and redirect from it") from None
            req["stdin"] = stdin
        path = "/v1/sandboxes/%s/exec" % _q(self._sb.id)
        if background:
            req["background"] = True
            info = self._sb._t.json("POST", path, json_body=req, ok=(202,))
            return CommandHandle(self._sb, info["id"])
        c = _Collector(on_stdout, on_stderr)
        c.feed(self._sb._t.request("POST", path, json_body=req,
                                   headers={"Accept": "application/x-ndjson"}))
        r = c.result()
        if c.gaps:
            raise OutputGapError(c.gaps, r)
        return r

    def connect(self, exec_id):
        """A handle on a background command started earlier."""
        return CommandHandle(self._sb, exec_id)


class Files:
    """sandbox.files: the workspace's files, by paths relative to it."""

    def __init__(self, sandbox):
        self._sb = sandbox

    def _path(self, kind, path):
        return "/v1/sandboxes/%s/%s/%s" % (_q(self._sb.id), kind, quote_path(path))

    def read(self, path):
        """The file's bytes."""
        resp = self._sb._t.request("GET", self._path("files", path), headers={"Accept": "*/*"})
        try:
            data = resp.read()
        except Exception as e:
            raise AgentSandboxError("internal", resp.status,
                                    "read %s: the answer broke off: %s; try again" % (path, e)) from e
        finally:
            resp.close()
        check_sha256("read %s" % path, data, resp)
        return data

    def read_text(self, path, encoding="utf-8"):
        return self.read(path).decode(encoding)

    def write(self, path, data, mode=None):
        """Writes data (str, bytes or a binary file) to path, creating its parents. Returns its FileInfo."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        elif hasattr(data, "read"):
            data = data.read()
        q = None
        if mode is not None:
            q = {"mode": "%04o" % mode if isinstance(mode, int) else mode}
        resp = self._sb._t.request("PUT", self._path("files", path), query=q, body=bytes(data),
                                   headers={"Content-Type": "application/octet-stream"})
        try:
            return FileInfo.from_json(json.loads(resp.read()))
        finally:
            resp.close()

    def list(self, dir=""):
        """The entries of a directory of the workspace (the workspace itself by default)."""
        path = "/v1/sandboxes/%s/ls" % _q(self._sb.id)
        d = quote_path(dir)
        if d:
            path += "/" + d
        return [FileInfo.from_json(f) for f in (self._sb._t.json("GET", path).get("files") or [])]

    def stat(self, path):
        return FileInfo.from_json(self._sb._t.json("GET", self._path("stat", path)))

    def exists(self, path):
        try:
            self.stat(path)
            return True
        except AgentSandboxError as e:
            if e.code == "not_found":
                return False
            raise

    def remove(self, path, recursive=False):
        self._sb._t.json("DELETE", self._path("files", path), query={"recursive": 1} if recursive else None,
                         ok=(204,))


def _entries(entries, name):
    out = []
    for e in entries:
        if not isinstance(e, str) or not e:
            raise TypeError("%s: want entries such as \"pypi.org:443\", \"*.example.com:443\" or "
                            "\"198.51.100.0/24:5432\", got %r" % (name, e))
        out.append(e)
    return out


class Network:
    """sandbox.network: the hosts, *.domains and CIDR:ports the sandbox may reach.

    Only a sandbox created with network=[...] can have entries granted
    (one created without answers conflict); a server that cannot change
    them (the test fake) answers not_supported_yet.
    """

    def __init__(self, sandbox):
        self._sb = sandbox

    def _path(self):
        return "/v1/sandboxes/%s/network" % _q(self._sb.id)

    def get(self):
        """The NetworkInfo in force."""
        return NetworkInfo.from_json(self._sb._t.json("GET", self._path()))

    def update(self, grant=(), revoke=()):
        """Revokes, then grants, in one change; returns the NetworkInfo after it."""
        body = {}
        if grant:
            body["grant"] = _entries(grant, "grant")
        if revoke:
            body["revoke"] = _entries(revoke, "revoke")
        if not body:
            raise ValueError("network update: give entries to grant, to revoke or both")
        return NetworkInfo.from_json(self._sb._t.json("POST", self._path(), json_body=body))

    def grant(self, *entries):
        """Allows entries (such as "pypi.org:443"); returns the NetworkInfo after it."""
        return self.update(grant=entries)

    def revoke(self, *entries):
        """Takes entries away; returns the NetworkInfo after it."""
        return self.update(revoke=entries)


class Sandbox:
    """A long-lived sandbox on an agentsandbox server.

    Make one with Sandbox.create(...) or Sandbox.connect(id); use it as a
    context manager to kill it on exit.
    """

    def __init__(self, sandbox_id, transport):
        self.id = sandbox_id
        self._t = transport
        self.commands = Commands(self)
        self.files = Files(self)
        self.network = Network(self)

    @classmethod
    def create(cls, template=None, isolation=None, packages=None, resources=None, network=None, env=None,
               ttl=None, idle_timeout=None, labels=None, from_snapshot=None, socket=None, base_url=None,
               token=None):
        """Creates a sandbox.

        network is a list of HOST:PORT to allow (or {"allow": [...]});
        from_snapshot (a SnapshotInfo or its id) forks it: its workspace
        starts as the snapshot's.
        """
        spec = {}
        if template is not None:
            spec["template"] = template
        if isolation is not None:
            spec["isolation"] = isolation
        if packages is not None:
            spec["packages"] = list(packages)
        if resources is not None:
            spec["resources"] = dict(resources)
        if network is not None:
            spec["network"] = dict(network) if isinstance(network, dict) else {"allow": list(network)}
        if env is not None:
            spec["env"] = dict(env)
        if ttl is not None:
            spec["ttl"] = _duration(ttl, "ttl")
        if idle_timeout is not None:
            spec["idleTimeout"] = _duration(idle_timeout, "idle_timeout")
        if labels is not None:
            spec["labels"] = dict(labels)
        if from_snapshot is not None:
            spec["fromSnapshot"] = _snapshot_id(from_snapshot, "from_snapshot")
        t = Transport(socket=socket, base_url=base_url, token=token)
        info = t.json("POST", "/v1/sandboxes", json_body=spec, ok=(201,))
        sb = cls(info["id"], t)
        sb._last = SandboxInfo.from_json(info)
        return sb

    @classmethod
    def connect(cls, sandbox_id, socket=None, base_url=None, token=None):
        """A sandbox created earlier, by id; fails with not_found if there is none."""
        sb = cls(sandbox_id, Transport(socket=socket, base_url=base_url, token=token))
        sb.info()
        return sb

    @classmethod
    def list(cls, labels=None, socket=None, base_url=None, token=None):
        """The server's sandboxes (SandboxInfo), those with every given label if labels is set."""
        t = Transport(socket=socket, base_url=base_url, token=token)
        q = {"label": ["%s=%s" % kv for kv in (labels or {}).items()]} if labels else None
        return [SandboxInfo.from_json(d) for d in (t.json("GET", "/v1/sandboxes", query=q).get("sandboxes") or [])]

    @property
    def sandbox_id(self):
        """The same as id."""
        return self.id

    def info(self):
        self._last = SandboxInfo.from_json(self._t.json("GET", "/v1/sandboxes/%s" % _q(self.id)))
        return self._last

    def is_running(self):
        return self.info().state == "running"

    def extend(self, ttl=None, idle_timeout=None):
        """Moves the expiry to now+ttl and/or sets a new idle timeout; returns the SandboxInfo."""
        body = {}
        if ttl is not None:
            body["ttl"] = _duration(ttl, "ttl")
        if idle_timeout is not None:
            body["idleTimeout"] = _duration(idle_timeout, "idle_timeout")
        if not body:
            raise ValueError("extend: give ttl, idle_timeout or both")
        self._last = SandboxInfo.from_json(self._t.json("POST", "/v1/sandboxes/%s/extend" % _q(self.id), json_body=body))
        return self._last

    def snapshot(self, label=None):
        """Stores the workspace's files as a content-addressed snapshot; returns its SnapshotInfo.

        The same files give the same id. Restore it with restore(), or
        start a new sandbox from it with Sandbox.create(from_snapshot=).
        """
        body = {"label": label} if label else {}
        return SnapshotInfo.from_json(self._t.json("POST", "/v1/sandboxes/%s/snapshots" % _q(self.id),
                                                   json_body=body, ok=(201,)))

    def snapshots(self):
        """The snapshots taken of this sandbox (SnapshotInfo), oldest first."""
        d = self._t.json("GET", "/v1/sandboxes/%s/snapshots" % _q(self.id))
        return [SnapshotInfo.from_json(x) for x in (d.get("snapshots") or [])]

    def restore(self, snapshot):
        """Replaces the workspace with a snapshot's (a SnapshotInfo or its id); returns the SandboxInfo.

        Files written since are lost; no command may be running (conflict).
        """
        body = {"snapshot": _snapshot_id(snapshot, "snapshot")}
        self._last = SandboxInfo.from_json(self._t.json("POST", "/v1/sandboxes/%s/restore" % _q(self.id),
                                                        json_body=body))
        return self._last

    def kill(self):
        """Stops the sandbox and closes its execution record; returns the record's id."""
        self._last = SandboxInfo.from_json(self._t.json("DELETE", "/v1/sandboxes/%s" % _q(self.id)))
        return self._last.record

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        try:
            self.kill()
        except AgentSandboxError as e:
            if e.code not in ("not_found", "conflict"):
                raise
        return False

    def __repr__(self):
        return "Sandbox(%r)" % self.id
