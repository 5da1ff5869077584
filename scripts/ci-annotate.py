#!/usr/bin/env python3
"""Turn `agentsandbox apply --json` output into GitHub Actions annotations.

Usage: ci-annotate.py EVENTS [--stderr FILE] [--output FILE] [--tail N]

EVENTS is apply's stdout with --json: one engine event per line, then the
record id on a line of its own when a record was written. For every step
that finished other than "succeeded" it prints

    ::error title=agentsandbox step NAME STATUS::DETAIL (record ID); last output: ...

with the step's last N console lines (default 5); a skipped step is a
::notice, a warning event a ::warning. With --stderr, apply's warnings
("warning: ...", the policy's among them) are ::warning lines too, and its
error ("agentsandbox: ...") is an ::error when no step failed (a denial, an
invalid workflow, a host problem). With --output
(the step's $GITHUB_OUTPUT) it appends record-id=ID when there is one.

Only the Python standard library; job output is untrusted, so every value
is escaped the way the runner's workflow commands expect.
"""

import argparse
import json
import re
import sys

# A record id: 32 bytes in Nix's base32 (record.ID).
RECORD_ID = re.compile(r"^[0-9abcdfghijklmnpqrsvwxyz]{52}$")


def escape_data(s):
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(s):
    return escape_data(s).replace(":", "%3A").replace(",", "%2C")


def command(kind, title, message):
    return "::%s title=%s::%s" % (kind, escape_property(title), escape_data(message))


def read_events(path):
    """Returns the events, and the record id if the last line is one."""
    events, record = [], ""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = [line.strip() for line in f if line.strip()]
    for i, line in enumerate(lines):
        if i == len(lines) - 1 and RECORD_ID.match(line):
            record = line
            break
        try:
            ev = json.loads(line)
        except ValueError:
            continue  # not an event: apply prints nothing else on stdout with --json
        if isinstance(ev, dict):
            events.append(ev)
    return events, record


def annotations(events, record, tail):
    out = []
    logs = {}
    failed = 0
    suffix = " (record %s)" % record if record else ""
    for ev in events:
        kind, step = ev.get("kind"), ev.get("step", "")
        if kind == "log":
            logs.setdefault(step, []).append(ev.get("line", ""))
        elif kind == "warning":
            out.append(command("warning", "agentsandbox", ev.get("line", "")))
        elif kind == "skipped":
            out.append(command("notice", "agentsandbox step %s skipped" % step, ev.get("line", "") + suffix))
        elif kind == "finished":
            res = ev.get("result") or {}
            status = res.get("status", "unknown")
            if status == "succeeded":
                continue
            failed += 1
            detail = res.get("detail") or "exit status %s" % (res.get("result") or {}).get("exitCode", "?")
            msg = "step %s %s: %s%s" % (step, status, detail, suffix)
            last = logs.get(step, [])[-tail:] if tail > 0 else []
            if last:
                msg += "\nlast output:\n" + "\n".join(last)
            out.append(command("error", "agentsandbox step %s %s" % (step, status), msg))
    return out, failed


def read_stderr(path):
    """apply's own lines: its warnings ("warning: ...") and the error that
    stopped it ("agentsandbox: ...", with its indented lines)."""
    warnings, errors = [], []
    last = None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("agentsandbox: "):
                errors.append(line[len("agentsandbox: "):])
                last = errors
            elif line.startswith("warning: "):
                warnings.append(line[len("warning: "):])
                last = warnings
            elif last and line.startswith(("  ", "\t")):
                last[-1] += "\n" + line.strip()
            else:
                last = None
    return warnings, errors


def main(argv):
    p = argparse.ArgumentParser(description="GitHub annotations from agentsandbox apply --json")
    p.add_argument("events")
    p.add_argument("--stderr", help="apply's stderr, for the error that stopped it")
    p.add_argument("--output", help="append record-id=ID here ($GITHUB_OUTPUT)")
    p.add_argument("--tail", type=int, default=5, help="console lines of a failed step to show")
    a = p.parse_args(argv)

    events, record = read_events(a.events)
    lines, failed = annotations(events, record, a.tail)
    if a.stderr:
        warnings, errors = read_stderr(a.stderr)
        lines += [command("warning", "agentsandbox", w) for w in warnings]
        if failed == 0:
            suffix = " (record %s)" % record if record else ""
            lines += [command("error", "agentsandbox apply", e + suffix) for e in errors]
    for line in lines:
        print(line)
    if a.output and record:
        with open(a.output, "a", encoding="utf-8") as f:
            f.write("record-id=%s\n" % record)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
