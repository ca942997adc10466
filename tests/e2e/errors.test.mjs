// errors.test.mjs - what a client does wrong gets an OpenAI-style error
// {"error": {"message", "type", "param", "code"}} with the right status:
// 401 without the API key, 404 for an unknown model or endpoint, 400 for
// malformed JSON, wrong types, out-of-range values and prompts longer than
// the context, 413 beyond the 4 MiB body limit. The server stays up.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer, BIN, NAME } from './server.mjs';

const KEY = 'sk-test-0123456789';
let srv;
let client;
before(async () => {
  srv = await startServer(['--api-key', KEY]);
  client = srv.client({ apiKey: KEY });
});
after(async () => srv && srv.stop());

async function raw(path, body, { key = KEY, method = 'POST' } = {}) {
  const headers = { 'content-type': 'application/json' };
  if (key) headers.authorization = `Bearer ${key}`;
  const r = await fetch(`${srv.baseURL}${path}`, { method, headers, body });
  const text = await r.text();
  return { status: r.status, body: text ? JSON.parse(text) : null };
}

function assertErrorShape(body) {
  assert.deepEqual(Object.keys(body), ['error']);
  assert.deepEqual(Object.keys(body.error).sort(), ['code', 'message', 'param', 'type']);
  assert.equal(typeof body.error.message, 'string');
  assert.ok(body.error.message.length > 0);
}

async function rejects(promise, cls, status, check = () => {}) {
  await assert.rejects(promise, (e) => {
    assert.ok(e instanceof cls, `expected ${cls.name}, got ${e.constructor.name}: ${e.message}`);
    assert.equal(e.status, status);
    check(e);
    return true;
  });
}

test('401 without the right API key (SDK and raw), health and metrics stay open', async () => {
  for (const apiKey of ['wrong', KEY + 'x', KEY.slice(0, -1), '']) {
    const bad = srv.client({ apiKey: apiKey || 'x' });
    await rejects(bad.completions.create({ model: NAME, prompt: 'Hi', max_tokens: 2 }), OpenAI.AuthenticationError,
      401, (e) => assert.equal(e.code, 'invalid_api_key'));
  }
  const r = await raw('/v1/completions', JSON.stringify({ prompt: 'Hi' }), { key: null });
  assert.equal(r.status, 401);
  assertErrorShape(r.body);
  assert.equal((await raw('/v1/models', undefined, { key: null, method: 'GET' })).status, 401);
  assert.equal((await fetch(`${srv.baseURL}/health`)).status, 200);
  assert.equal((await fetch(`${srv.baseURL}/metrics`)).status, 200);
  const ok = await client.completions.create({ model: NAME, prompt: 'Hi', max_tokens: 2 });
  assert.equal(ok.choices.length, 1);
});

test('404 for an unknown model (model_not_found) and an unknown endpoint', async () => {
  await rejects(client.completions.create({ model: 'gpt-4', prompt: 'Hi', max_tokens: 2 }), OpenAI.NotFoundError, 404,
    (e) => {
      assert.equal(e.code, 'model_not_found');
      assert.equal(e.param, 'model');
    });
  await rejects(client.models.retrieve('gpt-4'), OpenAI.NotFoundError, 404);
  const r = await raw('/v1/nothing', '{}');
  assert.equal(r.status, 404);
  assertErrorShape(r.body);
});

test('400 for malformed JSON and bodies that are not objects', async () => {
  for (const body of ['{bad', '', '[1, 2]', '"text"', '{"prompt": "a",}', '\u0000']) {
    const r = await raw('/v1/completions', body);
    assert.equal(r.status, 400, `body ${JSON.stringify(body)}`);
    assertErrorShape(r.body);
    assert.equal(r.body.error.type, 'invalid_request_error');
  }
});

