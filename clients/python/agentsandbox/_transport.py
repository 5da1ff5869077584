"""HTTP to the agentsandbox server over its unix socket or TCP, standard library only."""

import hashlib
import http.client
import json
import os
import socket
import urllib.parse

from ._errors import AgentSandboxError

SOCKET_NAME = "serve.sock"


def default_state_dir():
    """The server's default state directory, by the rule of record.DefaultStateDir."""
    if os.geteuid() == 0:
        return "/var/lib/agentsandbox"
    xdg = os.environ.get("XDG_STATE_HOME", "")
    if xdg and os.path.isabs(xdg):
        return os.path.join(xdg, "agentsandbox")
    return os.path.join(os.path.expanduser("~"), ".local", "state", "agentsandbox")


def default_socket():
    return os.path.join(default_state_dir(), SOCKET_NAME)


class _Response(http.client.HTTPResponse):
    """An HTTPResponse that keeps the trailer fields of a chunked answer.

    http.client reads them and throws them away; the server sends the
    SHA-256 of a file's bytes as the trailer X-Agentsandbox-Sha256, for
    the client to check what it received. trailers is a dict of
    lower-case names once the body has been read to its end, None before
    (and for an answer that was not chunked).
    """

    trailers = None

    def _read_and_discard_trailer(self):
        trailers = {}
        for _ in range(http.client._MAXHEADERS + 1):
            line = self.fp.readline(http.client._MAXLINE + 1)
            if len(line) > http.client._MAXLINE:
                raise http.client.LineTooLong("trailer line")
            if not line or line in (b"\r\n", b"\n"):
                break
            name, sep, value = line.decode("latin-1").partition(":")
            if sep:
                trailers[name.strip().lower()] = value.strip()
        else:
            raise http.client.HTTPException("more than %d trailer lines" % http.client._MAXHEADERS)
        self.trailers = trailers


class _UnixHTTPConnection(http.client.HTTPConnection):
    """An HTTPConnection to a unix socket; the host name is only for the Host header."""

    response_class = _Response

    def __init__(self, path, timeout=None):
        super().__init__("sandbox", timeout=timeout)
        self._path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if self.timeout is not None:
            s.settimeout(self.timeout)
        try:
            s.connect(self._path)
        except OSError:
            s.close()
            raise
        self.sock = s


class Transport:
    """Where the server is and how to reach it.

    Arguments win; then $AGENTSANDBOX_SOCKET; then $AGENTSANDBOX_URL with
    $AGENTSANDBOX_TOKEN; then the default socket in the state directory.
    """

    def __init__(self, socket=None, base_url=None, token=None, timeout=None):
        if socket and base_url:
            raise ValueError("give socket or base_url, not both")
        if not socket and not base_url:
            socket = os.environ.get("AGENTSANDBOX_SOCKET") or None
            if not socket:
                base_url = os.environ.get("AGENTSANDBOX_URL") or None
            if not socket and not base_url:
                socket = default_socket()
        if base_url and token is None:
            token = os.environ.get("AGENTSANDBOX_TOKEN") or None
        self.socket = socket
        self.token = token
        self.timeout = timeout
        if base_url:
            u = urllib.parse.urlsplit(base_url)
            if u.scheme not in ("http", "https") or not u.hostname:
                raise ValueError("base_url %r: want http://HOST:PORT or https://HOST:PORT" % base_url)
            self._scheme, self._netloc = u.scheme, u.netloc
            self._prefix = u.path.rstrip("/")
        self.base_url = base_url

    def where(self):
        if self.socket:
            return "unix socket %s" % self.socket
        return self.base_url

    def _connection(self):
        if self.socket:
            return _UnixHTTPConnection(self.socket, timeout=self.timeout)
        if self._scheme == "https":
            conn = http.client.HTTPSConnection(self._netloc, timeout=self.timeout)
        else:
            conn = http.client.HTTPConnection(self._netloc, timeout=self.timeout)
        conn.response_class = _Response
        return conn

    def request(self, method, path, query=None, body=None, json_body=None, headers=None, ok=(200,)):
        """Sends one request and returns the open response once its status is one of ok.

        Any other status raises AgentSandboxError from the server's JSON
        error. The caller reads (or streams) the body and closes it.
        """
        # One connection a request: the server closes it after the answer.
        hdrs = {"Accept": "application/json", "Connection": "close"}
        if json_body is not None:
            body = json.dumps(json_body).encode()
            hdrs["Content-Type"] = "application/json"
        if headers:
            hdrs.update(headers)
        if self.token:
            hdrs["Authorization"] = "Bearer " + self.token
        url = path
        if not self.socket:
            url = self._prefix + path
        if query:
            url += "?" + urllib.parse.urlencode(query, doseq=True)
        conn = self._connection()
        try:
            try:
                conn.request(method, url, body=body, headers=hdrs)
            except (BrokenPipeError, ConnectionResetError):
                # The server may answer (a bad path, a file too large) and
                # hang up before reading the whole body: read its answer.
                pass
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise AgentSandboxError(
                "unavailable", 0,
                "cannot reach the agentsandbox server at %s: %s; start it (sudo agentsandbox serve) "
                "or point AGENTSANDBOX_SOCKET or AGENTSANDBOX_URL at it" % (self.where(), e)) from e
        if resp.status in ok:
            return resp
        try:
            raw = resp.read()
        finally:
            conn.close()
        raise _error_from(resp.status, raw)

    def json(self, method, path, query=None, json_body=None, ok=(200,)):
        resp = self.request(method, path, query=query, json_body=json_body, ok=ok)
        try:
            raw = resp.read()
        finally:
            resp.close()
        if not raw:
            return None
        return json.loads(raw)


def _error_from(status, raw):
    try:
        err = json.loads(raw)["error"]
        return AgentSandboxError(err.get("code", "internal"), status, err.get("message", ""),
                                 decision=err.get("decision"))
    except (ValueError, KeyError, TypeError):
        text = raw.decode("utf-8", "replace").strip()[:500]
        return AgentSandboxError("internal", status,
                                 "the server answered %d without a JSON error: %s" % (status, text))


def quote_path(path):
    """A workspace path for a URL: relative, slash-separated, percent-encoded."""
    if not isinstance(path, str):
        path = os.fsdecode(path)
    if path == "/workspace":
        path = ""
    elif path.startswith("/workspace/"):
        path = path[len("/workspace/"):]
    return urllib.parse.quote(path, safe="/")


SHA256_TRAILER = "x-agentsandbox-sha256"


def check_sha256(what, data, resp):
    """Raises AgentSandboxError("integrity") unless data hashes to the
    answer's X-Agentsandbox-Sha256 trailer. An answer without the trailer
    (an older server) is not checked."""
    want = (resp.trailers or {}).get(SHA256_TRAILER)
    if not want:
        return
    got = hashlib.sha256(data).hexdigest()
    if got != want.lower():
        raise AgentSandboxError(
            "integrity", resp.status,
            "%s: the %d bytes received hash to sha256 %s, but the server says %s "
            "(X-Agentsandbox-Sha256): the answer was damaged on the way; read it again" % (what, len(data), got, want))
