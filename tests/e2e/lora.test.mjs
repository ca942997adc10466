// lora.test.mjs - LoRA adapters served as vLLM serves them, through the
// official `openai` SDK: --enable-lora --lora-modules NAME=PATH, a request's
// "model" naming the adapter (its answer differs from the base model's and
// names the adapter), /v1/models listing it with "parent" = the base model,
// llama-server's "lora": [{"id", "scale"}] picking the same adapter, the
// answer equal to `pagedlm run --lora`, and POST /v1/load_lora_adapter and
// /v1/unload_lora_adapter at run time (an unloaded name answers 404; a
// request running with it finishes with it: the unload is deferred).
// The adapters are random PEFT folders written here (rank 4 on q, v, o,
// gate, down of stories260K: 64 wide, 8 heads of 8, 4 KV heads, MLP 172).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { startServer, BIN, MODEL, NAME } from './server.mjs';

const H = 64, KV = 32, FF = 172, LAYERS = 5, R = 4;
const MODULES = { 'self_attn.q_proj': [H, H], 'self_attn.v_proj': [H, KV], 'self_attn.o_proj': [H, H],
  'mlp.gate_proj': [H, FF], 'mlp.down_proj': [FF, H] }; // [in, out]

// A PEFT adapter folder: adapter_config.json and adapter_model.safetensors.
function writeAdapter(dir, seed, extraConfig = {}) {
  fs.mkdirSync(dir, { recursive: true });
  let s = seed >>> 0;
  const rnd = () => { // xorshift32, values in [-0.25, 0.25)
    s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    return (s / 2 ** 32 - 0.5) * 0.5;
  };
  const header = {};
  const chunks = [];
  let offset = 0;
  for (let l = 0; l < LAYERS; l++) {
    for (const [mod, [inDim, outDim]] of Object.entries(MODULES)) {
      for (const [ab, shape] of [['A', [R, inDim]], ['B', [outDim, R]]]) {
        const data = new Float32Array(shape[0] * shape[1]).map(rnd);
        const bytes = Buffer.from(data.buffer);
        header[`base_model.model.model.layers.${l}.${mod}.lora_${ab}.weight`] =
          { dtype: 'F32', shape, data_offsets: [offset, offset + bytes.length] };
        chunks.push(bytes);
        offset += bytes.length;
      }
    }
  }
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - (json.length % 8)) % 8);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(json.length));
  fs.writeFileSync(path.join(dir, 'adapter_model.safetensors'), Buffer.concat([len, Buffer.from(json), ...chunks]));
  fs.writeFileSync(path.join(dir, 'adapter_config.json'), JSON.stringify({
    peft_type: 'LORA', r: R, lora_alpha: 8, use_rslora: false, bias: 'none', task_type: 'CAUSAL_LM',
    target_modules: ['q_proj', 'v_proj', 'o_proj', 'gate_proj', 'down_proj'], ...extraConfig }));
  return dir;
}

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pagedlm-lora-'));
const ALPHA = writeAdapter(path.join(tmp, 'alpha'), 1234);
const BETA = writeAdapter(path.join(tmp, 'beta'), 98765);
const DORA = writeAdapter(path.join(tmp, 'dora'), 5, { use_dora: true });
const PROMPT = 'Once upon a time';
const TEMPLATE = path.join(path.dirname(fileURLToPath(import.meta.url)), 'fixtures/chat_template_concat.jinja');

let srv;
let client;
before(async () => {
  srv = await startServer(['--enable-lora', '--lora-modules', `alpha=${ALPHA}`, '--max-lora-rank', '16',
    '--chat-template', TEMPLATE]);
  client = srv.client();
});
after(async () => {
  if (srv) await srv.stop();
  fs.rmSync(tmp, { recursive: true, force: true });
});

async function complete(model, extra = {}) {
  const r = await client.completions.create({ model, prompt: PROMPT, max_tokens: 24, temperature: 0, ...extra });
  return r;
}

async function post(p, body) {
  const r = await fetch(`${srv.baseURL}${p}`, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body) });
  return { status: r.status, text: await r.text() };
}

test('/v1/models lists the adapter with the base model as its parent', async () => {
  const list = await client.models.list();
  const ids = list.data.map((m) => m.id);
  assert.deepEqual(ids, [NAME, 'alpha']);
  const alpha = list.data[1];
  assert.equal(alpha.parent, NAME);
  assert.equal(alpha.root, ALPHA);
  assert.equal((await client.models.retrieve('alpha')).parent, NAME);
});

