// The rest of envd's filesystem service through the unmodified SDK:
// makeDir, rename, watchDir, getInfo's owner, group and symlink target,
// and the signed URLs of uploadUrl()/downloadUrl() used with plain fetch
// (server/e2b/files_dirs.go, files_signed.go; docs/e2b.md).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, FileNotFoundError, InvalidArgumentError } from 'e2b'

for (const v of ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY']) {
  if (!process.env[v]) throw new Error(`${v} is not set: run this suite with go test ./clients/e2b-test/`)
}

// until resolves once check() holds, polling for up to 10 s.
async function until(what, check) {
  const end = Date.now() + 10_000
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 20))
  }
}

test('makeDir, rename, getInfo, watchDir', async () => {
  const sbx = await Sandbox.create({ metadata: { suite: 'e2b-test-files2' } })
  try {
    assert.equal(await sbx.files.makeDir('/home/user/proj/src'), true)
    assert.equal(await sbx.files.makeDir('proj/src'), false)
    const made = await sbx.files.getInfo('proj/src')
    assert.equal(made.type, 'dir')
    assert.equal(made.owner, 'user')
    assert.equal(made.group, 'user')
    assert.equal(made.permissions, 'drwxr-xr-x')
    // The job sees it as its own.
    const owner = await sbx.commands.run('stat -c %u proj/src')
    assert.equal(owner.stdout.trim(), '65534')

    await sbx.files.write('proj/a.txt', 'A')
    const moved = await sbx.files.rename('proj/a.txt', '/home/user/proj/src/b.txt')
    assert.equal(moved.path, '/home/user/proj/src/b.txt')
    assert.equal(moved.type, 'file')
    assert.equal(await sbx.files.read('proj/src/b.txt'), 'A')
    assert.equal(await sbx.files.exists('proj/a.txt'), false)
    await assert.rejects(sbx.files.rename('nope', 'x'), FileNotFoundError)

    // A symlink: its target as written, never followed.
    await sbx.commands.run('ln -s /etc/passwd proj/pw')
    const link = await sbx.files.getInfo('proj/pw')
    assert.equal(link.type, 'symlink')
    assert.equal(link.symlinkTarget, '/etc/passwd')

    // The attacker's view: out by name or through the job's symlink.
    await sbx.commands.run('ln -s / proj/root')
    for (const [what, call] of [
      ['mkdir ../', () => sbx.files.makeDir('../../escape')],
      ['mkdir /tmp', () => sbx.files.makeDir('/tmp/escape')],
      ['mkdir through a symlink', () => sbx.files.makeDir('proj/root/tmp/escape')],
      ['rename to ../', () => sbx.files.rename('proj/src/b.txt', '../b.txt')],
      ['rename through a symlink', () => sbx.files.rename('proj/src/b.txt', 'proj/root/tmp/b.txt')],
      ['rename out of a symlink', () => sbx.files.rename('proj/root/etc/hostname', 'h')],
      ['watch through a symlink', () => sbx.files.watchDir('proj/root/etc', () => {})],
      ['watch /etc', () => sbx.files.watchDir('/etc', () => {})],
    ]) {
      await assert.rejects(call(), InvalidArgumentError, what)
    }
    const escaped = await sbx.commands.run('ls /tmp/escape /tmp/b.txt 2>&1 || true')
    assert.match(escaped.stdout, /No such file/)

    // watchDir: a write and a remove, by the SDK and by a command.
    const events = []
    const handle = await sbx.files.watchDir('proj', (e) => events.push(`${e.type} ${e.name}`), { recursive: true })
    try {
      await sbx.files.write('proj/src/new.txt', 'new')
      await until('create src/new.txt', () => events.includes('create src/new.txt'))
      await sbx.commands.run('echo more >> proj/src/new.txt')
      await until('write src/new.txt', () => events.includes('write src/new.txt'))
      await sbx.files.remove('proj/src/new.txt')
      await until('remove src/new.txt', () => events.includes('remove src/new.txt'))
      await sbx.files.rename('proj/src/b.txt', 'proj/c.txt')
      await until('the rename', () => events.includes('rename src/b.txt') && events.includes('create c.txt'))
    } finally {
      await handle.stop()
    }
  } finally {
    await sbx.kill()
  }
})

test('uploadUrl and downloadUrl with plain fetch; tampered, expired and foreign signatures refused', async () => {
  const sbx = await Sandbox.create({ secure: true, metadata: { suite: 'e2b-test-files2' } })
  const other = await Sandbox.create({ secure: true, metadata: { suite: 'e2b-test-files2' } })
  // Served on one address, the URL names no sandbox: fetch names it with
  // E2b-Sandbox-Id (no token), as E2B's {port}-{id} host form would.
  const headers = { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49983' }
  const fetch = (u, o = {}) => globalThis.fetch(u, { ...o, headers })
  try {
    const up = await sbx.uploadUrl('/home/user/up.txt', { useSignatureExpiration: 60 })
    const u = new URL(up)
    assert.match(u.searchParams.get('signature'), /^v1_[A-Za-z0-9+/]+$/)
    assert.ok(Number(u.searchParams.get('signature_expiration')) > Date.now() / 1000)
    const form = new FormData()
    form.append('file', new Blob(['via url']), '/home/user/up.txt')
    const put = await fetch(up, { method: 'POST', body: form })
    assert.equal(put.status, 200, await put.clone().text())
    assert.equal(await sbx.files.read('up.txt'), 'via url')

    const down = await sbx.downloadUrl('/home/user/up.txt')
    const got = await fetch(down)
    assert.equal(got.status, 200)
    assert.equal(await got.text(), 'via url')

    // The write's signature does not read, nor the read's write.
    assert.equal((await fetch(up)).status, 401)
    assert.equal((await fetch(down, { method: 'POST', body: form })).status, 401)
    // Another path, another sandbox, tampered, expired.
    const otherPath = new URL(down)
    otherPath.searchParams.set('path', '/home/user/secret.txt')
    assert.equal((await fetch(otherPath)).status, 401)
    const foreign = new URL(await other.downloadUrl('/home/user/up.txt'))
    const swapped = new URL(down)
    swapped.searchParams.set('signature', foreign.searchParams.get('signature'))
    assert.equal((await fetch(swapped)).status, 401)
    const tampered = new URL(down)
    const sig = tampered.searchParams.get('signature')
    tampered.searchParams.set('signature', sig.slice(0, -1) + (sig.endsWith('A') ? 'B' : 'A'))
    assert.equal((await fetch(tampered)).status, 401)
    const expired = new URL(await sbx.downloadUrl('/home/user/up.txt', { useSignatureExpiration: -5 }))
    assert.equal((await fetch(expired)).status, 401)
    const extended = new URL(up)
    extended.searchParams.set('signature_expiration', String(Math.floor(Date.now() / 1000) + 3600))
    assert.equal((await fetch(extended, { method: 'POST', body: form })).status, 401)
    assert.equal(await sbx.files.read('up.txt'), 'via url')
  } finally {
    await sbx.kill()
    await other.kill()
  }
})
