// completions.test.mjs - /v1/completions through the official OpenAI SDK:
// greedy output equals `pagedlm run`, streaming equals non-streaming, n,
// stop, logprobs, echo, seeds, token-id and batched prompts, usage; plus
// /v1/models, /tokenize and /detokenize.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, runCli, collect, NAME } from './server.mjs';

let srv;
let client;
before(async () => {
  srv = await startServer();
  client = srv.client();
});
after(async () => srv && srv.stop());

const PROMPT = 'Once upon a time';

test('greedy output equals pagedlm run for the same prompt', async () => {
  for (const [prompt, n] of [[PROMPT, 40], ['The little dog', 64], ['Lily and Ben went to the park', 30]]) {
    const ref = runCli(prompt, n);
    const r = await client.completions.create({ model: NAME, prompt, max_tokens: n, temperature: 0 });
    assert.equal(r.object, 'text_completion');
    assert.match(r.id, /^cmpl-/);
    assert.equal(r.model, NAME);
    assert.equal(r.choices.length, 1);
    assert.equal(r.choices[0].text, ref.text, `prompt ${JSON.stringify(prompt)}`);
    assert.equal(r.usage.prompt_tokens, ref.prompt_tokens.length);
    assert.equal(r.usage.completion_tokens, ref.tokens.length);
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
    assert.equal(r.choices[0].finish_reason, ref.tokens.length < n ? 'stop' : 'length');
  }
});

test('streaming gives the same text as non-streaming, then usage and [DONE]', async () => {
  const body = { model: NAME, prompt: PROMPT, max_tokens: 48, temperature: 0 };
  const whole = await client.completions.create(body);
  const stream = await client.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
  const got = await collect(stream);
  assert.equal(got.texts[0], whole.choices[0].text);
  assert.equal(got.finish[0], whole.choices[0].finish_reason);
  assert.deepEqual(got.usage, whole.usage);
  assert.ok(got.chunks > 10, 'tokens arrive as separate chunks');
});

