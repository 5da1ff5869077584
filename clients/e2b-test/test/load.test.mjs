// A bounded load through the SDK: 50 sandboxes and 1,000 commands, 8 at
// a time, no failure, nothing left afterwards, within 2 minutes.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'

test('load: 50 sandboxes, 1,000 commands, 0 failures, nothing left', { timeout: 120_000 }, async () => {
  const sandboxes = 50, perSandbox = 20, atOnce = 8
  const label = { load: String(process.pid) }
  const failures = []
  let commands = 0
  const one = async (i) => {
    const sbx = await Sandbox.create({ metadata: label })
    try {
      for (let j = 0; j < perSandbox; j++) {
        const r = await sbx.commands.run(`echo ${i}-${j}`)
        commands++
        if (r.exitCode !== 0 || r.stdout !== `${i}-${j}\n`) failures.push(`${i}-${j}: ${JSON.stringify(r)}`)
      }
    } finally {
      if (!(await sbx.kill())) failures.push(`kill ${sbx.sandboxId}: false`)
    }
  }
  let next = 0
  await Promise.all(Array.from({ length: atOnce }, async () => {
    while (next < sandboxes) {
      const i = next++
      await one(i).catch((e) => failures.push(`sandbox ${i}: ${e}`))
    }
  }))
  assert.deepEqual(failures, [])
  assert.equal(commands, sandboxes * perSandbox)
  assert.deepEqual(await Sandbox.list({ query: { metadata: label } }).nextItems(), [])
})
