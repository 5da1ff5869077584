#!/usr/bin/env python3
"""A scripted agent loop: what an agent does with a sandbox, without the model.

An agent calls tools one after the other, reads what they return, and
decides the next call. Here the calls are a fixed list: create a sandbox,
write a script, run it (it fails), read the error, fix the script, run it
again, read the file it wrote, kill the sandbox. It prints each call and
what came back, and last the id of the sandbox's execution record
(check it with `agentsandbox records show ID` and `records verify ID`).

    python3 clients/python/examples/agent_loop.py

The server is found as in the client: $AGENTSANDBOX_SOCKET, else
$AGENTSANDBOX_URL with $AGENTSANDBOX_TOKEN, else the default socket.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from agentsandbox import AgentSandboxError, Sandbox  # noqa: E402

BROKEN = """#!/bin/sh
# Counts the words of notes.txt into report.txt.
set -e
wc -w < notse.txt > report.txt
echo "counted"
"""

FIXED = BROKEN.replace("notse.txt", "notes.txt")


def call(name, **args):
    shown = ", ".join("%s=%s" % (k, repr(v) if len(repr(v)) < 60 else repr(v)[:56] + "...") for k, v in args.items())
    print("tool> %s(%s)" % (name, shown), flush=True)


def main():
    call("create", labels={"example": "agent_loop"}, ttl="10m")
    with Sandbox.create(labels={"example": "agent_loop"}, ttl="10m", idle_timeout="5m") as sb:
        print("  sandbox %s" % sb.id)

        call("files.write", path="notes.txt")
        sb.files.write("notes.txt", "the quick brown fox jumps over the lazy dog\n")
        call("files.write", path="count.sh", data=BROKEN, mode=0o755)
        sb.files.write("count.sh", BROKEN, mode=0o755)

        call("commands.run", cmd="./count.sh")
        r = sb.commands.run("./count.sh", timeout=60)
        print("  exit %d, stderr: %s" % (r.exit_code, r.stderr.strip()))
        if r.exit_code == 0:
            raise SystemExit("agent_loop: the broken script succeeded; the sandbox is not what this example expects")

        # The "model" reads the error, finds the misspelt file name and fixes it.
        call("files.read_text", path="count.sh")
        script = sb.files.read_text("count.sh")
        call("files.write", path="count.sh", data=FIXED, mode=0o755)
        sb.files.write("count.sh", script.replace("notse.txt", "notes.txt"), mode=0o755)

        call("commands.run", cmd="./count.sh")
        r = sb.commands.run("./count.sh", timeout=60, on_stdout=lambda s: print("  | " + s, end=""))
        print("  exit %d" % r.exit_code)
        if r.exit_code != 0:
            raise SystemExit("agent_loop: the fixed script failed (exit %d): %s" % (r.exit_code, r.stderr))

        call("files.read_text", path="report.txt")
        words = sb.files.read_text("report.txt").strip()
        print("  report.txt: %s words" % words)
        if words != "9":
            raise SystemExit("agent_loop: report.txt says %r, want 9" % words)

        call("kill")
        record = sb.kill()
    print("record %s" % record)


if __name__ == "__main__":
    try:
        main()
    except AgentSandboxError as e:
        print("agent_loop: %s" % e, file=sys.stderr)
        sys.exit(1)
