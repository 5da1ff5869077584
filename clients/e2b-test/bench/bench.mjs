// The E2B SDK's figures beside the native REST API's, in one run
// (BenchmarkE2BSDK in ../e2b_root_test.go starts serve with --warm 2 and
// runs this): commands.run('true') through the SDK and the same argv
// (/bin/bash -l -c true) through POST /v1/sandboxes/{id}/exec from this
// process, and Sandbox.create() to the first output of a command, cold
// (a spec no warm pool holds) and from the warm pool. One JSON line out.
import { Sandbox } from 'e2b'

const runs = Number(process.env.E2B_BENCH_RUNS || 300)
const creates = Number(process.env.E2B_BENCH_CREATES || 10)
const pct = (a, p) => [...a].sort((x, y) => x - y)[Math.min(a.length - 1, Math.floor(p * a.length))]
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

const sbx = await Sandbox.create({ timeoutMs: 600_000 })
const sdk = [], rest = []
for (let i = 0; i < runs + 20; i++) {
  const t = performance.now()
  await sbx.commands.run('true')
  if (i >= 20) sdk.push(performance.now() - t)
}
for (let i = 0; i < runs + 20; i++) {
  const t = performance.now()
  const r = await fetch(`${process.env.E2B_API_URL}/v1/sandboxes/${sbx.sandboxId}/exec`, {
    method: 'POST', headers: { Authorization: `Bearer ${process.env.E2B_API_KEY}` },
    body: JSON.stringify({ argv: ['/bin/bash', '-l', '-c', 'true'] }),
  })
  const body = await r.text()
  if (!r.ok || !body.includes('"exit"')) throw new Error(`REST exec: ${r.status} ${body}`)
  if (i >= 20) rest.push(performance.now() - t)
}
await sbx.kill()

// Create to the first byte of a command's output.
async function firstOutput (opts) {
  const t = performance.now()
  const s = await Sandbox.create(opts)
  let first = 0
  await s.commands.run('echo hi', { onStdout: () => { first ||= performance.now() } })
  const ms = first - t
  await s.kill()
  return ms
}
const cold = [], warm = []
for (let i = 0; i < creates; i++) {
  cold.push(await firstOutput({ envs: { BENCH_COLD: String(i) } }))
  await sleep(300) // the pool refills
  warm.push(await firstOutput({}))
  await sleep(300)
}
console.log(JSON.stringify({
  sdk_run_p50_ms: pct(sdk, 0.5), sdk_run_p99_ms: pct(sdk, 0.99),
  rest_run_p50_ms: pct(rest, 0.5), rest_run_p99_ms: pct(rest, 0.99),
  create_cold_p50_ms: pct(cold, 0.5), create_warm_p50_ms: pct(warm, 0.5),
  runs, creates,
}))
