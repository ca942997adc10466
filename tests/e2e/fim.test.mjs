// fim.test.mjs - fill-in-the-middle end to end: OpenAI's `suffix` on
// /v1/completions through the official SDK, and llama-server's /infill with
// a raw fetch, on qwen3-tiny (random weights) whose tokenizer.json is given
// Qwen2.5-Coder's six FIM tokens; stories260K, which has none, gets a 400
// naming the field. Greedy output is checked against the same model fed the
// prompt layout by hand (the FIM tokens' ids around the texts' ids), so the
// server must lay the prompt out exactly so.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { startServer, collect, TESTDATA, NAME } from './server.mjs';

const FIM = ['<|fim_prefix|>', '<|fim_middle|>', '<|fim_suffix|>', '<|fim_pad|>', '<|repo_name|>', '<|file_sep|>'];
const [PRE, MID, SUF, PAD, REP, SEP] = FIM.map((_, i) => 1203 + i);

// qwen3-tiny's folder with the FIM tokens added after its 1203 tokens (its
// embeddings have 1536 rows).
function fimModel(dir) {
  const src = path.join(TESTDATA, 'models/qwen3-tiny/hf');
  for (const f of ['config.json', 'generation_config.json', 'tokenizer_config.json'])
    fs.copyFileSync(path.join(src, f), path.join(dir, f));
  fs.symlinkSync(path.join(src, 'model.safetensors'), path.join(dir, 'model.safetensors'));
  const tok = JSON.parse(fs.readFileSync(path.join(src, 'tokenizer.json'), 'utf8'));
  assert.equal(tok.added_tokens.at(-1).id, 1202);
  FIM.forEach((content, i) => tok.added_tokens.push({ id: 1203 + i, content, single_word: false, lstrip: false,
    rstrip: false, normalized: false, special: false }));
  fs.writeFileSync(path.join(dir, 'tokenizer.json'), JSON.stringify(tok));
  return dir;
}

let dir;
let srv;
let client;
let plain; // stories260K: no FIM tokens
before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pagedlm-fim-'));
  srv = await startServer(['--max-model-len', '1024', '--max-num-batched-tokens', '256'],
    { model: fimModel(dir) });
  client = srv.client();
  plain = await startServer();
});
after(async () => {
  if (srv) await srv.stop();
  if (plain) await plain.stop();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

async function post(server, route, body) {
  const r = await fetch(`${server.baseURL}${route}`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
  });
  return { status: r.status, type: r.headers.get('content-type'), text: await r.text() };
}

// The ids of text as plain text (no BOS, special-token text not read).
async function ids(text) {
  const r = await post(srv, '/tokenize', { prompt: text, add_special_tokens: false });
  assert.equal(r.status, 200, r.text);
  return JSON.parse(r.text).tokens;
}

// Greedy text of a prompt given as ids.
async function greedy(prompt, n) {
  const r = await client.completions.create({ model: NAME, prompt, max_tokens: n, temperature: 0 });
  return r;
}

const PREFIX = 'def add(a, b):\n    ';
const SUFFIX = '\n    return c\n';

test('completions with suffix: the prompt is FIM_PRE prompt FIM_SUF suffix FIM_MID, streamed alike', async () => {
  const want = await greedy([PRE, ...await ids(PREFIX), SUF, ...await ids(SUFFIX), MID], 12);
  const r = await client.completions.create({ model: NAME, prompt: PREFIX, suffix: SUFFIX, max_tokens: 12,
    temperature: 0 });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices[0].text, want.choices[0].text);
  assert.ok(r.choices[0].text.length > 0);
  assert.equal(r.usage.prompt_tokens, want.usage.prompt_tokens);
  const s = await collect(await client.completions.create({ model: NAME, prompt: PREFIX, suffix: SUFFIX,
    max_tokens: 12, temperature: 0, stream: true, stream_options: { include_usage: true } }));
  assert.equal(s.texts[0], r.choices[0].text);
  assert.deepEqual(s.usage, r.usage);
  // an empty suffix: a plain completion of the prompt
  const e = await client.completions.create({ model: NAME, prompt: PREFIX, suffix: '', max_tokens: 6,
    temperature: 0 });
  const p = await greedy(await ids(PREFIX), 6);
  assert.equal(e.choices[0].text, p.choices[0].text);
});

test('completions with suffix: FIM_PAD ends the middle, echo is refused', async () => {
  // a bias that makes FIM_PAD the first token: the choice ends, without its text
  const r = await client.completions.create({ model: NAME, prompt: PREFIX, suffix: SUFFIX, max_tokens: 8,
    temperature: 0, logit_bias: { [PAD]: 100 } });
  assert.equal(r.choices[0].text, '');
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.equal(r.usage.completion_tokens, 1);
  await assert.rejects(client.completions.create({ model: NAME, prompt: PREFIX, suffix: SUFFIX, echo: true }),
    (e) => {
      assert.ok(e instanceof OpenAI.BadRequestError, e.message);
      assert.equal(e.param, 'echo');
      return true;
    });
});

