// Tests of the client against a running server: the unix socket in
// $AGENTSANDBOX_TEST_SOCKET and/or the TCP URL in $AGENTSANDBOX_TEST_URL
// with the token in $AGENTSANDBOX_TEST_TOKEN (clients/js/js_test.go starts
// fakeserve, or the real serve as root, and sets them). Without either,
// only the pure tests run. AGENTSANDBOX_TEST_REAL=1 says the server is the
// real `agentsandbox serve`: network grants and workflow runs are tested
// for real; else they are tested to be refused with not_supported_yet, as
// the fake refuses them.
//
//   AGENTSANDBOX_TEST_SOCKET=/tmp/as.sock node --test test/

import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { describe, it, before, after } from "node:test";

import { AgentSandboxError, Sandbox, runWorkflow } from "../src/index.js";

const REAL = process.env.AGENTSANDBOX_TEST_REAL === "1";

// A workflow whose second step fails.
const WORKFLOW = `apiVersion: agentsandbox.dev/v1
kind: Workflow
name: js-client-run
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
`;

const conns = [];
if (process.env.AGENTSANDBOX_TEST_SOCKET) conns.push(["unix", { socket: process.env.AGENTSANDBOX_TEST_SOCKET }]);
if (process.env.AGENTSANDBOX_TEST_URL) {
  conns.push(["tcp", { url: process.env.AGENTSANDBOX_TEST_URL, token: process.env.AGENTSANDBOX_TEST_TOKEN }]);
}

/** Rejects with an AgentSandboxError of code (and status, when given). */
async function rejectsWith(p, code, status) {
  await assert.rejects(p, (err) => {
    assert.ok(err instanceof AgentSandboxError, `want an AgentSandboxError, got ${err}`);
    assert.equal(err.code, code, err.message);
    if (status !== undefined) assert.equal(err.status, status);
    assert.ok(err.message.length > 0);
    return true;
  });
}

