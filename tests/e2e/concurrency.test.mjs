// concurrency.test.mjs - 32 streaming clients at once each get exactly the
// text they get alone (greedy and seeded sampling, different prompts and
// lengths), and the engine holds no KV block afterwards.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, collect, settledMetrics, metric, NAME } from './server.mjs';

let srv;
let client;
before(async () => {
  srv = await startServer(['--max-num-seqs', '64']);
  client = srv.client();
});
after(async () => srv && srv.stop());

const PROMPTS = ['Once upon a time', 'The little dog', 'Lily wanted to', 'One day, a big', 'Tom and his mom',
  'The sun was', 'She saw a bird', 'They played in the'];

function request(k) {
  const body = { model: NAME, prompt: PROMPTS[k % PROMPTS.length], max_tokens: 20 + (k * 7) % 60, stream: true,
    stream_options: { include_usage: true } };
  if (k % 3 === 0) Object.assign(body, { temperature: 0 });
  else Object.assign(body, { temperature: 0.9, top_p: 0.95, seed: 1000 + k });
  if (k % 8 === 5) body.n = 2;
  return body;
}

test('32 concurrent streaming clients get the text each gets alone', async () => {
  const N = 32;
  const alone = [];
  for (let k = 0; k < N; k++) alone.push(await collect(await client.completions.create(request(k))));
  const together = await Promise.all(Array.from({ length: N }, async (_, k) =>
    collect(await client.completions.create(request(k)))));
  for (let k = 0; k < N; k++) {
    assert.deepEqual(together[k].texts, alone[k].texts, `client ${k}`);
    assert.deepEqual(together[k].finish, alone[k].finish, `client ${k}`);
    assert.deepEqual(together[k].usage, alone[k].usage, `client ${k}`);
  }
  const m = await settledMetrics(srv.baseURL, (x) => metric(x, 'vllm:num_requests_running') === 0 &&
    metric(x, 'vllm:kv_cache_usage_perc') === 0);
  assert.equal(metric(m, 'vllm:num_requests_running'), 0);
  assert.equal(metric(m, 'vllm:kv_cache_usage_perc'), 0);
  assert.ok(metric(m, 'vllm:time_to_first_token_seconds_count') >= 2 * N);
});
