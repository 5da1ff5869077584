"""A client for the REST API of `agentsandbox serve` (docs/api.md), standard library only.

    from agentsandbox import Sandbox, run_workflow

    with Sandbox.create(packages=["python3"], labels={"task": "demo"}) as sb:
        sb.files.write("main.py", "print(6*7)\n")
        r = sb.commands.run(["python3", "main.py"])
        print(r.exit_code, r.stdout)
        snap = sb.snapshot("it runs")           # roll back later with sb.restore(snap)

    result = run_workflow(inline=open("ci.yaml").read())   # a whole workflow, run by the server
    print(result.status, result.record, [(s.name, s.status) for s in result.steps])

The server is found by the arguments socket= or base_url= (with token=),
else $AGENTSANDBOX_SOCKET, else $AGENTSANDBOX_URL (with
$AGENTSANDBOX_TOKEN), else the default socket: /var/lib/agentsandbox/serve.sock
for root, $XDG_STATE_HOME/agentsandbox/serve.sock or
~/.local/state/agentsandbox/serve.sock for others.
"""

from ._errors import AgentSandboxError, OutputGapError
from ._runs import RunOutput, RunResult, RunStep, run_workflow
from ._sandbox import (CommandHandle, CommandOutput, CommandResult, Commands, FileInfo, Files, Network,
                       NetworkInfo, Sandbox, SandboxInfo, SnapshotInfo, Usage)
from ._transport import Transport, default_socket, default_state_dir

__all__ = ["AgentSandboxError", "OutputGapError", "CommandHandle", "CommandOutput", "CommandResult", "Commands", "FileInfo",
           "Files", "Network", "NetworkInfo", "RunOutput", "RunResult", "RunStep", "Sandbox", "SandboxInfo",
           "SnapshotInfo", "Transport", "Usage", "default_socket", "default_state_dir", "run_workflow"]