for (const [name, conn] of conns) {
  describe(`client over ${name}`, () => {
    /** @type {Sandbox} */
    let sb;
    const label = { test: `js-${name}-${process.pid}` };

    before(async () => {
      sb = await Sandbox.create({ ...conn, labels: label, ttl: "10m", idleTimeout: 300 });
    });
    after(async () => {
      if (sb?.lastInfo?.state !== "stopped") await sb.kill().catch(() => {});
    });

    it("says it is healthy", async () => {
      const h = await Sandbox.health(conn);
      assert.equal(h.ok, true);
    });

    it("creates, lists by label, connects and extends", async () => {
      assert.match(sb.id, /^[A-Za-z0-9._-]+$/);
      assert.equal(sb.lastInfo.state, "running");
      assert.deepEqual(sb.lastInfo.labels, label);
      const listed = await Sandbox.list({ ...conn, labels: label });
      assert.deepEqual(listed.map((i) => i.id), [sb.id]);
      assert.deepEqual(await Sandbox.list({ ...conn, labels: { test: "no-such-label" } }), []);
      const again = await Sandbox.connect(sb.id, conn);
      assert.equal(again.id, sb.id);
      const info = await sb.extend({ ttl: "20m", idleTimeout: "10m" });
      assert.equal(info.idleTimeout, "10m0s");
    });

    it("runs a shell command and an argv; a non-zero exit is data", async () => {
      const r = await sb.exec("echo out; echo err >&2; exit 3");
      assert.equal(r.exitCode, 3);
      assert.equal(r.stdout, "out\n");
      assert.equal(r.stderr, "err\n");
      assert.equal(r.timedOut, false);
      assert.match(r.execId, /./);
      const a = await sb.exec(["printf", "%s|", "a b", "$HOME"]);
      assert.equal(a.exitCode, 0);
      assert.equal(a.stdout, "a b|$HOME|");
    });

    it("passes stdin, env and cwd", async () => {
      await sb.files.write("sub/dir/keep", "");
      const r = await sb.exec("cat; echo \"$GREETING\"; pwd", { stdin: "from stdin\n", env: { GREETING: "hello" }, cwd: "sub/dir" });
      assert.equal(r.exitCode, 0, r.stderr);
      const lines = r.stdout.split("\n");
      assert.equal(lines[0], "from stdin");
      assert.equal(lines[1], "hello");
      assert.match(lines[2], /\/sub\/dir$/);
    });

    it("streams output as it arrives", async () => {
      const seen = [];
      const t0 = Date.now();
      const r = await sb.exec("echo first; sleep 1.5; echo second", {
        onStdout: (s) => seen.push([Date.now() - t0, s]),
      });
      const done = Date.now() - t0;
      assert.equal(r.stdout, "first\nsecond\n");
      assert.equal(seen.map(([, s]) => s).join(""), "first\nsecond\n");
      assert.ok(done - seen[0][0] >= 1000, `the first line came ${seen[0][0]}ms in, the end ${done}ms: not streamed`);
    });

    // Slow (seconds): 256 MiB through the server and this client, every
    // byte counted and hashed, in the callbacks and in the result. Over the
    // unix socket only, to keep the suite's time.
    if (name === "unix") it("delivers 256 MiB of output, every byte", async () => {
      const line = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ+/\n";
      const size = 256 << 20;
      const want = createHash("sha256").update(line.repeat(Math.floor(size / line.length) + 1).slice(0, size)).digest("hex");
      const seen = createHash("sha256");
      const r = await sb.exec(`yes ${line.slice(0, -1)} | head -c ${size}`, { timeout: 600, onStdout: (s) => seen.update(s) });
      assert.equal(r.exitCode, 0, r.stderr);
      assert.equal(r.stdout.length, size);
      assert.equal(r.stdoutOffset, size);
      assert.equal(createHash("sha256").update(r.stdout).digest("hex"), want);
      assert.equal(seen.digest("hex"), want, "the callbacks did not see every byte once, in order");
    });

    it("keeps bytes that are not UTF-8", async () => {
      const r = await sb.exec(["sh", "-c", "printf 'a\\377b'"]);
      assert.equal(r.exitCode, 0);
      assert.equal(r.stdout, Buffer.from([0x61, 0xff, 0x62]).toString("utf8"));
    });

    it("says a command timed out", async () => {
      const r = await sb.exec("sleep 30", { timeout: 1 });
      assert.equal(r.timedOut, true);
      assert.notEqual(r.exitCode, 0);
    });

    it("throws exec_error for a command that cannot start", async () => {
      await rejectsWith(sb.exec(["no-such-command-agentsandbox-js"]), "exec_error");
    });

    it("runs in the background: output, wait, signal", async () => {
      const ex = await sb.exec("echo one; echo two >&2; sleep 0.5; echo three; exit 4", { background: true });
      assert.match(ex.id, /./);
      const w = await ex.wait();
      assert.equal(w.exitCode, 4);
      const out = await ex.output();
      assert.equal(out.stdout, "one\nthree\n");
      assert.equal(out.stderr, "two\n");
      assert.equal(out.exitCode, 4);
      const tail = await ex.output({ stdout: 4, stderr: out.stderrOffset });
      assert.equal(tail.stdout, "three\n");
      assert.equal(tail.stderr, "");
      const info = await ex.info();
      assert.equal(info.running, false);
      assert.equal(info.stdoutBytes, 10);

      const long = await sb.exec("echo started; exec sleep 60", { background: true });
      const got = [];
      const followed = long.output({ follow: true, onStdout: (s) => got.push(s) });
      // Signal it once it has written (a loaded machine may take a while).
      for (let i = 0; i < 600 && !(await long.info()).stdoutBytes; i++) await new Promise((r) => setTimeout(r, 50));
      await long.signal("SIGTERM");
      const f = await followed;
      assert.equal(f.signal, "SIGTERM");
      assert.equal(f.stdout, "started\n");
      assert.deepEqual(got, ["started\n"]);
      assert.equal((await long.wait()).signal, "SIGTERM");
      await rejectsWith(sb.getExec("ex-no-such").info(), "not_found", 404);
    });

    it("writes, reads, stats, lists and removes files", async () => {
      const info = await sb.files.write("src/main.sh", "echo hi\n", { mode: 0o755 });
      assert.equal(info.path, "src/main.sh");
      assert.equal(info.size, 8);
      assert.equal(info.mode, "0755");
      assert.match(info.sha256, /^[0-9a-f]{64}$/);
      assert.equal(await sb.files.readText("src/main.sh"), "echo hi\n");
      const bin = Buffer.from([0, 1, 2, 255, 254]);
      await sb.files.write("src/data.bin", bin);
      assert.deepEqual(await sb.files.read("src/data.bin"), bin);
      await sb.files.write("src/with space & ?.txt", new TextEncoder().encode("odd name"));
      assert.equal(await sb.files.readText("src/with space & ?.txt"), "odd name");
      await sb.files.write("src/ab", new Uint8Array([7, 8, 9]).buffer);
      assert.deepEqual(await sb.files.read("src/ab"), Buffer.from([7, 8, 9]));
      await sb.files.remove("src/ab");

      const st = await sb.files.stat("src");
      assert.equal(st.type, "dir");
      const names = (await sb.files.list("src")).map((f) => f.path).sort();
      assert.deepEqual(names, ["src/data.bin", "src/main.sh", "src/with space & ?.txt"]);
      assert.ok((await sb.files.list()).some((f) => f.path === "src" && f.type === "dir"));
      assert.equal((await sb.exec("./src/main.sh")).stdout, "hi\n");

      assert.equal(await sb.files.exists("src/main.sh"), true);
      await sb.files.remove("src/main.sh");
      assert.equal(await sb.files.exists("src/main.sh"), false);
      await assert.rejects(sb.files.remove("src"), AgentSandboxError);
      await sb.files.remove("src", { recursive: true });
      assert.equal(await sb.files.exists("src"), false);

      await rejectsWith(sb.files.read("missing.txt"), "not_found", 404);
      await rejectsWith(sb.files.read("../etc/passwd"), "bad_request", 400);
    });

    it("gets the sha256 of a file read as the trailer and checks it", async () => {
      const data = Buffer.alloc(100000, "xyz");
      await sb.files.write("trailer.bin", data);
      const res = await sb._t.request("GET", `/v1/sandboxes/${sb.id}/files/trailer.bin`);
      const chunks = [];
      for await (const c of res) chunks.push(c);
      assert.deepEqual(Buffer.concat(chunks), data);
      assert.equal(res.trailers["x-agentsandbox-sha256"], createHash("sha256").update(data).digest("hex"),
        "the server sends the SHA-256 of the bytes as the trailer it declares");
      assert.deepEqual(await sb.files.read("trailer.bin"), data);
    });

    it("snapshots, restores and forks", async () => {
      const s = await Sandbox.create({ ...conn, labels: { test: `js-snap-${process.pid}` } });
      try {
        await s.files.write("a.txt", "one\n");
        await s.files.write("bin/run.sh", "#!/bin/sh\necho ran\n", { mode: 0o755 });
        const snap = await s.snapshot("first");
        assert.match(snap.id, /^sha256:[0-9a-f]{64}$/);
        assert.equal(snap.sandbox, s.id);
        assert.equal(snap.label, "first");
        if (REAL) assert.ok(snap.size > 0, `size ${snap.size}`); // the fake does not count the NAR's bytes
        const again = await s.snapshot();
        assert.equal(again.id, snap.id, "the same files, the same id");
        assert.deepEqual((await s.snapshots()).map((x) => [x.id, x.label ?? ""]), [[snap.id, "first"], [snap.id, ""]]);

        await s.files.write("a.txt", "two\n");
        await s.files.write("b.txt", "new\n");
        const info = await s.restore(snap);
        assert.equal(info.id, s.id);
        assert.equal(info.state, "running");
        assert.equal(s.lastInfo, info);
        assert.equal(await s.files.readText("a.txt"), "one\n");
        assert.equal(await s.files.exists("b.txt"), false);
        assert.equal((await s.exec("./bin/run.sh")).stdout, "ran\n");

        await s.files.write("a.txt", "three\n");
        for (const from of [snap, snap.id]) {
          const fork = await Sandbox.create({ ...conn, fromSnapshot: from, labels: { test: `js-fork-${process.pid}` } });
          try {
            assert.notEqual(fork.id, s.id);
            assert.equal(await fork.files.readText("a.txt"), "one\n");
            assert.deepEqual(await fork.snapshots(), []);
          } finally {
            await fork.kill();
          }
        }
        assert.equal(await s.files.readText("a.txt"), "three\n");
      } finally {
        await s.kill();
      }
    });

    it("refuses unknown snapshots, and restoring while a command runs", async () => {
      const unknown = `sha256:${"0".repeat(64)}`;
      await rejectsWith(sb.restore(unknown), "not_found", 404);
      await rejectsWith(sb.restore("not-a-snapshot"), "bad_request", 400);
      await rejectsWith(sb.restore(undefined), "bad_request", 0);
      await rejectsWith(Sandbox.create({ ...conn, fromSnapshot: unknown }), "not_found", 404);
      const snap = await sb.snapshot();
      const ex = await sb.exec(["sleep", "30"], { background: true });
      try {
        await rejectsWith(sb.restore(snap), "conflict", 409);
      } finally {
        await ex.kill();
        await ex.wait();
      }
      await sb.restore(snap.id);
    });

    if (!REAL) {
      it("rejects network changes and workflow runs with not_supported_yet (the fake offers neither)", async () => {
        // The policy wants a bound on a sandbox that reaches the network.
        const s = await Sandbox.create({ ...conn, network: ["a.example.test:443"], resources: { bandwidth: "100Mbit" }, labels: { test: `js-net-${process.pid}` } });
        try {
          await rejectsWith(s.network.get(), "not_supported_yet", 501);
          await rejectsWith(s.network.grant("b.example.test:443"), "not_supported_yet", 501);
          await rejectsWith(s.network.revoke("a.example.test:443"), "not_supported_yet", 501);
        } finally {
          await s.kill();
        }
        await rejectsWith(runWorkflow({ ...conn, inline: WORKFLOW, isolation: "namespace" }), "not_supported_yet", 501);
      });
    }

    if (REAL) {
      it("grants and revokes network entries", async () => {
        const s = await Sandbox.create({
          ...conn, network: ["a.example.test:443"], resources: { bandwidth: "100Mbit" },
          labels: { test: `js-net-${process.pid}` },
        });
        try {
          const n = await s.network.get();
          assert.deepEqual(n.allow, ["a.example.test:443"]);
          assert.ok(Array.isArray(n.deny));
          let after = await s.network.grant("*.example.test:80", "b.example.test:443", "a.example.test:443");
          assert.deepEqual([...after.allow].sort(), ["*.example.test:80", "a.example.test:443", "b.example.test:443"]);
          after = await s.network.revoke("a.example.test:443");
          assert.deepEqual([...after.allow].sort(), ["*.example.test:80", "b.example.test:443"]);
          after = await s.network.update({ grant: ["198.51.100.0/24:5432"], revoke: ["*.example.test:80"] });
          assert.deepEqual([...after.allow].sort(), ["198.51.100.0/24:5432", "b.example.test:443"]);
          assert.deepEqual([...(await s.network.get()).allow].sort(), ["198.51.100.0/24:5432", "b.example.test:443"]);
          await rejectsWith(s.network.revoke("never.example.test:443"), "bad_request", 400);
          await rejectsWith(s.network.grant("no port here"), "bad_request", 400);
          assert.deepEqual([...(await s.network.get()).allow].sort(), ["198.51.100.0/24:5432", "b.example.test:443"]);
        } finally {
          await s.kill();
        }
      });

      it("has no network to grant to a sandbox created without entries: conflict", async () => {
        assert.deepEqual((await sb.network.get()).allow, []);
        await rejectsWith(sb.network.grant("a.example.test:443"), "conflict", 409);
      });

      it("runs a workflow: a failed step is a result, not a rejection", async () => {
        const r = await runWorkflow({ ...conn, inline: WORKFLOW, isolation: "namespace" });
        assert.equal(r.workflow, "js-client-run");
        assert.equal(r.status, "failed");
        assert.equal(r.ok, false);
        assert.match(r.record, /^[0-9a-z]{32,64}$/);
        assert.deepEqual(r.steps.map((st) => [st.name, st.status]), [["build", "succeeded"], ["check", "failed"]]);
        const [build, check] = r.steps;
        assert.equal(build.exitCode, 0);
        assert.equal(build.isolation, "namespace");
        assert.match(build.stdout, /building\n$/);
        assert.deepEqual(build.outputs.map((o) => o.path), ["built.txt"]);
        assert.match(build.outputs[0].narHash, /^sha256-[A-Za-z0-9+/]{43}=$/);
        assert.ok(build.outputs[0].narSize > 0);
        assert.equal(check.exitCode, 4);
        assert.equal(check.signal, undefined);
        assert.match(check.stderr, /checking/);
        await rejectsWith(runWorkflow({ ...conn, workflow: "ci.yaml" }), "bad_request", 400);
        await rejectsWith(runWorkflow({ ...conn, inline: WORKFLOW, isolation: "bogus" }), "bad_request", 400);
      });
    }

    it("kills: the record id, then conflict or not_found", async () => {
      const other = await Sandbox.create({ ...conn, labels: { test: `js-kill-${process.pid}` } });
      const record = await other.kill();
      assert.match(record, /^[0-9a-z]{32,64}$/);
      assert.equal(other.lastInfo.state, "stopped");
      await assert.rejects(other.exec("true"), (err) => {
        assert.ok(err instanceof AgentSandboxError);
        assert.ok(["conflict", "not_found"].includes(err.code), err.code);
        return true;
      });
    });

    it("answers not_found for an unknown sandbox", async () => {
      await rejectsWith(Sandbox.connect("sb-000000000000", conn), "not_found", 404);
    });
  });
}

