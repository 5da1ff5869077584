// Interactive stdin through the unmodified e2b SDK: a background command
// started with stdin: true reads what sendStdin sends and exits once
// closeStdin is called; a pty (pty.create) has the size asked for, a
// resize changes it, and what is typed is run.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'

test('stdin: sendStdin, closeStdin; a pty: size, resize, input', async () => {
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

    // A pty of the sandbox's own devpts: its size, a resize, input echoed.
    let shown = ''
    const dec = new TextDecoder()
    const term = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { shown += dec.decode(d) } })
    await sbx.pty.sendInput(term.pid, new TextEncoder().encode('tty; stty size\n'))
    for (let i = 0; i < 200 && !/24 80/.test(shown); i++) await new Promise((r) => setTimeout(r, 25))
    assert.match(shown, /\/dev\/pts\/\d+/)
    assert.match(shown, /24 80/)
    await sbx.pty.resize(term.pid, { cols: 100, rows: 30 })
    await sbx.pty.sendInput(term.pid, new TextEncoder().encode('stty size; echo mark-$((6*7))\n'))
    for (let i = 0; i < 200 && !/mark-42/.test(shown); i++) await new Promise((r) => setTimeout(r, 25))
    assert.match(shown, /30 100/)
    assert.match(shown, /mark-42/)
    assert.ok(await sbx.pty.kill(term.pid))
  } finally {
    await sbx.kill()
    await other.kill()
  }
})
