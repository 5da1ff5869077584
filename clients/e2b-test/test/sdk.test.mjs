// The unmodified e2b SDK (pinned in package-lock.json) against
// `agentsandbox serve`'s E2B transport (server/e2b, docs/e2b.md).
// E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY point it at the server;
// clients/e2b-test/e2b_test.go starts the server and runs this suite.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, CommandExitError, AuthenticationError, SandboxError, SandboxNotFoundError } from 'e2b'

for (const v of ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY']) {
  if (!process.env[v]) throw new Error(`${v} is not set: run this suite with go test ./clients/e2b-test/`)
}

test('a sandbox: run, fail, files, list, timeout, kill', async () => {
  const sbx = await Sandbox.create({ metadata: { suite: 'e2b-test', run: String(process.pid) }, envs: { GREETING: 'hello' } })
  try {
    assert.match(sbx.sandboxId, /^[0-9a-z-]{1,63}$/)

    const hi = await sbx.commands.run('echo hi')
    assert.equal(hi.exitCode, 0)
    assert.equal(hi.stdout, 'hi\n')
    assert.equal(hi.stderr, '')

    const env = await sbx.commands.run('echo "$GREETING $EXTRA" >&2', { envs: { EXTRA: 'world' } })
    assert.equal(env.stderr, 'hello world\n')

    await assert.rejects(sbx.commands.run('echo oops >&2; exit 3'), (err) => {
      assert.ok(err instanceof CommandExitError, `want CommandExitError, got ${err}`)
      assert.equal(err.exitCode, 3)
      assert.equal(err.stderr, 'oops\n')
      return true
    })

    // The agent loop: write code, run it, read the failure, fix it, rerun.
    await sbx.files.write('/home/user/src/app.sh', 'echo "sum=$((1 + ))"\n')
    const broken = await sbx.commands.run('bash src/app.sh').catch((e) => e)
    assert.ok(broken instanceof CommandExitError)
    assert.notEqual(broken.exitCode, 0)
    await sbx.files.write('src/app.sh', 'echo "sum=$((1 + 2))" > out.txt\n')
    const fixed = await sbx.commands.run('bash src/app.sh', { cwd: '/home/user' })
    assert.equal(fixed.exitCode, 0)
    assert.equal(await sbx.files.read('/home/user/out.txt'), 'sum=3\n')

    const written = await sbx.files.write([{ path: 'a.txt', data: 'A' }, { path: '/home/user/d/b.txt', data: 'BB' }])
    assert.deepEqual(written.map((w) => w.path), ['/home/user/a.txt', '/home/user/d/b.txt'])
    const bytes = await sbx.files.read('d/b.txt', { format: 'bytes' })
    assert.deepEqual(Array.from(bytes), [66, 66])
    await sbx.files.write('empty.txt', '')
    assert.equal(await sbx.files.read('empty.txt'), '')
    // The octet-stream and gzip uploads (envd 0.5.7), a streamed one, a
    // gzip read, and a file of 3 MiB byte for byte.
    await sbx.files.write('gz.txt', 'zipped', { gzip: true })
    assert.equal(await sbx.files.read('gz.txt', { gzip: true }), 'zipped')
    await sbx.files.write('raw.txt', 'raw', { useOctetStream: true })
    assert.equal(await sbx.files.read('raw.txt'), 'raw')
    await sbx.files.write('streamed.txt', new Blob(['stre', 'amed']).stream())
    assert.equal(await sbx.files.read('streamed.txt'), 'streamed')
    const big = new Uint8Array(3 << 20).map((_, i) => (i * 7) & 0xff)
    await sbx.files.write('big.bin', big)
    assert.deepEqual(await sbx.files.read('big.bin', { format: 'bytes' }), big)

    const names = (await sbx.files.list('/home/user')).map((e) => e.name).sort()
    for (const n of ['a.txt', 'd', 'out.txt', 'src']) assert.ok(names.includes(n), `${n} not in ${names}`)
    const deep = (await sbx.files.list('/home/user', { depth: 2 })).map((e) => e.path)
    assert.ok(deep.includes('/home/user/d/b.txt'), `depth 2: ${deep}`)
    const info = await sbx.files.getInfo('a.txt')
    assert.equal(info.type, 'file')
    assert.equal(info.size, 1)
    assert.equal(await sbx.files.exists('a.txt'), true)
    await sbx.files.remove('a.txt')
    assert.equal(await sbx.files.exists('a.txt'), false)

    // A path outside the workspace is refused, and ../ does not leave it.
    await assert.rejects(sbx.files.read('/etc/passwd'))
    await assert.rejects(sbx.files.read('../../etc/passwd'))
    await assert.rejects(sbx.files.write('/home/user/../x.txt', 'x'))

    const bg = await sbx.commands.run('sleep 30', { background: true })
    assert.ok(bg.pid > 0)
    const procs = await sbx.commands.list()
    assert.ok(procs.some((p) => p.pid === bg.pid && p.cmd === '/bin/bash'), JSON.stringify(procs))
    assert.equal(await sbx.commands.kill(bg.pid), true)
    const killed = await bg.wait().catch((e) => e)
    assert.ok(killed instanceof CommandExitError, `the killed command: ${killed}`)
    assert.equal(await sbx.commands.kill(bg.pid), false)

    const listed = await Sandbox.list({ query: { metadata: { run: String(process.pid) } } }).nextItems()
    assert.deepEqual(listed.map((s) => s.sandboxId), [sbx.sandboxId])
    assert.equal(listed[0].metadata.suite, 'e2b-test')
    const none = await Sandbox.list({ query: { metadata: { run: 'nobody' } } }).nextItems()
    assert.deepEqual(none, [])

    await sbx.setTimeout(600_000)
    const detail = await sbx.getInfo()
    const left = new Date(detail.endAt).getTime() - Date.now()
    assert.ok(left > 500_000 && left <= 600_000, `endAt ${detail.endAt} is ${left} ms away`)
    assert.equal(await sbx.isRunning(), true)
  } finally {
    assert.equal(await sbx.kill(), true)
  }
  assert.equal(await sbx.isRunning(), false)
  assert.equal(await Sandbox.kill(sbx.sandboxId), false)
  await assert.rejects(sbx.commands.run('echo hi'), (err) => {
    assert.ok(!(err instanceof AuthenticationError), `a killed sandbox's command: ${err}`)
    assert.match(err.message, /is not running/)
    return true
  })
})