test('"model" naming the adapter runs it: another answer, named after the adapter, as `pagedlm run --lora`', async () => {
  const base = await complete(NAME);
  const ad = await complete('alpha');
  assert.equal(base.model, NAME);
  assert.equal(ad.model, 'alpha');
  assert.notEqual(ad.choices[0].text, base.choices[0].text);
  const again = await complete('alpha');
  assert.equal(again.choices[0].text, ad.choices[0].text);
  // the CLI with --lora gives the same greedy text
  const r = spawnSync(BIN, ['run', '-m', MODEL, '-p', PROMPT, '-n', '24', '--temp', '0', '--json', '--lora', ALPHA],
    { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  assert.equal(JSON.parse(r.stdout).text, ad.choices[0].text);
  // llama-server's "lora" field picks it by id, at scale 1; scale 0 is the base model
  const byId = await client.completions.create({ model: NAME, prompt: PROMPT, max_tokens: 24, temperature: 0,
    lora: [{ id: 0, scale: 1 }] });
  assert.equal(byId.choices[0].text, ad.choices[0].text);
  const off = await client.completions.create({ model: NAME, prompt: PROMPT, max_tokens: 24, temperature: 0,
    lora: [{ id: 0, scale: 0 }] });
  assert.equal(off.choices[0].text, base.choices[0].text);
  // chat too
  const chat = await client.chat.completions.create({ model: 'alpha', messages: [{ role: 'user', content: PROMPT }],
    max_tokens: 8, temperature: 0 });
  assert.equal(chat.model, 'alpha');
});

test('adapters load and unload at run time', async () => {
  let r = await post('/v1/load_lora_adapter', { lora_name: 'beta', lora_path: BETA });
  assert.equal(r.status, 200, r.text);
  assert.match(r.text, /Success/);
  assert.deepEqual((await client.models.list()).data.map((m) => m.id), [NAME, 'alpha', 'beta']);
  const beta = await complete('beta');
  assert.equal(beta.model, 'beta');
  assert.notEqual(beta.choices[0].text, (await complete(NAME)).choices[0].text);
  assert.notEqual(beta.choices[0].text, (await complete('alpha')).choices[0].text);
  r = await post('/v1/load_lora_adapter', { lora_name: 'beta', lora_path: BETA });
  assert.equal(r.status, 400); // the name is taken
  r = await post('/v1/load_lora_adapter', { lora_name: 'dora', lora_path: DORA });
  assert.equal(r.status, 400);
  assert.match(JSON.parse(r.text).error.message, /DoRA/);
  r = await post('/v1/load_lora_adapter', { lora_name: 'nothing', lora_path: path.join(tmp, 'missing') });
  assert.equal(r.status, 400);

  r = await post('/v1/unload_lora_adapter', { lora_name: 'beta' });
  assert.equal(r.status, 200, r.text);
  await assert.rejects(complete('beta'), (e) => e instanceof OpenAI.NotFoundError && e.status === 404);
  r = await post('/v1/unload_lora_adapter', { lora_name: 'beta' });
  assert.equal(r.status, 404);
  assert.deepEqual((await client.models.list()).data.map((m) => m.id), [NAME, 'alpha']);
  // loaded again under the same name: the same answers as before
  r = await post('/v1/load_lora_adapter', { lora_name: 'beta', lora_path: BETA });
  assert.equal(r.status, 200, r.text);
  assert.equal((await complete('beta')).choices[0].text, beta.choices[0].text);
});

test('an unload while a request runs with the adapter is deferred: the request finishes with it', async () => {
  let r = await post('/v1/load_lora_adapter', { lora_name: 'gamma', lora_path: BETA });
  assert.equal(r.status, 200, r.text);
  const expect = (await complete('gamma', { max_tokens: 120, ignore_eos: true })).choices[0].text;
  const stream = await client.completions.create({ model: 'gamma', prompt: PROMPT, max_tokens: 120, temperature: 0,
    ignore_eos: true, stream: true });
  let text = '';
  let unloaded = false;
  let finish = null;
  for await (const c of stream) {
    text += c.choices[0]?.text ?? '';
    if (c.choices[0]?.finish_reason) finish = c.choices[0].finish_reason;
    if (!unloaded) { // after the first chunk: the request holds the adapter
      unloaded = true;
      r = await post('/v1/unload_lora_adapter', { lora_name: 'gamma' });
      assert.equal(r.status, 200, r.text);
    }
  }
  assert.equal(finish, 'length');
  assert.equal(text, expect);
  await assert.rejects(complete('gamma'), (e) => e instanceof OpenAI.NotFoundError);
});

test('an unknown model, or several adapters in one request, are refused', async () => {
  await assert.rejects(complete('gamma'), (e) => e instanceof OpenAI.NotFoundError);
  await assert.rejects(client.completions.create({ model: NAME, prompt: PROMPT, max_tokens: 2,
    lora: [{ id: 0, scale: 1 }, { id: 1, scale: 0.5 }] }), (e) => e instanceof OpenAI.BadRequestError &&
    /one adapter per request/.test(e.message));
});
