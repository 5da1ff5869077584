"""Whole workflows run by the server (POST /v1/runs)."""

from dataclasses import dataclass, field
from typing import List, Optional

from ._transport import Transport


@dataclass
class RunOutput:
    """An output a step left: its path and the NAR hash and size of what it holds."""
    path: str
    nar_hash: str = ""
    nar_size: int = 0

    @classmethod
    def from_json(cls, d):
        return cls(path=d.get("path", ""), nar_hash=d.get("narHash", ""), nar_size=d.get("narSize", 0))


@dataclass
class RunStep:
    """How one step of a run ended (sandboxes.RunStep); stdout and stderr are their last 16 KiB."""
    name: str
    status: str
    isolation: str = ""
    exit_code: int = 0
    signal: Optional[str] = None
    duration_ms: int = 0
    stdout: str = ""
    stderr: str = ""
    outputs: List[RunOutput] = field(default_factory=list)
    detail: Optional[str] = None

    @property
    def ok(self):
        return self.status == "succeeded"

    @classmethod
    def from_json(cls, d):
        return cls(name=d.get("name", ""), status=d.get("status", ""), isolation=d.get("isolation", ""),
                   exit_code=d.get("exitCode", 0), signal=d.get("signal") or None,
                   duration_ms=d.get("durationMs", 0), stdout=d.get("stdout", ""), stderr=d.get("stderr", ""),
                   outputs=[RunOutput.from_json(o) for o in (d.get("outputs") or [])],
                   detail=d.get("detail") or None)


@dataclass
class RunResult:
    """A finished run (sandboxes.RunInfo).

    status is a record's: succeeded, failed, timeout, oom or error. A
    failed step is a result, not an exception: read ok, then the steps.
    record is the run's execution record (None only when the run stopped
    before it could write one).
    """
    workflow: str
    status: str
    record: Optional[str] = None
    error: Optional[str] = None
    started: str = ""
    finished: str = ""
    steps: List[RunStep] = field(default_factory=list)

    @property
    def ok(self):
        return self.status == "succeeded"

    def step(self, name):
        """The RunStep called name; KeyError if the run has none."""
        for s in self.steps:
            if s.name == name:
                return s
        raise KeyError("run of %s has no step %r; its steps: %s" % (self.workflow, name,
                                                                     ", ".join(s.name for s in self.steps)))

    @classmethod
    def from_json(cls, d):
        return cls(workflow=d.get("workflow", ""), status=d.get("status", ""), record=d.get("record") or None,
                   error=d.get("error") or None, started=d.get("started", ""), finished=d.get("finished", ""),
                   steps=[RunStep.from_json(s) for s in (d.get("steps") or [])])


def run_workflow(workflow=None, inline=None, isolation=None, socket=None, base_url=None, token=None):
    """Runs a whole workflow on the server, as `agentsandbox apply` would, and returns its RunResult.

    Give workflow (a file in the server's template directory, such as
    "ci.yaml") or inline (the workflow's YAML itself); isolation
    ("namespace", "vm" or "auto") overrides every step's. It returns when
    the run has ended, however long that takes. A server that does not run
    workflows (the test fake) raises AgentSandboxError not_supported_yet.
    """
    if (workflow is None) == (inline is None):
        raise ValueError("run_workflow: give workflow (a file in the server's template directory) or inline "
                         "(the YAML), not both or neither")
    body = {"workflow": workflow} if workflow is not None else {"inline": inline}
    if isolation is not None:
        body["isolation"] = isolation
    t = Transport(socket=socket, base_url=base_url, token=token)
    return RunResult.from_json(t.json("POST", "/v1/runs", json_body=body))