test('/infill: llama-server\'s prompt layout and result', async () => {
  const body = { input_prefix: PREFIX, input_suffix: SUFFIX, prompt: 'c',
    input_extra: [{ filename: 'util.py', text: 'X = 1\n' }, { text: 'Y = 2\n' }],
    n_predict: 10, temperature: 0, return_tokens: true, cache_prompt: true, samplers: ['top_k', 'infill'] };
  const layout = [REP, ...await ids('myproject\n'), SEP, ...await ids('util.py\n'), ...await ids('X = 1\n'),
    SEP, ...await ids('tmp\n'), ...await ids('Y = 2\n'), SEP, ...await ids('filename\n'),
    PRE, ...await ids(PREFIX), ...await ids('c'), SUF, ...await ids(SUFFIX), MID];
  const want = await greedy(layout, 10);
  const r = await post(srv, '/infill', body);
  assert.equal(r.status, 200, r.text);
  assert.match(r.type, /^application\/json/);
  const o = JSON.parse(r.text);
  assert.equal(o.content, want.choices[0].text);
  assert.equal(o.stop, true);
  assert.equal(o.tokens_predicted, 10);
  assert.equal(o.tokens.length, 10);
  assert.equal(o.tokens_evaluated, layout.length);
  assert.equal(o.stop_type, 'limit');
  assert.equal(o.truncated, false);
  assert.equal(o.model, NAME);
  assert.ok(o.prompt.startsWith('<|repo_name|>myproject\n<|file_sep|>util.py\nX = 1\n'), o.prompt);
  assert.ok(o.prompt.endsWith(`<|fim_prefix|>${PREFIX}c<|fim_suffix|>${SUFFIX}<|fim_middle|>`), o.prompt);
  for (const k of ['prompt_n', 'prompt_ms', 'predicted_n', 'predicted_ms', 'predicted_per_second'])
    assert.equal(typeof o.timings[k], 'number', k);
  assert.equal(o.timings.predicted_n, 10);

  // streamed: partial results, then the final one, and no [DONE]
  const s = await post(srv, '/infill', { ...body, stream: true });
  assert.equal(s.status, 200);
  assert.match(s.type, /^text\/event-stream/);
  const events = s.text.split('\n\n').filter((e) => e);
  for (const e of events) assert.match(e, /^data: \{/);
  const chunks = events.map((e) => JSON.parse(e.slice(6)));
  const last = chunks.at(-1);
  assert.equal(last.stop, true);
  assert.equal(last.content, '');
  assert.ok(chunks.slice(0, -1).every((c) => c.stop === false));
  assert.equal(chunks.slice(0, -1).map((c) => c.content).join(''), o.content);
  assert.deepEqual(chunks.slice(0, -1).flatMap((c) => c.tokens), o.tokens);
});

test('/infill: n_predict 0 evaluates the prompt only; a long prefix is cut', async () => {
  const r = JSON.parse((await post(srv, '/infill', { input_prefix: PREFIX, input_suffix: SUFFIX, n_predict: 0 })).text);
  assert.equal(r.content, '');
  assert.equal(r.tokens_predicted, 0);
  // the batch is 256: the prefix keeps its last 192 ids, the end of the text
  const long = 'x = 1\n'.repeat(200) + 'END';
  const c = JSON.parse((await post(srv, '/infill', { input_prefix: long, input_suffix: '', n_predict: 4 })).text);
  assert.equal(c.truncated, true);
  assert.ok(c.prompt.includes('END<|fim_suffix|>'), c.prompt.slice(-80));
  assert.ok(c.tokens_evaluated < 256 + 32, String(c.tokens_evaluated));
});

test('/infill refusals name the field', async () => {
  for (const [body, param] of [
    [{ input_suffix: 'b' }, 'input_prefix'],
    [{ input_prefix: 'a', input_suffix: 'b', input_extra: 'x' }, 'input_extra'],
    [{ input_prefix: 'a', input_suffix: 'b', input_extra: [{ filename: 'f' }] }, 'input_extra'],
    [{ input_prefix: 'a', input_suffix: 'b', prompt: 5 }, 'prompt'],
  ]) {
    const r = await post(srv, '/infill', body);
    assert.equal(r.status, 400, JSON.stringify(body));
    assert.equal(JSON.parse(r.text).error.param, param);
  }
});

test('a model without FIM tokens: 400 naming suffix / input_suffix', async () => {
  const c = plain.client();
  await assert.rejects(c.completions.create({ model: NAME, prompt: 'Once upon', suffix: 'the end.' }), (e) => {
    assert.ok(e instanceof OpenAI.BadRequestError, e.message);
    assert.equal(e.status, 400);
    assert.equal(e.param, 'suffix');
    assert.match(e.message, /has no FIM tokens/);
    return true;
  });
  const r = await post(plain, '/infill', { input_prefix: 'Once upon', input_suffix: 'the end.' });
  assert.equal(r.status, 400);
  const err = JSON.parse(r.text).error;
  assert.equal(err.param, 'input_suffix');
  assert.match(err.message, /has no FIM tokens/);
  // an empty suffix is no hole: a plain completion
  const ok = await c.completions.create({ model: NAME, prompt: 'Once upon', suffix: '', max_tokens: 3 });
  assert.equal(ok.usage.completion_tokens, 3);
});
