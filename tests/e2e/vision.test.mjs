// vision.test.mjs - images in chat requests through the official OpenAI SDK:
// a tiny random LLaVA (vlm_model.mjs) served from its Hugging Face folder;
// image_url content parts as data URLs and as file:// URLs under
// --allowed-local-media-path; greedy output equal to `pagedlm run` with the
// same image at <__media__>; another image changes the logprobs; streaming
// equals non-streaming; http URLs, file:// URLs outside the folder (one
// answer whether or not the file exists), bad base64, strips thinner than
// 200:1 and images sent to a text-only model are 400s with a message; the
// encoder cache's counters on /metrics (the same image again skips the
// tower).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { startServer, collect, metrics, metric, BIN, TESTDATA, NAME } from './server.mjs';
import { writeLlava, png } from './vlm_model.mjs';

const TEMPLATE = path.join(path.dirname(fileURLToPath(import.meta.url)), 'fixtures/chat_template.jinja');
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pagedlm-vlm-'));
const MODEL_DIR = path.join(tmp, 'llava');
const MEDIA = path.join(tmp, 'media');
const PNG_A = png(40, 30, 1);
const PNG_B = png(33, 47, 2);
const dataUrl = (b) => `data:image/png;base64,${b.toString('base64')}`;

let srv;
let client;
before(async () => {
  writeLlava(MODEL_DIR, TESTDATA);
  fs.mkdirSync(MEDIA);
  fs.writeFileSync(path.join(MEDIA, 'a.png'), PNG_A);
  fs.writeFileSync(path.join(tmp, 'outside.png'), PNG_A);
  srv = await startServer(['--chat-template', TEMPLATE, '--allowed-local-media-path', MEDIA], { model: MODEL_DIR });
  client = srv.client();
});
after(async () => {
  if (srv) await srv.stop();
  fs.rmSync(tmp, { recursive: true, force: true });
});

const ask = (url, extra = {}) => client.chat.completions.create({
  model: NAME, max_tokens: 12, temperature: 0,
  messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url } }, { type: 'text', text: 'What is this?' }] }],
  ...extra,
});

test('a data URL image: greedy output equals pagedlm run with the image at <__media__>', async () => {
  const chat = await ask(dataUrl(PNG_A));
  assert.equal(chat.choices[0].message.role, 'assistant');
  fs.writeFileSync(path.join(tmp, 'a-cli.png'), PNG_A);
  // the template renders "<s>User: <image>\nWhat is this?\nAssistant:"; run adds BOS itself
  const r = spawnSync(BIN, ['run', '-m', MODEL_DIR, '--image', path.join(tmp, 'a-cli.png'), '-p',
    'User: <__media__>\nWhat is this?\nAssistant:', '-n', '12', '--temp', '0', '--json'], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  const cli = JSON.parse(r.stdout);
  assert.equal(chat.usage.prompt_tokens, cli.prompt_tokens.length);
  assert.equal(chat.usage.completion_tokens, cli.tokens.length);
  assert.equal(chat.choices[0].message.content, cli.text);
});

test('the same image again is found in the encoder cache; another is encoded', async () => {
  const PNG_C = png(21, 19, 3); // sent by no other test
  const m0 = await metrics(srv.baseURL);
  const a = await ask(dataUrl(PNG_C));
  const b = await ask(dataUrl(PNG_C));
  const m1 = await metrics(srv.baseURL);
  assert.equal(b.choices[0].message.content, a.choices[0].message.content);
  const d = (name) => metric(m1, name) - metric(m0, name);
  assert.equal(d('vllm:mm_cache_queries_total'), 2);
  assert.equal(d('vllm:mm_cache_hits_total'), 1);
  assert.equal(d('pagedlm:images_encoded_total'), 1);
  assert.ok(metric(m1, 'pagedlm:encoder_cache_bytes') > 0);
});

test('a file:// URL under --allowed-local-media-path is the same image', async () => {
  const a = await ask(dataUrl(PNG_A));
  const b = await ask(`file://${path.join(MEDIA, 'a.png')}`);
  assert.equal(b.choices[0].message.content, a.choices[0].message.content);
  assert.equal(b.usage.prompt_tokens, a.usage.prompt_tokens);
});

test('another image changes the first token\'s logprobs; streaming equals non-streaming', async () => {
  const lp = { logprobs: true, top_logprobs: 2 };
  const a = await ask(dataUrl(PNG_A), lp);
  const b = await ask(dataUrl(PNG_B), lp);
  assert.notDeepEqual(a.choices[0].logprobs.content[0].top_logprobs, b.choices[0].logprobs.content[0].top_logprobs);
  const s = await collect(await ask(dataUrl(PNG_B), { stream: true }));
  const plain = await ask(dataUrl(PNG_B));
  assert.equal(s.texts[0], plain.choices[0].message.content);
});

async function expect400(url, needle) {
  await assert.rejects(ask(url), (e) => {
    assert.ok(e instanceof OpenAI.APIError, String(e));
    assert.equal(e.status, 400);
    assert.match(e.message, needle);
    return true;
  });
}

test('http URLs, file:// URLs outside the folder, bad data and thin strips are 400s saying why', async () => {
  await expect400('https://example.com/cat.png', /only data URLs/);
  await expect400(`file://${path.join(tmp, 'outside.png')}`, /outside the allowed local media path/);
  await expect400('data:image/png;base64,iVBO*w0K', /bad base64/);
  await expect400(dataUrl(Buffer.from('not an image at all')), /not a PNG, JPEG or WebP image/);
  // a thin strip (a few hundred bytes of PNG) is refused from its header, for every model family
  await expect400(dataUrl(png(300000, 1, 0, { flat: true })), /300000 x 1 pixels: its aspect ratio 300000.0:1 is over the limit of 200:1/);
  await expect400(dataUrl(png(1, 30000, 0, { flat: true })), /1 x 30000 pixels: its aspect ratio 30000.0:1 is over the limit of 200:1/);
  // the server still answers
  const strip = await ask(dataUrl(png(400, 2, 0, { flat: true }))); // 200:1, the limit
  assert.equal(strip.choices.length, 1);
  const ok = await ask(dataUrl(PNG_A));
  assert.equal(ok.choices.length, 1);
});

test('file:// URLs outside the folder all get the same 400, whether or not the file exists', async () => {
  const answer = async (url) => {
    try {
      await ask(url);
    } catch (e) {
      assert.ok(e instanceof OpenAI.APIError, String(e));
      return JSON.stringify([e.status, e.error]);
    }
    assert.fail(`${url} was accepted`);
  };
  fs.symlinkSync(path.join(tmp, 'outside.png'), path.join(MEDIA, 'link-out.png'));
  const want = await answer('file:///etc/passwd');
  assert.match(want, /outside the allowed local media path/);
  for (const url of ['file:///etc/pagedlm-no-such-file', `file://${path.join(tmp, 'outside.png')}`,
    `file://${MEDIA}/../outside.png`, `file://${MEDIA}/../no-such-file.png`, `file://${MEDIA}/link-out.png`]) {
    assert.equal(await answer(url), want, url);
  }
  // under the folder, a missing file is told so
  assert.match(await answer(`file://${MEDIA}/missing.png`), /does not exist/);
});

test('a text-only model refuses image parts with a 400', async () => {
  const text = await startServer(['--chat-template', TEMPLATE]);
  try {
    await assert.rejects(text.client().chat.completions.create({
      model: NAME, max_tokens: 4,
      messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: dataUrl(PNG_A) } }] }],
    }), (e) => e.status === 400 && /takes no images/.test(e.message));
  } finally {
    await text.stop();
  }
});
