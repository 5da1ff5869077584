"""Tests of the Python client against a running server.

clients/python/python_test.go runs them against fakeserve (and, as root,
against the real `agentsandbox serve`). They need:

  AGENTSANDBOX_TEST_SOCKET  the server's unix socket
  AGENTSANDBOX_TEST_URL     (optional) its TCP address, http://HOST:PORT,
  AGENTSANDBOX_TEST_TOKEN   with the bearer token
  AGENTSANDBOX_TEST_REAL    1 when the server is the real `agentsandbox serve`
                            (network grants and workflow runs work), else the
                            fake (which answers them not_supported_yet)
"""

import hashlib
import io
import json
import os
import sys
import threading
import time
import unittest
from unittest import mock

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import agentsandbox  # noqa: E402
from agentsandbox import AgentSandboxError, OutputGapError, Sandbox, SnapshotInfo, run_workflow  # noqa: E402

SOCKET = os.environ.get("AGENTSANDBOX_TEST_SOCKET", "")
URL = os.environ.get("AGENTSANDBOX_TEST_URL", "")
TOKEN = os.environ.get("AGENTSANDBOX_TEST_TOKEN", "")
REAL = os.environ.get("AGENTSANDBOX_TEST_REAL", "") == "1"

if not SOCKET:
    raise unittest.SkipTest("set AGENTSANDBOX_TEST_SOCKET to a server's socket (go test ./clients/python does)")


def new_sandbox(**kw):
    kw.setdefault("socket", SOCKET)
    kw.setdefault("labels", {"test": "python-client"})
    return Sandbox.create(**kw)


class SandboxLifecycle(unittest.TestCase):
    def test_create_info_list_extend_kill(self):
        run_id = "r%d" % time.monotonic_ns()
        sb = new_sandbox(labels={"test": "python-client", "run": run_id}, ttl=600, idle_timeout="5m")
        self.assertTrue(sb.id)
        info = sb.info()
        self.assertEqual(info.id, sb.id)
        self.assertEqual(info.state, "running")
        self.assertEqual(info.labels["run"], run_id)
        self.assertTrue(sb.is_running())

        ids = [i.id for i in Sandbox.list(labels={"run": run_id}, socket=SOCKET)]
        self.assertEqual(ids, [sb.id])
        self.assertEqual(Sandbox.list(labels={"run": run_id + "-other"}, socket=SOCKET), [])
        self.assertIn(sb.id, [i.id for i in Sandbox.list(socket=SOCKET)])

        before = sb.info().expires_at
        after = sb.extend(ttl="2h", idle_timeout=1200)
        self.assertGreater(after.expires_at, before)
        with self.assertRaises(ValueError):
            sb.extend()

        again = Sandbox.connect(sb.id, socket=SOCKET)
        self.assertEqual(again.id, sb.id)

        record = sb.kill()
        self.assertRegex(record, r"^[0-9a-z]{32,64}$")
        info = sb.info()
        self.assertEqual(info.state, "stopped")
        self.assertEqual(info.record, record)
        self.assertEqual(info.ended, "killed")
        with self.assertRaises(AgentSandboxError) as cm:
            sb.commands.run("true")
        self.assertEqual(cm.exception.code, "conflict")
        self.assertEqual(cm.exception.status, 409)

    def test_context_manager_kills(self):
        with new_sandbox() as sb:
            self.assertEqual(sb.commands.run("true").exit_code, 0)
        self.assertEqual(sb.info().state, "stopped")

    def test_connect_unknown(self):
        with self.assertRaises(AgentSandboxError) as cm:
            Sandbox.connect("sb-000000000000", socket=SOCKET)
        e = cm.exception
        self.assertEqual((e.code, e.status), ("not_found", 404))
        self.assertIn("sb-000000000000", e.message)

    def test_unreachable_server(self):
        with self.assertRaises(AgentSandboxError) as cm:
            Sandbox.list(socket=os.path.join(os.path.dirname(SOCKET), "no-such.sock"))
        self.assertEqual(cm.exception.code, "unavailable")
        self.assertIn("agentsandbox serve", cm.exception.message)

    def test_default_socket_from_environment(self):
        with mock.patch.dict(os.environ, {"AGENTSANDBOX_SOCKET": SOCKET, "AGENTSANDBOX_URL": ""}):
            self.assertIsInstance(Sandbox.list(), list)

    def test_default_state_dir_rule(self):
        with mock.patch("os.geteuid", return_value=0):
            self.assertEqual(agentsandbox.default_socket(), "/var/lib/agentsandbox/serve.sock")
        with mock.patch("os.geteuid", return_value=1000):
            with mock.patch.dict(os.environ, {"XDG_STATE_HOME": "/x/state", "HOME": "/home/u"}):
                self.assertEqual(agentsandbox.default_socket(), "/x/state/agentsandbox/serve.sock")
            with mock.patch.dict(os.environ, {"XDG_STATE_HOME": "relative", "HOME": "/home/u"}):
                self.assertEqual(agentsandbox.default_socket(), "/home/u/.local/state/agentsandbox/serve.sock")


class CommandsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sb = new_sandbox()

    @classmethod
    def tearDownClass(cls):
        cls.sb.kill()

    def test_shell_and_argv(self):
        r = self.sb.commands.run("echo out; echo err >&2")
        self.assertEqual((r.exit_code, r.stdout, r.stderr, r.signal, r.timed_out), (0, "out\n", "err\n", None, False))
        self.assertTrue(r.ok)
        r = self.sb.commands.run(["printf", "%s|", "a b", "$HOME"])
        self.assertEqual(r.stdout, "a b|$HOME|")

    def test_nonzero_exit_is_data(self):
        r = self.sb.commands.run("echo failing >&2; exit 3")
        self.assertEqual(r.exit_code, 3)
        self.assertEqual(r.stderr, "failing\n")
        self.assertFalse(r.ok)

    def test_cwd_env_stdin(self):
        self.sb.files.write("sub/keep", "")
        r = self.sb.commands.run("pwd; echo $GREETING; wc -l", cwd="sub", env={"GREETING": "hello"}, stdin="a\nb\n")
        lines = r.stdout.split()
        self.assertTrue(lines[0].endswith("/sub"), r.stdout)
        self.assertEqual(lines[1:], ["hello", "2"])

    def test_state_persists_between_commands(self):
        self.sb.commands.run("echo kept > state.txt")
        self.assertEqual(self.sb.commands.run("cat state.txt").stdout, "kept\n")

    def test_timeout(self):
        r = self.sb.commands.run(["sleep", "30"], timeout=0.5)
        self.assertTrue(r.timed_out)
        self.assertNotEqual(r.exit_code, 0)

    def test_binary_output(self):
        r = self.sb.commands.run(r"printf 'a\377b'")
        self.assertEqual(r.stdout_bytes, b"a\xffb")

    def test_split_character_reaches_callback_whole(self):
        seen = []
        r = self.sb.commands.run(r"printf '\342'; sleep 0.2; printf '\202\254\n'", on_stdout=seen.append)
        self.assertEqual(r.stdout, "\u20ac\n")
        self.assertEqual("".join(seen), "\u20ac\n")

    def test_stdin_bytes(self):
        self.assertEqual(self.sb.commands.run("cat", stdin="h\u00e9".encode()).stdout, "h\u00e9")
        with self.assertRaises(ValueError):
            self.sb.commands.run("cat", stdin=b"\xff")

    def test_cannot_start(self):
        with self.assertRaises(AgentSandboxError) as cm:
            self.sb.commands.run(["no-such-command-agentsandbox"])
        self.assertEqual(cm.exception.code, "exec_error")
        self.assertIn("no-such-command-agentsandbox", cm.exception.message)

    def test_bad_request(self):
        with self.assertRaises(TypeError):
            self.sb.commands.run([])
        with self.assertRaises(AgentSandboxError) as cm:
            self.sb.commands.run("true", timeout="soon")
        self.assertEqual((cm.exception.code, cm.exception.status), ("bad_request", 400))

    def test_streams_as_output_arrives(self):
        # The command waits for a file that the on_stdout callback writes
        # once it has seen "ready": this ends only if output is delivered
        # while the command runs.
        seen = []

        def on_stdout(text):
            seen.append(text)
            if "ready" in "".join(seen) and not self.sb.files.exists("go"):
                self.sb.files.write("go", "")

        r = self.sb.commands.run("rm -f go; echo ready; while [ ! -e go ]; do sleep 0.05; done; echo done",
                                 timeout=20, on_stdout=on_stdout)
        self.assertFalse(r.timed_out, "the output was not streamed while the command ran")
        self.assertEqual(r.stdout, "ready\ndone\n")
        self.assertEqual("".join(seen), "ready\ndone\n")

    def test_background(self):
        h = self.sb.commands.run("echo one; echo warn >&2; while [ ! -e bg-go ]; do sleep 0.05; done; echo two",
                                 background=True)
        self.assertTrue(h.id)
        deadline = time.monotonic() + 10
        o = h.output()
        while "one" not in o.stdout and time.monotonic() < deadline:
            time.sleep(0.05)
            o = h.output()
        self.assertEqual(o.stdout, "one\n")
        self.assertIsNone(o.result)
        self.assertTrue(h.info()["running"])
        self.sb.files.write("bg-go", "")
        r = h.wait()
        self.assertEqual((r.exit_code, r.stdout, r.stderr), (0, "one\ntwo\n", "warn\n"))
        rest = h.output(stdout=o.stdout_offset, stderr=o.stderr_offset)
        self.assertEqual(rest.stdout, "two\n")
        self.assertEqual(rest.stdout_offset, len("one\ntwo\n"))
        self.assertEqual(rest.result.exit_code, 0)
        self.assertEqual(self.sb.commands.connect(h.id).info()["exit"]["exitCode"], 0)

    # Slow (seconds): 256 MiB through the server and this client.
    def test_256_mib_every_byte(self):
        line = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ+/\n"
        size = 256 << 20
        want = hashlib.sha256((line * (size // len(line) + 1))[:size]).hexdigest()
        seen = hashlib.sha256()
        r = self.sb.commands.run("yes %s | head -c %d" % (line[:-1].decode(), size), timeout=600,
                                 on_stdout=lambda s: seen.update(s.encode()))
        self.assertEqual(r.exit_code, 0, r.stderr)
        self.assertEqual(len(r.stdout_bytes), size)
        self.assertEqual(hashlib.sha256(r.stdout_bytes).hexdigest(), want)
        self.assertEqual(seen.hexdigest(), want, "the callbacks did not see every byte once, in order")
        self.assertEqual(self.sb.commands.connect(r.exec_id).info()["stdoutBytes"], size)

    def test_background_signal(self):
        h = self.sb.commands.run(["sleep", "30"], background=True)
        h.signal("SIGTERM")
        r = h.wait()
        self.assertEqual(r.signal, "SIGTERM")
        with self.assertRaises(AgentSandboxError) as cm:
            h.signal("SIGNOTONE")
        self.assertIn(cm.exception.code, ("bad_request", "conflict"))


class _Lines:
    """An HTTP response of NDJSON events, for the client's stream reader alone."""

    status = 200

    def __init__(self, events):
        self._b = io.BytesIO(b"".join(json.dumps(e).encode() + b"\n" for e in events))

    def readline(self):
        return self._b.readline()

    def close(self):
        pass


class OutputGapTest(unittest.TestCase):
    """Output the server says it did not send (a gap event), or skipped without saying, is an error."""

    EVENTS = [
        {"type": "stdout", "execId": "x1", "text": "abc"},
        {"type": "gap", "execId": "x1", "stream": "stdout", "offset": 3, "next": 10},
        {"type": "stdout", "execId": "x1", "offset": 10, "text": "xyz"},
        {"type": "stderr", "execId": "x1", "offset": 4, "text": "late"},
        {"type": "stdout", "execId": "x1", "offset": 12, "text": "zw"},  # "z" again, then "w"
        {"type": "exit", "execId": "x1", "exit": {"exitCode": 0}},
    ]

    def sandbox(self):
        return Sandbox("sb-1", agentsandbox.Transport(socket="/nonexistent"))

    def test_foreground(self):
        sb = self.sandbox()
        with mock.patch.object(agentsandbox.Transport, "request", return_value=_Lines(self.EVENTS)):
            with self.assertRaises(OutputGapError) as cm:
                sb.commands.run("true")
        e = cm.exception
        self.assertEqual((e.code, e.gaps), ("output_gap", [("stdout", 3, 10), ("stderr", 0, 4)]))
        self.assertIn("stdout bytes 3 to 10", str(e))
        self.assertIsInstance(e, AgentSandboxError)
        self.assertEqual((e.result.exit_code, e.result.stdout, e.result.stderr), (0, "abcxyzw", "late"))

    def test_background_output_and_wait(self):
        sb = self.sandbox()
        h = agentsandbox.CommandHandle(sb, "x1")
        with mock.patch.object(agentsandbox.Transport, "request", return_value=_Lines(self.EVENTS)):
            with self.assertRaises(OutputGapError) as cm:
                h.output(follow=True)
        self.assertEqual((cm.exception.result.stdout_offset, cm.exception.result.stderr_offset), (14, 8))
        with mock.patch.object(agentsandbox.Transport, "request", return_value=_Lines(self.EVENTS)):
            with self.assertRaises(OutputGapError) as cm:
                h.wait()
        self.assertEqual(cm.exception.result.exit_code, 0)
        # Without a gap nothing is raised, and offsets that start later are honoured.
        with mock.patch.object(agentsandbox.Transport, "request", return_value=_Lines(self.EVENTS[2:3])):
            o = h.output(stdout=10)
        self.assertEqual((o.stdout, o.stdout_offset), ("xyz", 13))


class FilesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sb = new_sandbox()

    @classmethod
    def tearDownClass(cls):
        cls.sb.kill()

    def test_write_read_stat_list_remove(self):
        f = self.sb.files
        data = bytes(range(256)) * 10
        info = f.write("dir/sub/blob.bin", data)
        self.assertEqual((info.path, info.type, info.size), ("dir/sub/blob.bin", "file", len(data)))
        self.assertRegex(info.sha256, r"^[0-9a-f]{64}$")
        self.assertEqual(f.read("dir/sub/blob.bin"), data)
        f.write("dir/run.sh", "#!/bin/sh\necho ran\n", mode=0o755)
        self.assertEqual(f.stat("dir/run.sh").mode, "0755")
        self.assertEqual(self.sb.commands.run("./dir/run.sh").stdout, "ran\n")
        self.assertEqual(f.read_text("/workspace/dir/run.sh"), "#!/bin/sh\necho ran\n")
        names = sorted((e.name, e.type) for e in f.list("dir"))
        self.assertEqual(names, [("run.sh", "file"), ("sub", "dir")])
        self.assertIn("dir", [e.name for e in f.list()])
        with self.assertRaises(AgentSandboxError) as cm:
            f.remove("dir")
        self.assertEqual(cm.exception.status // 100, 4)
        f.remove("dir/run.sh")
        self.assertFalse(f.exists("dir/run.sh"))
        f.remove("dir", recursive=True)
        self.assertFalse(f.exists("dir"))

    def test_read_checks_the_sha256_trailer(self):
        import hashlib
        data = os.urandom(100000)
        self.sb.files.write("trailer.bin", data)
        resp = self.sb._t.request("GET", self.sb.files._path("files", "trailer.bin"))
        try:
            self.assertEqual(resp.read(), data)
        finally:
            resp.close()
        self.assertEqual((resp.trailers or {}).get("x-agentsandbox-sha256"), hashlib.sha256(data).hexdigest(),
                         "the server sends the SHA-256 of the bytes as the trailer it declares")
        self.assertEqual(self.sb.files.read("trailer.bin"), data)

    def test_names_that_need_quoting(self):
        name = "sp ace/q?u#e%s&t.txt"
        self.sb.files.write(name, "odd")
        self.assertEqual(self.sb.files.read_text(name), "odd")
        self.assertEqual(self.sb.commands.run(["cat", name]).stdout, "odd")

    def test_errors(self):
        f = self.sb.files
        with self.assertRaises(AgentSandboxError) as cm:
            f.read("missing.txt")
        self.assertEqual((cm.exception.code, cm.exception.status), ("not_found", 404))
        with self.assertRaises(AgentSandboxError) as cm:
            f.read("a/../../etc/passwd")
        self.assertEqual(cm.exception.code, "bad_request")
        with self.assertRaises(AgentSandboxError) as cm:
            f.write("/etc/x", "no")
        self.assertEqual(cm.exception.code, "bad_request")


class SnapshotsTest(unittest.TestCase):
    def test_snapshot_restore_fork(self):
        with new_sandbox() as sb:
            sb.files.write("a.txt", "one\n")
            sb.files.write("dir/run.sh", "#!/bin/sh\necho ran\n", mode=0o755)
            snap = sb.snapshot(label="first")
            self.assertIsInstance(snap, SnapshotInfo)
            self.assertRegex(snap.id, r"^sha256:[0-9a-f]{64}$")
            self.assertEqual((snap.sandbox, snap.label), (sb.id, "first"))
            if REAL:  # the fake does not count the NAR's bytes
                self.assertGreater(snap.size, 0)
            self.assertTrue(snap.created)
            # The same files, the same id.
            again = sb.snapshot()
            self.assertEqual((again.id, again.label), (snap.id, ""))
            self.assertEqual([(x.id, x.label) for x in sb.snapshots()], [(snap.id, "first"), (snap.id, "")])

            sb.files.write("a.txt", "two\n")
            sb.files.write("b.txt", "new\n")
            info = sb.restore(snap)
            self.assertEqual((info.id, info.state), (sb.id, "running"))
            self.assertEqual(sb.files.read_text("a.txt"), "one\n")
            self.assertFalse(sb.files.exists("b.txt"))
            self.assertEqual(sb.commands.run("./dir/run.sh").stdout, "ran\n")

            sb.files.write("a.txt", "three\n")
            with new_sandbox(from_snapshot=snap.id) as fork:
                self.assertNotEqual(fork.id, sb.id)
                self.assertEqual(fork.files.read_text("a.txt"), "one\n")
                self.assertEqual(fork.snapshots(), [])
            with new_sandbox(from_snapshot=snap) as fork:
                self.assertEqual(fork.commands.run("cat a.txt").stdout, "one\n")
            self.assertEqual(sb.files.read_text("a.txt"), "three\n")

    def test_errors(self):
        unknown = "sha256:" + "0" * 64
        with new_sandbox() as sb:
            with self.assertRaises(AgentSandboxError) as cm:
                sb.restore(unknown)
            self.assertEqual((cm.exception.code, cm.exception.status), ("not_found", 404))
            with self.assertRaises(AgentSandboxError) as cm:
                sb.restore("not-a-snapshot")
            self.assertEqual((cm.exception.code, cm.exception.status), ("bad_request", 400))
            with self.assertRaises(TypeError):
                sb.restore(None)
            # No restore while a command runs.
            snap = sb.snapshot()
            h = sb.commands.run(["sleep", "30"], background=True)
            try:
                with self.assertRaises(AgentSandboxError) as cm:
                    sb.restore(snap)
                self.assertEqual((cm.exception.code, cm.exception.status), ("conflict", 409))
            finally:
                h.kill()
                h.wait()
            sb.restore(snap)
        with self.assertRaises(AgentSandboxError) as cm:
            new_sandbox(from_snapshot=unknown)
        self.assertEqual((cm.exception.code, cm.exception.status), ("not_found", 404))


class NetworkTest(unittest.TestCase):
    def test_entries_are_checked_before_sending(self):
        sb = Sandbox("sb-000000000000", agentsandbox.Transport(socket=SOCKET))
        with self.assertRaises(ValueError):
            sb.network.grant()
        with self.assertRaises(ValueError):
            sb.network.update()
        with self.assertRaises(TypeError):
            sb.network.grant(["a.example.test:443"])

    @unittest.skipIf(REAL, "the real server changes networks")
    def test_fake_does_not_support_it(self):
        # The policy wants a bound on a sandbox that reaches the network.
        with new_sandbox(network=["a.example.test:443"], resources={"bandwidth": "100Mbit"}) as sb:
            for call in (sb.network.get, lambda: sb.network.grant("b.example.test:443"),
                         lambda: sb.network.revoke("a.example.test:443")):
                with self.assertRaises(AgentSandboxError) as cm:
                    call()
                self.assertEqual((cm.exception.code, cm.exception.status), ("not_supported_yet", 501))

    @unittest.skipUnless(REAL, "set AGENTSANDBOX_TEST_REAL=1 against the real agentsandbox serve")
    def test_grant_and_revoke(self):
        with new_sandbox(network=["a.example.test:443"], resources={"bandwidth": "100Mbit"}) as sb:
            n = sb.network.get()
            self.assertEqual(n.allow, ["a.example.test:443"])
            self.assertIsInstance(n.deny, list)
            n = sb.network.grant("*.example.test:80", "b.example.test:443", "a.example.test:443")
            self.assertEqual(sorted(n.allow), ["*.example.test:80", "a.example.test:443", "b.example.test:443"])
            n = sb.network.revoke("a.example.test:443")
            self.assertEqual(sorted(n.allow), ["*.example.test:80", "b.example.test:443"])
            n = sb.network.update(grant=["198.51.100.0/24:5432"], revoke=["*.example.test:80"])
            self.assertEqual(sorted(n.allow), ["198.51.100.0/24:5432", "b.example.test:443"])
            self.assertEqual(sorted(sb.network.get().allow), sorted(n.allow))
            with self.assertRaises(AgentSandboxError) as cm:
                sb.network.revoke("never.example.test:443")
            self.assertEqual((cm.exception.code, cm.exception.status), ("bad_request", 400))
            self.assertIn("b.example.test:443", cm.exception.message)
            with self.assertRaises(AgentSandboxError) as cm:
                sb.network.grant("no port here")
            self.assertEqual((cm.exception.code, cm.exception.status), ("bad_request", 400))
            self.assertEqual(sorted(sb.network.get().allow), ["198.51.100.0/24:5432", "b.example.test:443"])

    @unittest.skipUnless(REAL, "set AGENTSANDBOX_TEST_REAL=1 against the real agentsandbox serve")
    def test_no_network_room(self):
        with new_sandbox() as sb:
            self.assertEqual(sb.network.get().allow, [])
            with self.assertRaises(AgentSandboxError) as cm:
                sb.network.grant("a.example.test:443")
            self.assertEqual((cm.exception.code, cm.exception.status), ("conflict", 409))


WORKFLOW = """apiVersion: agentsandbox.dev/v1
kind: Workflow
name: python-client-run
steps:
  - name: build
    isolation: namespace
    run: |
      echo building
      echo built > built.txt
    outputs: [built.txt]
  - name: check
    isolation: namespace
    needs: [build]
    run: |
      echo checking >&2
      exit 4
"""


class RunWorkflowTest(unittest.TestCase):
    def test_arguments(self):
        with self.assertRaises(ValueError):
            run_workflow(socket=SOCKET)
        with self.assertRaises(ValueError):
            run_workflow(workflow="a.yaml", inline=WORKFLOW, socket=SOCKET)

    @unittest.skipIf(REAL, "the real server runs workflows")
    def test_fake_does_not_support_it(self):
        with self.assertRaises(AgentSandboxError) as cm:
            run_workflow(inline=WORKFLOW, isolation="namespace", socket=SOCKET)
        self.assertEqual((cm.exception.code, cm.exception.status), ("not_supported_yet", 501))

    @unittest.skipUnless(REAL, "set AGENTSANDBOX_TEST_REAL=1 against the real agentsandbox serve")
    def test_failed_step_is_a_result(self):
        r = run_workflow(inline=WORKFLOW, isolation="namespace", socket=SOCKET)
        self.assertEqual((r.workflow, r.status, r.ok), ("python-client-run", "failed", False), r)
        self.assertRegex(r.record, r"^[0-9a-z]{32,64}$")
        self.assertTrue(r.started and r.finished)
        self.assertEqual([(s.name, s.status) for s in r.steps], [("build", "succeeded"), ("check", "failed")])
        build, check = r.step("build"), r.step("check")
        self.assertTrue(build.ok)
        self.assertEqual((build.exit_code, build.isolation), (0, "namespace"))
        self.assertTrue(build.stdout.endswith("building\n"), build.stdout)
        self.assertEqual([o.path for o in build.outputs], ["built.txt"])
        self.assertRegex(build.outputs[0].nar_hash, r"^sha256-[A-Za-z0-9+/]{43}=$")
        self.assertGreater(build.outputs[0].nar_size, 0)
        self.assertFalse(check.ok)
        self.assertEqual((check.exit_code, check.signal), (4, None))
        self.assertIn("checking", check.stderr)
        with self.assertRaises(KeyError):
            r.step("deploy")

    @unittest.skipUnless(REAL, "set AGENTSANDBOX_TEST_REAL=1 against the real agentsandbox serve")
    def test_refused(self):
        with self.assertRaises(AgentSandboxError) as cm:
            run_workflow(workflow="ci.yaml", socket=SOCKET)
        self.assertEqual((cm.exception.code, cm.exception.status), ("bad_request", 400))
        self.assertIn("--templates", cm.exception.message)
        with self.assertRaises(AgentSandboxError) as cm:
            run_workflow(inline=WORKFLOW, isolation="bogus", socket=SOCKET)
        self.assertEqual((cm.exception.code, cm.exception.status), ("bad_request", 400))


@unittest.skipUnless(URL, "set AGENTSANDBOX_TEST_URL and AGENTSANDBOX_TEST_TOKEN to test TCP")
class TCPTest(unittest.TestCase):
    def test_token(self):
        with Sandbox.create(base_url=URL, token=TOKEN) as sb:
            self.assertEqual(sb.commands.run("echo tcp").stdout, "tcp\n")
            sb.files.write("t.txt", b"x")
            self.assertEqual(sb.files.read("t.txt"), b"x")

    def test_token_from_environment(self):
        with mock.patch.dict(os.environ, {"AGENTSANDBOX_SOCKET": "", "AGENTSANDBOX_URL": URL,
                                          "AGENTSANDBOX_TOKEN": TOKEN}):
            self.assertIsInstance(Sandbox.list(), list)

    def test_wrong_token(self):
        with self.assertRaises(AgentSandboxError) as cm:
            Sandbox.list(base_url=URL, token="wrong-token-wrong-token")
        self.assertEqual((cm.exception.code, cm.exception.status), ("unauthorized", 401))


if __name__ == "__main__":
    unittest.main()


class TrailerTest(unittest.TestCase):
    """A file read whose bytes do not hash to the server's trailer is an
    error, not data: a scripted server on a unix socket of its own answers
    with a chunked body and a trailer of its choosing."""

    def serve(self, trailer):
        import socket as socketlib
        import tempfile
        d = tempfile.mkdtemp()
        path = os.path.join(d, "s.sock")
        srv = socketlib.socket(socketlib.AF_UNIX, socketlib.SOCK_STREAM)
        srv.bind(path)
        srv.listen(1)
        self.addCleanup(srv.close)

        def answer():
            conn, _ = srv.accept()
            with conn:
                buf = b""
                while b"\r\n\r\n" not in buf:
                    buf += conn.recv(4096)
                head = b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n" \
                       b"Trailer: X-Agentsandbox-Sha256\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                body = b"5\r\nhello\r\n0\r\n" + trailer + b"\r\n"
                conn.sendall(head + body)
        threading.Thread(target=answer, daemon=True).start()
        return agentsandbox.Sandbox("sb-1", agentsandbox.Transport(socket=path))

    def test_wrong_sha256(self):
        sb = self.serve(b"X-Agentsandbox-Sha256: " + b"0" * 64 + b"\r\n")
        with self.assertRaises(AgentSandboxError) as cm:
            sb.files.read("f")
        self.assertEqual(cm.exception.code, "integrity")
        self.assertIn("damaged", cm.exception.message)

    def test_right_sha256(self):
        import hashlib
        sb = self.serve(b"X-Agentsandbox-Sha256: " + hashlib.sha256(b"hello").hexdigest().encode() + b"\r\n")
        self.assertEqual(sb.files.read("f"), b"hello")

    def test_no_trailer_is_not_checked(self):
        sb = self.serve(b"")
        self.assertEqual(sb.files.read("f"), b"hello")
