// abort.test.mjs - a client that goes away mid-stream (or while waiting for a
// non-streaming answer) has its request aborted: /metrics then shows no
// request running and no KV block in use. SIGTERM lets in-flight requests
// finish and the server exits 0.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, metrics, metric, NAME, ALLOW_LONG } from './server.mjs';

let srv;
let client;
before(async () => {
  // a long context so that a request is still generating when its client leaves
  srv = await startServer(['--max-model-len', '4096'], { env: ALLOW_LONG });
  client = srv.client();
});
after(async () => srv && srv.stop());

const LONG = { model: NAME, prompt: 'Once upon a time', max_tokens: 4000, temperature: 0.8, seed: 1, ignore_eos: true };

async function settled() {
  let m;
  for (let i = 0; i < 100; i++) {
    m = await metrics(srv.baseURL);
    if (metric(m, 'vllm:num_requests_running') === 0 && metric(m, 'vllm:kv_cache_usage_perc') === 0) return m;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.fail(`requests still running or KV blocks in use: ${JSON.stringify(m)}`);
}

const aborted = (m) => metric(m, 'vllm:request_success_total', ',finished_reason="abort"');

test('a client aborting mid-stream frees its KV blocks', async () => {
  const before = aborted(await metrics(srv.baseURL));
  const stream = await client.completions.create({ ...LONG, stream: true });
  let chunks = 0;
  for await (const c of stream) {
    assert.equal(c.choices[0].finish_reason, null);
    if (++chunks === 5) {
      const m = await metrics(srv.baseURL);
      assert.ok(metric(m, 'vllm:kv_cache_usage_perc') > 0, 'the request holds blocks while it runs');
      stream.controller.abort();
      break;
    }
  }
  const m = await settled();
  assert.equal(aborted(m), before + 1, 'the request ended as aborted, not by running to its end');
});

test('a client leaving a non-streaming request frees its KV blocks', async () => {
  const before = aborted(await metrics(srv.baseURL));
  const ac = new AbortController();
  const pending = fetch(`${srv.baseURL}/v1/completions`, { method: 'POST', signal: ac.signal,
    headers: { 'content-type': 'application/json' }, body: JSON.stringify(LONG) });
  for (let i = 0; i < 100; i++) {
    if (metric(await metrics(srv.baseURL), 'vllm:kv_cache_usage_perc') > 0) break;
    await new Promise((r) => setTimeout(r, 10));
  }
  ac.abort();
  await assert.rejects(pending);
  const m = await settled();
  assert.equal(aborted(m), before + 1);
});

test('many clients aborting at once leave nothing behind', async () => {
  const streams = await Promise.all(Array.from({ length: 16 }, (_, k) =>
    client.completions.create({ ...LONG, seed: k, stream: true, n: 1 + (k % 2) })));
  await Promise.all(streams.map(async (s, k) => {
    let i = 0;
    for await (const _ of s) if (++i === 2 + k) break; // break ends the stream: the SDK aborts the request
  }));
  await settled();
});

test('SIGTERM: the stream in flight finishes, then the server exits 0', async () => {
  const own = await startServer(['--max-model-len', '4096'], { env: ALLOW_LONG });
  const stream = await own.client().completions.create({ ...LONG, max_tokens: 300, stream: true });
  let text = '';
  let finish = null;
  let signalled = false;
  for await (const c of stream) {
    text += c.choices[0].text;
    finish = c.choices[0].finish_reason ?? finish;
    if (!signalled) {
      signalled = true;
      own.terminate();
    }
  }
  assert.equal(finish, 'length');
  assert.ok(text.length > 300);
  await own.stop(); // asserts exit code 0
});
