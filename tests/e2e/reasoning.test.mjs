// reasoning.test.mjs - a reasoning model's thinking apart from its answer
// (--reasoning-parser qwen3) through the official OpenAI SDK: message.reasoning
// and reasoning_content, streamed as delta.reasoning before any content; the
// thinking budget forcing </think>; a grammar constraining the answer only;
// Qwen3's own template with enable_thinking true and false; and a template
// whose generation prompt opens the block (the output starts inside it).
//
// The model is Qwen3's architecture and real vocabulary (151936 tokens, with
// <think> and </think> as single tokens) at width 64 with random weights
// (`pagedlm make-random-model --preset qwen3-test`), its folder carrying
// Qwen3's tokenizer_config.json and chat template. Its text is noise; logit
// bias and the budget make the thinking block happen where the test needs it.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer, BIN, TESTDATA } from './server.mjs';

const THINK = 151667; // <think> in Qwen3's vocabulary
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pagedlm-reasoning-'));
const MODEL = path.join(tmp, 'qwen3-test');
const OPENS = path.join(tmp, 'opens.jinja');
const NAME = 'q';

let srv;
let client;
before(async () => {
  const r = spawnSync(BIN, ['make-random-model', '--preset', 'qwen3-test', '--format', 'hf', '--dtype', 'bf16',
    '--tokenizer', path.join(TESTDATA, 'tokenizers/qwen3'), '-o', MODEL], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  // a template whose generation prompt opens the thinking block, as DeepSeek-R1's does
  fs.writeFileSync(OPENS, "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}" +
    '<|im_start|>assistant\n<think>\n');
  srv = await startServer(['--served-model-name', NAME, '--reasoning-parser', 'qwen3', '--max-model-len', '1024'],
    { model: MODEL });
  client = srv.client();
});
after(async () => {
  if (srv) await srv.stop();
  fs.rmSync(tmp, { recursive: true, force: true });
});

const USER = [{ role: 'user', content: 'What is 2 + 2?' }];

async function streamed(body) {
  const stream = await client.chat.completions.create({ ...body, stream: true });
  let reasoning = '', reasoningContent = '', content = '', finish = null, contentFirst = false;
  for await (const chunk of stream) {
    const d = chunk.choices[0]?.delta ?? {};
    if (d.reasoning) {
      assert.equal(content, '', 'reasoning after content');
      reasoning += d.reasoning;
    }
    if (d.reasoning_content) reasoningContent += d.reasoning_content;
    if (d.content) content += d.content;
    if (chunk.choices[0]?.finish_reason) finish = chunk.choices[0].finish_reason;
    contentFirst ||= !!d.content && !reasoning;
  }
  return { reasoning, reasoningContent, content, finish };
}

test('the model opens the block, the budget closes it, the grammar takes the answer: split, streamed and not', async () => {
  // <think> biased up: the model opens the block with it and keeps writing it inside, where no grammar applies;
  // after 3 tokens </think> is forced; the answer follows the regex, which allows no <think>
  const body = { model: NAME, messages: USER, max_tokens: 40, temperature: 0, logit_bias: { [THINK]: 100 },
    thinking_token_budget: 3, structured_outputs: { regex: '[a-z]{4}' } };
  const r = await client.chat.completions.create(body);
  const m = r.choices[0].message;
  assert.equal(m.reasoning, '<think><think><think>');
  assert.equal(m.reasoning_content, m.reasoning);
  assert.match(m.content, /^[a-z]{4}$/);
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.ok(r.usage.completion_tokens >= 6, `${r.usage.completion_tokens} tokens`); // <think>, 3 inside, </think>, answer
  const s = await streamed(body);
  assert.equal(s.reasoning, m.reasoning);
  assert.equal(s.reasoningContent, m.reasoning);
  assert.equal(s.content, m.content);
  assert.equal(s.finish, 'stop');
  // include_reasoning false (vLLM's): the answer alone
  const hidden = await client.chat.completions.create({ ...body, include_reasoning: false });
  assert.equal(hidden.choices[0].message.reasoning, null);
  assert.equal(hidden.choices[0].message.content, m.content);
});

test('a budget of 0 keeps the block shut; no budget lets it run to max_tokens', async () => {
  const shut = await client.chat.completions.create({ model: NAME, messages: USER, max_tokens: 6, temperature: 0,
    logit_bias: { [THINK]: 100 }, thinking_token_budget: 0 });
  assert.equal(shut.choices[0].message.reasoning, null);
  assert.doesNotMatch(shut.choices[0].message.content, /^<think>/);
  const open = await client.chat.completions.create({ model: NAME, messages: USER, max_tokens: 6, temperature: 0,
    logit_bias: { [THINK]: 100 } });
  assert.equal(open.choices[0].message.reasoning, '<think>'.repeat(5));
  assert.equal(open.choices[0].message.content, '');
  assert.equal(open.choices[0].finish_reason, 'length');
});

test("Qwen3's template with enable_thinking false writes an empty block into the prompt: all is answer", async () => {
  const tok = await (await fetch(`${srv.baseURL}/tokenize`, { method: 'POST', body: JSON.stringify({ model: NAME,
    messages: USER, chat_template_kwargs: { enable_thinking: false }, return_token_strs: true }) })).json();
  assert.match(tok.token_strs.join(''), /assistant\n<think>\n\n<\/think>\n\n$/);
  const r = await client.chat.completions.create({ model: NAME, messages: USER, max_tokens: 5, temperature: 0,
    chat_template_kwargs: { enable_thinking: false }, structured_outputs: { regex: '[0-9]{3}' } });
  assert.equal(r.choices[0].message.reasoning, null);
  assert.match(r.choices[0].message.content, /^[0-9]{3}$/);
});

test('a template that opens the block: the output starts inside it', async () => {
  const own = await startServer(['--served-model-name', NAME, '--reasoning-parser', 'deepseek_r1', '--chat-template',
    OPENS, '--reasoning-budget', '4'], { model: MODEL });
  try {
    const c = own.client();
    const r = await c.chat.completions.create({ model: NAME, messages: USER, max_tokens: 20, temperature: 0,
      structured_outputs: { regex: '[0-9]{3}' } });
    const m = r.choices[0].message;
    assert.equal(typeof m.reasoning, 'string'); // 4 tokens of noise, then </think> forced by the server's budget
    assert.match(m.content, /^[0-9]{3}$/);
    assert.ok(r.usage.completion_tokens >= 6, `${r.usage.completion_tokens} tokens`); // 4 inside, </think>, answer
  } finally {
    await own.stop();
  }
});

test('thinking_token_budget needs a reasoning parser: 400 naming the field', async () => {
  const plain = await startServer(['--served-model-name', NAME], { model: MODEL });
  try {
    const r = await fetch(`${plain.baseURL}/v1/chat/completions`, { method: 'POST', headers: { 'content-type':
      'application/json' }, body: JSON.stringify({ model: NAME, messages: USER, thinking_token_budget: 10 }) });
    assert.equal(r.status, 400);
    assert.equal((await r.json()).error.param, 'thinking_token_budget');
  } finally {
    await plain.stop();
  }
});
