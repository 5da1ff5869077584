"""The one exception of the client."""


class AgentSandboxError(Exception):
    """A request the server (or the way to it) refused or failed.

    code is the API's stable code (docs/api.md: "not_found", "conflict",
    "policy_denied", ...), or "unavailable" when the server could not be
    reached, "exec_error" when a command could not start or its stream
    broke off, and "integrity" when a file read does not hash to the
    SHA-256 the server sent with it. status is the HTTP status (0 when there was none). message
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