test('400 for wrong types and out-of-range values, naming the field', async () => {
  const cases = [
    [{ prompt: 'Hi', temperature: 'hot' }, 'temperature'],
    [{ prompt: 'Hi', temperature: -1 }, 'temperature'],
    [{ prompt: 'Hi', top_p: 1.5 }, 'top_p'],
    [{ prompt: 'Hi', top_p: 0 }, 'top_p'],
    [{ prompt: 'Hi', top_k: -2 }, 'top_k'],
    [{ prompt: 'Hi', min_p: 2 }, 'min_p'],
    [{ prompt: 'Hi', n: 0 }, 'n'],
    [{ prompt: 'Hi', n: 1000 }, 'n'],
    [{ prompt: 'Hi', n: 1.5 }, 'n'],
    [{ prompt: 'Hi', max_tokens: -1 }, 'max_tokens'],
    [{ prompt: 'Hi', max_tokens: 'ten' }, 'max_tokens'],
    [{ prompt: 'Hi', logprobs: 21 }, 'logprobs'],
    [{ prompt: 'Hi', logprobs: true }, 'logprobs'],
    [{ prompt: 'Hi', presence_penalty: 3 }, 'presence_penalty'],
    [{ prompt: 'Hi', frequency_penalty: -2.5 }, 'frequency_penalty'],
    [{ prompt: 'Hi', repetition_penalty: 0 }, 'repetition_penalty'],
    [{ prompt: 'Hi', seed: 'x' }, 'seed'],
    [{ prompt: 'Hi', stop: 5 }, 'stop'],
    [{ prompt: 'Hi', stop: [''] }, 'stop'],
    [{ prompt: 'Hi', stream: 'yes' }, 'stream'],
    [{ prompt: 'Hi', stream_options: { include_usage: true } }, 'stream_options'],
    [{ prompt: 'Hi', echo: 1 }, 'echo'],
    [{ prompt: 'Hi', logit_bias: { 5: 101 } }, 'logit_bias'],
    [{ prompt: 'Hi', logit_bias: { 512: 1 } }, 'logit_bias'],
    [{ prompt: 'Hi', max_tokens: 2, min_tokens: 3 }, 'min_tokens'],
    [{ prompt: 'Hi', stop: ['x'.repeat(4097)] }, 'stop'],
    [{ prompt: 42 }, 'prompt'],
    [{ prompt: [] }, 'prompt'],
    [{ prompt: [1, 'a'] }, 'prompt'],
    [{ prompt: [1, 100000] }, 'prompt'],
    [{}, 'prompt'],
    [{ prompt: 'Hi', model: 5 }, 'model'],
  ];
  for (const [body, param] of cases) {
    const r = await raw('/v1/completions', JSON.stringify(body));
    assert.equal(r.status, 400, JSON.stringify(body));
    assertErrorShape(r.body);
    assert.equal(r.body.error.param, param, JSON.stringify(body));
  }
  await rejects(client.completions.create({ model: NAME, prompt: 'Hi', temperature: -1 }), OpenAI.BadRequestError,
    400, (e) => assert.equal(e.param, 'temperature'));
});

test('400 context_length_exceeded when the prompt cannot fit the context', async () => {
  const long = 'Once upon a time there was a little girl. '.repeat(30);
  await rejects(client.completions.create({ model: NAME, prompt: long, max_tokens: 16 }), OpenAI.BadRequestError, 400,
    (e) => {
      assert.equal(e.code, 'context_length_exceeded');
      assert.match(e.message, /maximum context length is 128 tokens/);
    });
  await rejects(client.completions.create({ model: NAME, prompt: 'Hi', max_tokens: 500 }), OpenAI.BadRequestError,
    400, (e) => assert.equal(e.code, 'context_length_exceeded'));
});

test('413 beyond the 4 MiB body limit; the server keeps serving', async () => {
  await rejects(client.completions.create({ model: NAME, prompt: 'a'.repeat(5 << 20), max_tokens: 2 }),
    OpenAI.APIError, 413, (e) => assert.equal(e.code, 'request_too_large'));
  const r = await raw('/v1/completions', JSON.stringify({ prompt: 'b'.repeat((4 << 20) + 10) }));
  assert.equal(r.status, 413);
  assertErrorShape(r.body);
  const ok = await client.completions.create({ model: NAME, prompt: 'Hi', max_tokens: 2 });
  assert.equal(ok.choices.length, 1);
});

test('405 for the wrong method', async () => {
  const r = await raw('/v1/completions', undefined, { method: 'GET' });
  assert.equal(r.status, 405);
  assertErrorShape(r.body);
});

test('503 while the model loads; a model that fails to load ends the server with status 1', async () => {
  // the loader waits 3 s (a test-only delay) before it finds the empty file is no model
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pagedlm-e2e-'));
  const empty = path.join(dir, 'model.gguf');
  fs.writeFileSync(empty, '');
  const proc = spawn(BIN, ['serve', '-m', empty, '--host', '127.0.0.1', '--port', '0'],
    { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, PAGEDLM_TEST_LOAD_DELAY_MS: '3000' } });
  let log = '';
  const exited = new Promise((resolve) => proc.on('exit', (code) => resolve(code)));
  try {
    const port = await new Promise((resolve) => proc.stderr.on('data', (d) => {
      log += d;
      const m = /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(log);
      if (m) resolve(Number(m[1]));
    }));
    const base = `http://127.0.0.1:${port}`;
    assert.equal((await fetch(`${base}/health`)).status, 503);
    const r = await fetch(`${base}/v1/completions`, { method: 'POST', body: '{"prompt": "Hi"}' });
    assert.equal(r.status, 503);
    assertErrorShape(await r.json());
    assert.equal((await fetch(`${base}/v1/models`)).status, 503);
  } finally {
    if (proc.exitCode === null) await exited;
  }
  assert.equal(proc.exitCode, 1, log);
  assert.match(log, /error: .*model\.gguf/);
  fs.rmSync(dir, { recursive: true, force: true });
});
