// The unmodified e2b SDK driving a VM sandbox: the template vm.yaml#box
// (isolation: vm) of the server's --templates, run as the VM test fixture's
// runner (Debian's kernel, the static agent as init) under TCG.
// clients/e2b-test/vm_root_test.go starts the server and runs this file.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, CommandExitError } from 'e2b'

for (const v of ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY', 'HOST_KERNEL']) {
  if (!process.env[v]) throw new Error(`${v} is not set: run this file with go test ./clients/e2b-test/ -run TestE2BSDKVM`)
}

test('a VM sandbox through the SDK: the agent loop, files, a background command, kill', async () => {
  const sbx = await Sandbox.create('vm.yaml#box', { timeoutMs: 120_000, metadata: { suite: 'e2b-vm' } })
  try {
    // Its own kernel, not the host's.
    const uname = await sbx.commands.run('uname -r')
    assert.equal(uname.exitCode, 0)
    assert.notEqual(uname.stdout.trim(), process.env.HOST_KERNEL)
    assert.equal((await sbx.commands.run('id -u')).stdout, '65534\n')

    // The agent loop: write code, run it, read the failure, fix it, rerun, read a file.
    await sbx.files.write('/home/user/src/app.sh', 'echo "sum=$((1 + ))"\n')
    const broken = await sbx.commands.run('bash src/app.sh').catch((e) => e)
    assert.ok(broken instanceof CommandExitError, `want CommandExitError, got ${broken}`)
    assert.match(broken.stderr, /syntax error|operand expected/)
    await sbx.files.write('src/app.sh', 'echo "sum=$((1 + 2))" > out.txt\n')
    const fixed = await sbx.commands.run('bash src/app.sh')
    assert.equal(fixed.exitCode, 0)
    assert.equal(await sbx.files.read('/home/user/out.txt'), 'sum=3\n')
    const listed = await sbx.files.list('/home/user')
    assert.ok(listed.some((e) => e.name === 'out.txt' && e.type === 'file'), JSON.stringify(listed))

    // A background command, listed, then killed.
    const bg = await sbx.commands.run('while :; do sleep 1; done', { background: true })
    assert.ok((await sbx.commands.list()).some((p) => p.pid === bg.pid))
    assert.equal(await sbx.commands.kill(bg.pid), true)
    const ended = await bg.wait().catch((e) => e)
    assert.ok(ended instanceof CommandExitError)

    assert.equal(await sbx.isRunning(), true)
  } finally {
    assert.equal(await sbx.kill(), true)
  }
  assert.equal(await sbx.isRunning(), false)
})