test('refusals: a wrong API key, a wrong or missing access token', async () => {
  await assert.rejects(Sandbox.create({ apiKey: 'not-the-key-0123456789' }), AuthenticationError)
  const sbx = await Sandbox.create()
  try {
    const url = process.env.E2B_SANDBOX_URL
    const rpc = (headers) => fetch(new URL('/process.Process/List', url), {
      method: 'POST', body: '{}',
      headers: { 'Content-Type': 'application/json', 'Connect-Protocol-Version': '1', 'E2b-Sandbox-Id': sbx.sandboxId, ...headers },
    })
    const missing = await rpc({})
    assert.equal(missing.status, 401)
    assert.equal((await missing.json()).code, 'unauthenticated')
    const wrong = await rpc({ 'X-Access-Token': 'wrong' })
    assert.equal(wrong.status, 401)
    const read = await fetch(new URL(`/files?path=x`, url), { headers: { 'E2b-Sandbox-Id': sbx.sandboxId } })
    assert.equal(read.status, 401)
    // The SDK with another sandbox's token: a sandbox made for it.
    const other = await Sandbox.create()
    try {
      const mixed = await fetch(new URL('/process.Process/List', url), {
        method: 'POST', body: '{}',
        headers: { 'Content-Type': 'application/json', 'E2b-Sandbox-Id': sbx.sandboxId, 'X-Access-Token': other.envdAccessToken },
      })
      assert.equal(mixed.status, 401)
    } finally {
      await other.kill()
    }
    const ok = await rpc({ 'X-Access-Token': sbx.envdAccessToken })
    assert.equal(ok.status, 200)
    // A route not built answers E2B's 501.
    await assert.rejects(sbx.pause(), (err) => err instanceof SandboxError && /501/.test(err.message) && /not built yet/.test(err.message))
  } finally {
    await sbx.kill()
  }
})

test('connect: a sandbox again, and a running command reattached', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 120_000 })
  try {
    const again = await Sandbox.connect(sbx.sandboxId)
    assert.equal((await again.commands.run('echo again')).stdout, 'again\n')
    const bg = await sbx.commands.run('sleep 1; echo late', { background: true })
    const re = await again.commands.connect(bg.pid)
    assert.equal(re.pid, bg.pid)
    assert.equal((await re.wait()).stdout, 'late\n')
    assert.equal((await bg.wait()).stdout, 'late\n')
    await assert.rejects(again.commands.connect(bg.pid))
    // connect extends a lifetime, never shortens it.
    const before = new Date((await sbx.getInfo()).endAt).getTime()
    await Sandbox.connect(sbx.sandboxId, { timeoutMs: 10_000 })
    assert.equal(new Date((await sbx.getInfo()).endAt).getTime(), before)
  } finally {
    await sbx.kill()
  }
  await assert.rejects(Sandbox.connect(sbx.sandboxId), SandboxNotFoundError)
})

test('the policy judges E2B\'s actions (testdata/policy.rego)', async () => {
  const sbx = await Sandbox.create()
  try {
    await sbx.files.write('secret/key.txt', 'k')
    await assert.rejects(sbx.files.read('secret/key.txt'), (err) => {
      assert.match(err.message, /agents may not read secret\//)
      return true
    })
    await assert.rejects(sbx.commands.run('echo forbidden-word'), (err) => {
      assert.ok(!(err instanceof CommandExitError), `a denied command is not an exit: ${err}`)
      assert.match(err.message, /permission_denied.*commands may not say forbidden-word/)
      return true
    })
    assert.equal((await sbx.commands.run('echo allowed')).stdout, 'allowed\n')
  } finally {
    await sbx.kill()
  }
})

test('snapshots and forks: the workspace, into new sandboxes', async () => {
  const sbx = await Sandbox.create({ metadata: { forks: String(process.pid) } })
  const made = [sbx]
  try {
    await sbx.files.write('state.txt', 'v1')
    const snap = await sbx.createSnapshot({ name: 'v1' })
    assert.match(snap.snapshotId, /^sha256:[0-9a-f]{64}$/)
    assert.deepEqual(snap.names, ['v1'])
    const listed = await Sandbox.listSnapshots({ sandboxId: sbx.sandboxId }).nextItems()
    assert.deepEqual(listed.map((s) => s.snapshotId), [snap.snapshotId])
    await sbx.files.write('state.txt', 'v2')

    const from = await Sandbox.create(snap.snapshotId)
    made.push(from)
    assert.equal(await from.files.read('state.txt'), 'v1')

    const forks = await sbx.fork({ count: 2, timeoutMs: 60_000 })
    assert.equal(forks.length, 2)
    for (const f of forks) {
      assert.ok(!(f instanceof Error), `a fork failed: ${f}`)
      made.push(f)
      assert.notEqual(f.sandboxId, sbx.sandboxId)
      assert.equal((await f.commands.run('cat state.txt')).stdout, 'v2')
    }
  } finally {
    for (const s of made) await s.kill()
  }
})
