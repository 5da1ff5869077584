// Interactive stdin through the unmodified e2b SDK: a background command
// started with stdin: true reads what sendStdin sends and exits once
// closeStdin is called. A pty is not built yet: pty.create says so.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, SandboxError } from 'e2b'

test('stdin: sendStdin, closeStdin; a pty is refused as not built', async () => {
  const sbx = await Sandbox.create({ metadata: { suite: 'e2b-test-stdin', run: String(process.pid) } })
  const other = await Sandbox.create({ metadata: { suite: 'e2b-test-stdin', run: String(process.pid) } })
  try {
    let seen = ''
    const cat = await sbx.commands.run('cat', { background: true, stdin: true, onStdout: (d) => { seen += d } })
    await sbx.commands.sendStdin(cat.pid, 'hello ')
    await sbx.commands.sendStdin(cat.pid, new TextEncoder().encode('world\n'))
    // Another sandbox has no such pid of its own to write to.
    await assert.rejects(other.commands.sendStdin(cat.pid, 'intruder\n'), /not found/)
    await sbx.commands.closeStdin(cat.pid)
    const done = await cat.wait()
    assert.equal(done.exitCode, 0)
    assert.equal(done.stdout, 'hello world\n')
    assert.equal(seen, 'hello world\n')
    // A command that has ended takes no more input.
    await assert.rejects(sbx.commands.sendStdin(cat.pid, 'late\n'), /not found|ended/)

    await assert.rejects(sbx.pty.create({ cols: 80, rows: 24, onData: () => {} }), (err) => {
      assert.ok(err instanceof SandboxError, `want SandboxError, got ${err}`)
      assert.match(err.message, /not built yet/)
      return true
    })
  } finally {
    await sbx.kill()
    await other.kill()
  }
})
