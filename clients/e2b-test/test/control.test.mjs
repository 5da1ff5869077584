// The control options of the unmodified e2b SDK against serve's E2B
// transport (docs/e2b.md): the user, and the network at create.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, SandboxError } from 'e2b'

test('user: the default and "user" run; root is refused', async () => {
  const sbx = await Sandbox.create()
  try {
    assert.equal((await sbx.commands.run('id -u')).exitCode, 0)
    assert.equal((await sbx.commands.run('true', { user: 'user' })).exitCode, 0)
    await sbx.files.write('u.txt', 'x', { user: 'user' })
    await assert.rejects(sbx.commands.run('id -u', { user: 'root' }), (err) => {
      assert.match(String(err), /no root/)
      return true
    })
    await assert.rejects(sbx.files.write('r.txt', 'x', { user: 'root' }), (err) => {
      assert.match(String(err), /no root/)
      return true
    })
  } finally {
    await sbx.kill()
  }
})

test('network: open egress is what the policy refuses; denyOut beside it is not built', async () => {
  await assert.rejects(Sandbox.create({ allowInternetAccess: true }), (err) => {
    assert.ok(err instanceof SandboxError, `want SandboxError, got ${err}`)
    assert.match(String(err), /403|open|0\.0\.0\.0\/0/)
    return true
  })
  await assert.rejects(Sandbox.create({ allowInternetAccess: true, network: { denyOut: ['10.0.0.1'] } }), /not built yet/)
})
