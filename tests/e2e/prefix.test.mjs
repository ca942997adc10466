// prefix.test.mjs - prefix caching as a client sees it, through the official
// `openai` SDK: an 8-turn chat replayed turn by turn, each turn's
// usage.prompt_tokens_details.cached_tokens covering the whole previous
// conversation as computed (prompt + answer, less the last sampled token)
// up to its last full 16-token block; the same in a streamed usage chunk;
// vLLM's prefix-cache counters on /metrics agreeing with the responses;
// cache_salt keeping tenants apart; --no-enable-prefix-caching turning it off.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startServer, metrics, metric, NAME, ALLOW_LONG } from './server.mjs';

// assistant turns rendered as "Assistant:" + content, exactly what follows the
// generation prompt "Assistant:", so a reply re-enters the prompt as it was generated
const TEMPLATE = path.join(path.dirname(fileURLToPath(import.meta.url)), 'fixtures/chat_template_concat.jinja');
const BLOCK = 16;
const QUESTIONS = ['Once upon a time', 'Tell me more', 'What did Lily do?', 'And then?', 'Who was there?',
  'Was it fun?', 'Where did they go?', 'The end?'];

let srv;
let client;
before(async () => {
  srv = await startServer(['--chat-template', TEMPLATE, '--max-model-len', '512', '--block-size', String(BLOCK)],
    { env: ALLOW_LONG });
  client = srv.client();
});
after(async () => srv && srv.stop());

test('each turn of a chat finds the whole previous conversation in the cache', async () => {
  const m0 = await metrics(srv.baseURL);
  const messages = [];
  let prev = null;
  let queried = 0;
  let hit = 0;
  for (let t = 0; t < QUESTIONS.length; t++) {
    messages.push({ role: 'user', content: QUESTIONS[t] });
    const stream = t % 2 === 1;
    let usage;
    let text = '';
    if (stream) {
      const s = await client.chat.completions.create({ model: NAME, messages, max_tokens: 12, temperature: 0,
        stream: true, stream_options: { include_usage: true } });
      for await (const c of s) {
        if (c.usage) usage = c.usage;
        text += c.choices[0]?.delta?.content ?? '';
      }
    } else {
      const r = await client.chat.completions.create({ model: NAME, messages, max_tokens: 12, temperature: 0 });
      usage = r.usage;
      text = r.choices[0].message.content;
    }
    const cached = usage.prompt_tokens_details.cached_tokens;
    if (prev) {
      // computed before: the previous prompt and answer but the last sampled token
      const computed = prev.prompt_tokens + prev.completion_tokens - 1;
      assert.equal(cached, Math.floor(computed / BLOCK) * BLOCK, `turn ${t}: ${JSON.stringify(usage)}`);
    } else {
      assert.equal(cached, 0);
    }
    assert.ok(cached < usage.prompt_tokens);
    queried += usage.prompt_tokens;
    hit += cached;
    messages.push({ role: 'assistant', content: text });
    prev = usage;
  }
  const m1 = await metrics(srv.baseURL);
  assert.equal(metric(m1, 'vllm:prefix_cache_queries_total') - metric(m0, 'vllm:prefix_cache_queries_total'), queried);
  assert.equal(metric(m1, 'vllm:prefix_cache_hits_total') - metric(m0, 'vllm:prefix_cache_hits_total'), hit);
  assert.ok(hit > queried / 2, `only ${hit} of ${queried} prompt tokens came from the cache`);
});

test('cache_salt: tenants with different salts never share cached blocks', async () => {
  const prompt = 'Once upon a time there was a little girl named Lily who loved to play in the park';
  const run = async (salt) => {
    const body = { model: NAME, prompt, max_tokens: 2, temperature: 0 };
    if (salt) body.cache_salt = salt;
    const r = await client.completions.create(body);
    return r.usage.prompt_tokens_details.cached_tokens;
  };
  assert.equal(await run('alpha'), 0);
  assert.equal(await run('beta'), 0);
  assert.ok((await run('alpha')) > 0);
  const bad = await fetch(`${srv.baseURL}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: NAME, prompt, cache_salt: '' }) });
  assert.equal(bad.status, 400);
  assert.equal((await bad.json()).error.param, 'cache_salt');
});

test('--no-enable-prefix-caching computes every prompt', async () => {
  const off = await startServer(['--no-enable-prefix-caching']);
  try {
    const c = off.client();
    for (let i = 0; i < 2; i++) {
      const r = await c.completions.create({ model: NAME, prompt: 'Once upon a time there was a little girl named Lily',
        max_tokens: 2, temperature: 0 });
      assert.equal(r.usage.prompt_tokens_details.cached_tokens, 0);
    }
    const m = await metrics(off.baseURL);
    assert.equal(metric(m, 'vllm:prefix_cache_hits_total'), 0);
  } finally {
    await off.stop();
  }
});
