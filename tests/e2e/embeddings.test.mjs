// embeddings.test.mjs - /v1/embeddings through the official OpenAI SDK
// (embeddings.create, which asks for base64 and decodes it): one vector
// per input, L2-normalized last-token pooling (`serve --task embed`), the
// same bytes for a text alone and inside a batch, float and base64 giving
// the same numbers, token-id inputs, and clear 400s. The model is
// qwen3-tiny (random weights): what the vector is, is checked against the
// LM head in test_engine_embed.c; here it is the API around it.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer, TESTDATA, NAME } from './server.mjs';

const MODEL = path.join(TESTDATA, 'models/qwen3-tiny/hf');
let srv;
let client;
before(async () => {
  srv = await startServer(['--task', 'embed'], { model: MODEL });
  client = srv.client();
});
after(async () => {
  if (srv) await srv.stop();
});

const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));
const f32 = (v) => Buffer.from(new Float32Array(v).buffer).toString('hex');

test('embeddings.create: one normalized vector per input, in order, with usage', async () => {
  const r = await client.embeddings.create({ model: NAME, input: ['The quick brown fox', 'jumps over', 'the dog'] });
  assert.equal(r.object, 'list');
  assert.equal(r.model, NAME);
  assert.equal(r.data.length, 3);
  r.data.forEach((d, i) => {
    assert.equal(d.object, 'embedding');
    assert.equal(d.index, i);
    assert.equal(d.embedding.length, 128);
    assert.ok(Math.abs(norm(d.embedding) - 1) < 1e-5, `norm ${norm(d.embedding)}`);
  });
  assert.notEqual(f32(r.data[0].embedding), f32(r.data[1].embedding));
  assert.ok(r.usage.prompt_tokens > 3 && r.usage.total_tokens === r.usage.prompt_tokens);
});

test('a text alone and inside a batch gives the same bytes', async () => {
  const alone = await client.embeddings.create({ model: NAME, input: 'jumps over' });
  const batch = await client.embeddings.create({ model: NAME, input: ['a much longer text comes first here', 'jumps over',
    'x'] });
  assert.equal(f32(batch.data[1].embedding), f32(alone.data[0].embedding));
});

test('encoding_format float and base64 carry the same float32 values', async () => {
  const asFloat = await client.embeddings.create({ model: NAME, input: 'hello', encoding_format: 'float' });
  const raw = await fetch(`${srv.baseURL}/v1/embeddings`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ input: 'hello', encoding_format: 'base64' }),
  });
  assert.equal(raw.status, 200);
  const b64 = (await raw.json()).data[0].embedding;
  assert.equal(typeof b64, 'string');
  const bytes = Buffer.from(b64, 'base64');
  assert.equal(bytes.length, 4 * 128);
  assert.equal(bytes.toString('hex'), f32(asFloat.data[0].embedding));
});

test('token-id inputs: the ids of a text give its vector', async () => {
  const tok = await fetch(`${srv.baseURL}/tokenize`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ prompt: 'hello there' }),
  });
  const ids = (await tok.json()).tokens;
  const byIds = await client.embeddings.create({ model: NAME, input: [ids, ids.slice(0, 1)] });
  const byText = await client.embeddings.create({ model: NAME, input: 'hello there' });
  assert.equal(f32(byIds.data[0].embedding), f32(byText.data[0].embedding));
  assert.equal(byIds.data.length, 2);
});

test('bad requests are 400s naming the field', async () => {
  const cases = [
    [{ input: [] }, 'input'],
    [{ input: 'x', encoding_format: 'hex' }, 'encoding_format'],
    [{ input: 'x', dimensions: 8 }, 'dimensions'],
    [{ input: [[1, 2], 'x'] }, 'input'],
    [{ input: [99999999] }, 'input'],
  ];
  for (const [body, param] of cases) {
    await assert.rejects(client.embeddings.create({ model: NAME, ...body }), (e) => {
      assert.equal(e.status, 400, JSON.stringify(body));
      assert.equal(e.param, param, JSON.stringify(body));
      return true;
    });
  }
  await assert.rejects(client.embeddings.create({ model: 'other', input: 'x' }), (e) => e.status === 404);
});

test('the same server still completes text', async () => {
  const r = await client.completions.create({ model: NAME, prompt: 'Hello', max_tokens: 4, temperature: 0 });
  assert.equal(r.choices.length, 1);
  assert.equal(r.usage.completion_tokens, 4);
});

test('a server not asked to embed says how to', async () => {
  const plain = await startServer([], { model: MODEL });
  try {
    await assert.rejects(plain.client().embeddings.create({ model: NAME, input: 'x' }), (e) => {
      assert.equal(e.status, 400);
      assert.match(e.message, /--task embed/);
      return true;
    });
  } finally {
    await plain.stop();
  }
});

// qwen3-tiny's folder as a sentence-transformers model: modules.json with
// mean pooling and no Normalize module, and config.json saying it is
// Matryoshka-trained. The server serves embeddings without --task embed.
test('a sentence-transformers folder: its pooling and normalization are read; dimensions cut a Matryoshka model', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pagedlm-st-'));
  try {
    for (const f of fs.readdirSync(MODEL)) {
      if (f === 'config.json') continue;
      fs.symlinkSync(path.join(MODEL, f), path.join(dir, f));
    }
    const cfg = JSON.parse(fs.readFileSync(path.join(MODEL, 'config.json'), 'utf8'));
    cfg.is_matryoshka = true;
    fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify(cfg));
    fs.writeFileSync(path.join(dir, 'modules.json'), JSON.stringify([
      { idx: 0, name: '0', path: '', type: 'sentence_transformers.models.Transformer' },
      { idx: 1, name: '1', path: '1_Pooling', type: 'sentence_transformers.models.Pooling' }]));
    fs.mkdirSync(path.join(dir, '1_Pooling'));
    fs.writeFileSync(path.join(dir, '1_Pooling/config.json'), JSON.stringify({ word_embedding_dimension: 128,
      pooling_mode_cls_token: false, pooling_mode_mean_tokens: true, pooling_mode_lasttoken: false }));
    const st = await startServer([], { model: dir });
    try {
      const c = st.client();
      const mean = (await c.embeddings.create({ model: NAME, input: 'hello there', encoding_format: 'float' })).data[0]
        .embedding;
      assert.ok(Math.abs(norm(mean) - 1) > 1e-3, `not normalized: norm ${norm(mean)}`);
      // the same server asked for the last row's pooling by a plain one: different vectors
      const last = (await client.embeddings.create({ model: NAME, input: 'hello there', encoding_format: 'float' }))
        .data[0].embedding;
      assert.notEqual(f32(mean), f32(last));
      const cut = (await c.embeddings.create({ model: NAME, input: 'hello there', encoding_format: 'float',
        dimensions: 16 })).data[0].embedding;
      assert.equal(cut.length, 16);
      assert.deepEqual(Array.from(new Float32Array(cut)), Array.from(new Float32Array(mean.slice(0, 16))));
    } finally {
      await st.stop();
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