test('raw SSE framing: data lines, usage null until the usage chunk, [DONE] last', async () => {
  const r = await fetch(`${srv.baseURL}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: PROMPT, max_tokens: 5, temperature: 0, stream: true,
      stream_options: { include_usage: true } }),
  });
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /^text\/event-stream/);
  const events = (await r.text()).split('\n\n').filter((e) => e);
  for (const e of events) assert.match(e, /^data: /);
  assert.equal(events.at(-1), 'data: [DONE]');
  const chunks = events.slice(0, -1).map((e) => JSON.parse(e.slice(6)));
  const usageChunk = chunks.at(-1);
  assert.deepEqual(usageChunk.choices, []);
  assert.equal(usageChunk.usage.completion_tokens, 5);
  for (const c of chunks.slice(0, -1)) {
    assert.equal(c.usage, null);
    assert.equal(c.object, 'text_completion');
    assert.equal(c.choices.length, 1);
  }
  assert.equal(chunks.at(-2).choices[0].finish_reason, 'length');
});

test('n sequences: n choices, each deterministic for its seed', async () => {
  const body = { model: NAME, prompt: PROMPT, max_tokens: 24, temperature: 1.0, n: 3, seed: 7 };
  const a = await client.completions.create(body);
  const b = await client.completions.create(body);
  assert.deepEqual(a.choices.map((c) => c.index), [0, 1, 2]);
  assert.deepEqual(a.choices.map((c) => c.text), b.choices.map((c) => c.text));
  assert.equal(new Set(a.choices.map((c) => c.text)).size, 3, 'sampled sequences differ');
  assert.equal(a.usage.prompt_tokens, 5);
  const s = await collect(await client.completions.create({ ...body, stream: true }));
  assert.deepEqual(s.texts, a.choices.map((c) => c.text));
});

test('seed determinism: same seed same text, other seed other text', async () => {
  const body = { model: NAME, prompt: PROMPT, max_tokens: 40, temperature: 1.0, top_p: 0.95 };
  const a = await client.completions.create({ ...body, seed: 42 });
  const b = await client.completions.create({ ...body, seed: 42 });
  const c = await client.completions.create({ ...body, seed: 43 });
  assert.equal(a.choices[0].text, b.choices[0].text);
  assert.notEqual(a.choices[0].text, c.choices[0].text);
});

test('stop strings end the text before the stop string', async () => {
  const full = (await client.completions.create({ model: NAME, prompt: PROMPT, max_tokens: 40, temperature: 0 }))
    .choices[0].text;
  const word = ' girl';
  assert.ok(full.includes(word), full);
  const expect = full.slice(0, full.indexOf(word));
  const r = await client.completions.create({ model: NAME, prompt: PROMPT, max_tokens: 40, temperature: 0,
    stop: [word, 'zzz'] });
  assert.equal(r.choices[0].text, expect);
  assert.equal(r.choices[0].finish_reason, 'stop');
  const s = await collect(await client.completions.create({ model: NAME, prompt: PROMPT, max_tokens: 40,
    temperature: 0, stop: word, stream: true }));
  assert.equal(s.texts[0], expect);
  assert.equal(s.finish[0], 'stop');
});

test('logprobs: one entry per token, joining to the text; greedy picks the top one', async () => {
  const r = await client.completions.create({ model: NAME, prompt: PROMPT, max_tokens: 12, temperature: 0,
    logprobs: 3 });
  const lp = r.choices[0].logprobs;
  assert.equal(lp.tokens.length, r.usage.completion_tokens);
  assert.equal(lp.tokens.join(''), r.choices[0].text);
  assert.equal(lp.token_logprobs.length, lp.tokens.length);
  assert.equal(lp.text_offset[0], 0);
  for (let i = 0; i < lp.tokens.length; i++) {
    assert.ok(lp.token_logprobs[i] <= 0);
    const tops = Object.values(lp.top_logprobs[i]);
    assert.ok(tops.length >= 3 && tops.length <= 4);
    assert.ok(Math.abs(Math.max(...tops) - lp.token_logprobs[i]) < 1e-6, 'greedy token is the most likely');
    if (i > 0) assert.equal(lp.text_offset[i], lp.text_offset[i - 1] + [...lp.tokens[i - 1]].length);
  }
  const s = await client.completions.create({ model: NAME, prompt: PROMPT, max_tokens: 12, temperature: 0,
    logprobs: 3, stream: true });
  const streamed = [];
  for await (const c of s) if (c.choices[0]?.logprobs) streamed.push(...c.choices[0].logprobs.token_logprobs);
  assert.deepEqual(streamed, lp.token_logprobs);
});

test('echo returns the prompt first, with prompt logprobs', async () => {
  const r = await client.completions.create({ model: NAME, prompt: PROMPT, max_tokens: 6, temperature: 0,
    echo: true, logprobs: 1 });
  const plain = await client.completions.create({ model: NAME, prompt: PROMPT, max_tokens: 6, temperature: 0 });
  assert.equal(r.choices[0].text, PROMPT + plain.choices[0].text);
  const lp = r.choices[0].logprobs;
  assert.equal(lp.tokens.length, r.usage.prompt_tokens + r.usage.completion_tokens);
  assert.equal(lp.token_logprobs[0], null);
  assert.ok(lp.token_logprobs.slice(1).every((x) => x <= 0));
  // max_tokens 0 with echo: scoring only (lm-eval-harness style)
  const score = await client.completions.create({ model: NAME, prompt: PROMPT, max_tokens: 0, echo: true,
    logprobs: 0, temperature: 0 });
  assert.equal(score.choices[0].text, PROMPT);
  assert.equal(score.usage.completion_tokens, 0);
  assert.deepEqual(score.choices[0].logprobs.token_logprobs, lp.token_logprobs.slice(0, r.usage.prompt_tokens));
});

test('token-id prompts and lists of prompts', async () => {
  const tok = await (await fetch(`${srv.baseURL}/tokenize`, { method: 'POST',
    body: JSON.stringify({ model: NAME, prompt: PROMPT }) })).json();
  assert.equal(tok.count, tok.tokens.length);
  assert.equal(tok.max_model_len, 128);
  const det = await (await fetch(`${srv.baseURL}/detokenize`, { method: 'POST',
    body: JSON.stringify({ tokens: tok.tokens }) })).json();
  assert.equal(det.prompt, PROMPT);
  const byText = await client.completions.create({ model: NAME, prompt: PROMPT, max_tokens: 16, temperature: 0 });
  const byIds = await client.completions.create({ model: NAME, prompt: tok.tokens, max_tokens: 16, temperature: 0 });
  assert.equal(byIds.choices[0].text, byText.choices[0].text);
  const two = await client.completions.create({ model: NAME, prompt: [PROMPT, 'The cat'], max_tokens: 16,
    temperature: 0, n: 2 });
  assert.equal(two.choices.length, 4);
  assert.equal(two.choices[0].text, byText.choices[0].text);
  assert.equal(two.choices[1].text, byText.choices[0].text);
  const cat = await client.completions.create({ model: NAME, prompt: 'The cat', max_tokens: 16, temperature: 0 });
  assert.equal(two.choices[2].text, cat.choices[0].text);
  assert.equal(two.usage.prompt_tokens, byText.usage.prompt_tokens + cat.usage.prompt_tokens);
});

test('/v1/models lists the served model; /health answers', async () => {
  const list = await client.models.list();
  assert.deepEqual(list.data.map((m) => m.id), [NAME]);
  const m = await client.models.retrieve(NAME);
  assert.equal(m.id, NAME);
  assert.equal((await fetch(`${srv.baseURL}/health`)).status, 200);
});

test('logit_bias, min_tokens, max_completion_tokens and stop_reason through the SDK', async () => {
  const plain = await client.completions.create({ model: NAME, prompt: PROMPT, max_tokens: 1, temperature: 0,
    logprobs: 2 });
  const first = plain.choices[0].logprobs.tokens[0];
  const tops = Object.entries(plain.choices[0].logprobs.top_logprobs[0]).sort((a, b) => b[1] - a[1]);
  assert.equal(tops[0][0], first);
  // -100 on the greedy token: the runner-up comes instead (token ids from /tokenize)
  const ids = (await (await fetch(`${srv.baseURL}/tokenize`, { method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: PROMPT, add_special_tokens: true }) })).json()).tokens;
  const withFirst = (await (await fetch(`${srv.baseURL}/tokenize`, { method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: PROMPT + first, add_special_tokens: true }) })).json()).tokens;
  const firstId = withFirst[ids.length];
  const biased = await client.completions.create({ model: NAME, prompt: PROMPT, max_tokens: 1, temperature: 0,
    logit_bias: { [firstId]: -100 } });
  assert.equal(biased.choices[0].text, tops[1][0]);
  // an empty logit_bias is no bias (LangChain sends one)
  const empty = await client.completions.create({ model: NAME, prompt: PROMPT, max_tokens: 1, temperature: 0,
    logit_bias: {} });
  assert.equal(empty.choices[0].text, first);

  // max_completion_tokens is max_tokens; stop_reason names the stop string, null at the length limit
  const capped = await client.completions.create({ model: NAME, prompt: PROMPT, max_completion_tokens: 5,
    temperature: 0 });
  assert.equal(capped.usage.completion_tokens, 5);
  assert.equal(capped.choices[0].finish_reason, 'length');
  assert.equal(capped.choices[0].stop_reason, null);
  const stopped = await client.completions.create({ model: NAME, prompt: PROMPT, max_tokens: 40, temperature: 0,
    stop: [' Lily'] });
  assert.equal(stopped.choices[0].finish_reason, 'stop');
  assert.equal(stopped.choices[0].stop_reason, ' Lily');
  // in a stream, the final chunk carries it
  const stream = await client.completions.create({ model: NAME, prompt: PROMPT, max_tokens: 40, temperature: 0,
    stop: [' Lily'], stream: true });
  let last = null;
  for await (const c of stream) if (c.choices[0]?.finish_reason) last = c.choices[0];
  assert.equal(last.stop_reason, ' Lily');
  // min_tokens holds the stop string back until past min_tokens tokens
  const held = await client.completions.create({ model: NAME, prompt: PROMPT, max_tokens: 40, temperature: 0,
    stop: [' Lily'], min_tokens: 12 });
  assert.ok(held.choices[0].text.startsWith(stopped.choices[0].text + ' Lily'), held.choices[0].text);
  assert.equal(held.usage.prompt_tokens_details.cached_tokens, 0);
});
