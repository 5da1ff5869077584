"""The one exception of the client."""


class AgentSandboxError(Exception):
    """A request the server (or the way to it) refused or failed.

    code is the API's stable code (docs/api.md: "not_found", "conflict",
    "policy_denied", ...), or "unavailable" when the server could not be
    reached, "exec_error" when a command could not start or its stream
    broke off, "output_gap" (OutputGapError) when output was lost, and
    "integrity" when a file read does not hash to the SHA-256 the server
    sent with it. status is the HTTP status (0 when there was none). message
    says what to do. decision is the policy decision's id for
    "policy_denied".
    """

    def __init__(self, code, status, message, decision=None):
        super().__init__(message)
        self.code = code
        self.status = status
        self.message = message
        self.decision = decision

    def __str__(self):
        return "%s (%s, HTTP %d)" % (self.message, self.code, self.status)


class OutputGapError(AgentSandboxError):
    """Output of a command that the server no longer had, so it was not sent.

    The bytes around the gap are never run together: this is raised once
    the stream has ended, with what did come in result (a CommandResult,
    or a CommandOutput for a background command's output), and gaps, a
    list of (stream, offset, next): the bytes [offset, next) of "stdout" or
    "stderr" are missing. The server keeps the first part of each stream
    (256 MiB unless its operator set less); past it, output reaches only a
    reader that keeps up.
    """

    def __init__(self, gaps, result):
        what = ", ".join("%s bytes %d to %d" % g for g in gaps)
        super().__init__("output_gap", 200, "output was lost, the server no longer had it: %s" % what)
        self.gaps = list(gaps)
        self.result = result
