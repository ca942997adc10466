// vision_qwen.test.mjs - a Qwen2.5-VL image in a chat request through the
// official OpenAI SDK: a tiny random Qwen2.5-VL (vlm_model.mjs) served from
// its Hugging Face folder; the image part becomes the placeholder its chat
// template writes (<|vision_start|><|image_pad|><|vision_end|>), expanded to
// one <|image_pad|> per merged cell; greedy output and prompt tokens equal
// `pagedlm run` with the same image at <__media__>; another image (of
// another size, so another row count and other M-RoPE positions) changes the
// prompt's length and the first token's logprobs.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startServer, BIN, TESTDATA, NAME } from './server.mjs';
import { writeQwen25vl, png } from './vlm_model.mjs';

const TEMPLATE = path.join(path.dirname(fileURLToPath(import.meta.url)), 'fixtures/chat_template.jinja');
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pagedlm-qwenvl-'));
const MODEL_DIR = path.join(tmp, 'qwen25vl');
const PNG_A = png(40, 30, 1); // smart_resize: 40 x 32 px, 10 x 8 patches, 20 rows
const PNG_B = png(57, 71, 2); // over the budget: 40 x 56 px, 10 x 14 patches, 35 rows
const dataUrl = (b) => `data:image/png;base64,${b.toString('base64')}`;

let srv;
let client;
before(async () => {
  writeQwen25vl(MODEL_DIR, TESTDATA);
  srv = await startServer(['--chat-template', TEMPLATE], { model: MODEL_DIR });
  client = srv.client();
});
after(async () => {
  if (srv) await srv.stop();
  fs.rmSync(tmp, { recursive: true, force: true });
});

const ask = (url, extra = {}) => client.chat.completions.create({
  model: NAME, max_tokens: 10, temperature: 0,
  messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url } }, { type: 'text', text: 'What is this?' }] }],
  ...extra,
});

test('a Qwen2.5-VL image: greedy output equals pagedlm run with the image at <__media__>', async () => {
  const chat = await ask(dataUrl(PNG_A));
  fs.writeFileSync(path.join(tmp, 'a-cli.png'), PNG_A);
  const r = spawnSync(BIN, ['run', '-m', MODEL_DIR, '--image', path.join(tmp, 'a-cli.png'), '-p',
    'User: <__media__>\nWhat is this?\nAssistant:', '-n', '10', '--temp', '0', '--json'], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  const cli = JSON.parse(r.stdout);
  assert.equal(chat.usage.prompt_tokens, cli.prompt_tokens.length);
  const pads = cli.prompt_tokens.filter((t) => t === 514).length;
  assert.equal(pads, 20);
  const at = cli.prompt_tokens.indexOf(514);
  assert.equal(cli.prompt_tokens[at - 1], 512);
  assert.equal(cli.prompt_tokens[at + pads], 513);
  assert.equal(chat.usage.completion_tokens, cli.tokens.length);
  assert.equal(chat.choices[0].message.content, cli.text);
});

test('another image of another size: more rows, other logprobs', async () => {
  const lp = { logprobs: true, top_logprobs: 2 };
  const a = await ask(dataUrl(PNG_A), lp);
  const b = await ask(dataUrl(PNG_B), lp);
  assert.equal(b.usage.prompt_tokens - a.usage.prompt_tokens, 35 - 20);
  assert.notDeepEqual(a.choices[0].logprobs.content[0].top_logprobs, b.choices[0].logprobs.content[0].top_logprobs);
});