if (process.env.AGENTSANDBOX_TEST_URL) {
  it("refuses TCP without the token: unauthorized", async () => {
    await rejectsWith(Sandbox.list({ url: process.env.AGENTSANDBOX_TEST_URL, token: "wrong-token" }), "unauthorized", 401);
  });
}

it("says a server it cannot reach is unavailable, and what to do", async () => {
  await assert.rejects(Sandbox.list({ socket: "/nonexistent/agentsandbox-js-test.sock" }), (err) => {
    assert.ok(err instanceof AgentSandboxError);
    assert.equal(err.code, "unavailable");
    assert.equal(err.status, 0);
    assert.match(err.message, /agentsandbox serve/);
    assert.match(err.message, /AGENTSANDBOX_SOCKET/);
    return true;
  });
});

it("checks network entries and run arguments before sending", async () => {
  const sb = new Sandbox("sb-000000000000", null);
  await rejectsWith(sb.network.grant(), "bad_request", 0);
  await rejectsWith(sb.network.update({}), "bad_request", 0);
  await rejectsWith(sb.network.grant(["a.example.test:443"]), "bad_request", 0);
  await rejectsWith(runWorkflow({ socket: "/nonexistent.sock" }), "bad_request", 0);
  await rejectsWith(runWorkflow({ socket: "/nonexistent.sock", workflow: "a.yaml", inline: WORKFLOW }), "bad_request", 0);
});
