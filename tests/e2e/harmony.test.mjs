// harmony.test.mjs - OpenAI's harmony format (gpt-oss) end to end through the
// official OpenAI SDK: the analysis channel returned apart from the content
// (message.reasoning / reasoning_content, delta.reasoning before any
// content), the final channel as the content, and a tool call from a
// commentary message to functions.NAME; whole and streamed.
//
// The model is a tiny random gpt-oss (`make-random-model --preset
// gpt-oss-test`: sinks, windowed layers, YaRN, MXFP4 experts) with
// qwen3-tiny's tokenizer given harmony's seven control tokens, written as
// llama.cpp's converter writes a gpt-oss GGUF: <|return|> its only EOS (the
// loader adds <|call|>), served with a harmony chat template; the server
// reads its output as harmony because <|channel|> is one token of its
// vocabulary. Random weights write noise, so the output is constrained where
// the test needs the format: a json_schema (the answer must be the final
// channel's JSON after an optional analysis message), a required tool call,
// and logit biases that steer greedy decoding: <|channel|> as its control
// token, then the analysis channel (which max_tokens cuts), the final one, or
// the commentary channel.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { startServer, TESTDATA, NAME, BIN } from './server.mjs';

const MARKERS = ['<|start|>', '<|channel|>', '<|message|>', '<|end|>', '<|constrain|>', '<|call|>', '<|return|>'];
const ID = Object.fromEntries(MARKERS.map((m, i) => [m, 1203 + i]));
const TEMPLATE = '{% for m in messages %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>{% endfor %}' +
  '{% if add_generation_prompt %}<|start|>assistant{% endif %}';

// qwen3-tiny's tokenizer with the harmony tokens after its 1203 tokens,
// <|return|> its EOS, in a gpt-oss GGUF of 1536 rows; the template beside it.
function harmonyModel(dir) {
  const src = path.join(TESTDATA, 'models/qwen3-tiny/hf');
  const tokDir = path.join(dir, 'tokenizer');
  fs.mkdirSync(tokDir);
  const cfg = JSON.parse(fs.readFileSync(path.join(src, 'tokenizer_config.json'), 'utf8'));
  cfg.eos_token = '<|return|>';
  fs.writeFileSync(path.join(tokDir, 'tokenizer_config.json'), JSON.stringify(cfg));
  const tok = JSON.parse(fs.readFileSync(path.join(src, 'tokenizer.json'), 'utf8'));
  assert.equal(tok.added_tokens.at(-1).id, 1202);
  MARKERS.forEach((content) => tok.added_tokens.push({ id: ID[content], content, single_word: false, lstrip: false,
    rstrip: false, normalized: false, special: true }));
  fs.writeFileSync(path.join(tokDir, 'tokenizer.json'), JSON.stringify(tok));
  const model = path.join(dir, 'gpt-oss-test.gguf');
  execFileSync(BIN, ['make-random-model', '--preset', 'gpt-oss-test', '--vocab', '1536', '--dtype', 'mxfp4',
    '--tokenizer', tokDir, '--seed', '7', '-o', model], { stdio: 'ignore' });
  const info = JSON.parse(execFileSync(BIN, ['info', '-m', model], { encoding: 'utf8' }));
  assert.equal(info.arch, 'gpt-oss');
  assert.match(info.weight_types, /MXFP4/);
  const template = path.join(dir, 'harmony.jinja');
  fs.writeFileSync(template, TEMPLATE);
  return { model, template };
}

let dir;
let srv;
let client;
before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pagedlm-harmony-'));
  const { model, template } = harmonyModel(dir);
  srv = await startServer(['--max-model-len', '1024', '--enable-auto-tool-choice', '--chat-template', template],
    { model });
  client = srv.client();
});
after(async () => {
  if (srv) await srv.stop();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

async function tokenIds(text) {
  const r = await fetch(`${srv.baseURL}/tokenize`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: text, add_special_tokens: false }),
  });
  return (await r.json()).tokens;
}

const SCHEMA = { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'], additionalProperties: false };
const MESSAGES = [{ role: 'user', content: 'Give me a number.' }];

// Greedy decoding writes <|channel|> as its token, then the channel whose
// name's first token is favoured (its biased token then fills free text).
async function channelBias(name) {
  const [first] = await tokenIds(name);
  return { [ID['<|channel|>']]: 10, ...(name ? { [first]: 10 } : {}) };
}

function noMarkers(s) {
  for (const m of MARKERS) assert.ok(!s.includes(m), `'${m}' leaked into ${JSON.stringify(s)}`);
}

test('chat: the analysis channel is the reasoning, apart from the content; streamed alike', async () => {
  // the analysis message's free text until max_tokens: all reasoning, no content
  const body = { model: NAME, messages: MESSAGES, temperature: 0, max_tokens: 24, logit_bias: await channelBias('analysis'),
    response_format: { type: 'json_schema', json_schema: { name: 'n', schema: SCHEMA } } };
  const r = await client.chat.completions.create(body);
  const msg = r.choices[0].message;
  assert.equal(typeof msg.reasoning, 'string', JSON.stringify(msg));
  assert.ok(msg.reasoning.length > 0);
  assert.equal(msg.reasoning_content, msg.reasoning);
  noMarkers(msg.reasoning);
  assert.ok(!msg.content, JSON.stringify(msg));
  assert.equal(r.choices[0].finish_reason, 'length');

  // streamed: the same reasoning, in deltas, and no content
  const stream = await client.chat.completions.create({ ...body, stream: true });
  let reasoning = '';
  let content = '';
  for await (const chunk of stream) {
    const d = chunk.choices[0]?.delta ?? {};
    if (d.reasoning) {
      assert.equal(d.reasoning_content, d.reasoning);
      reasoning += d.reasoning;
    }
    if (d.content) content += d.content;
  }
  assert.equal(reasoning, msg.reasoning);
  assert.equal(content, '');
});

test('chat: the final channel is the content (json_schema), whole and streamed', async () => {
  const body = { model: NAME, messages: MESSAGES, temperature: 0, max_tokens: 64, logit_bias: await channelBias(''),
    response_format: { type: 'json_schema', json_schema: { name: 'n', schema: SCHEMA } } };
  const r = await client.chat.completions.create(body);
  const msg = r.choices[0].message;
  const answer = JSON.parse(msg.content);
  assert.ok(Number.isInteger(answer.n) && Object.keys(answer).length === 1, msg.content);
  noMarkers(msg.content);
  assert.equal(r.choices[0].finish_reason, 'stop');
  const stream = await client.chat.completions.create({ ...body, stream: true });
  let content = '';
  for await (const chunk of stream) content += chunk.choices[0]?.delta?.content ?? '';
  assert.equal(content, msg.content);
});

const TOOLS = [{ type: 'function', function: { name: 'get_weather', description: 'The weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 12 } }, required: ['city'],
    additionalProperties: false } } }];

test('chat: a commentary message to functions.get_weather is a tool call, whole and streamed', async () => {
  const body = { model: NAME, messages: [{ role: 'user', content: 'Weather in Paris?' }], tools: TOOLS,
    tool_choice: 'required', temperature: 0, max_tokens: 96, logit_bias: await channelBias('commentary') };
  const r = await client.chat.completions.create(body);
  const msg = r.choices[0].message;
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  assert.equal(msg.tool_calls.length, 1);
  const call = msg.tool_calls[0];
  assert.equal(call.type, 'function');
  assert.equal(call.function.name, 'get_weather');
  assert.ok(/^call_[A-Za-z0-9]{24}$/.test(call.id), call.id);
  const args = JSON.parse(call.function.arguments);
  assert.equal(typeof args.city, 'string');
  assert.equal(msg.content, null);
  if (msg.reasoning) noMarkers(msg.reasoning);

  const stream = await client.chat.completions.create({ ...body, stream: true });
  let name = '';
  let argText = '';
  let finish = null;
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    for (const tc of c?.delta?.tool_calls ?? []) {
      if (tc.function?.name) name += tc.function.name;
      if (tc.function?.arguments) argText += tc.function.arguments;
    }
    if (c?.finish_reason) finish = c.finish_reason;
  }
  assert.equal(name, 'get_weather');
  assert.equal(argText, call.function.arguments);
  assert.equal(finish, 'tool_calls');
});

test('chat: reasoning_effort reaches the template; an unknown one is a 400', async () => {
  await assert.rejects(client.chat.completions.create({ model: NAME, messages: MESSAGES, max_tokens: 4,
    reasoning_effort: 'extreme' }), (e) => e.status === 400 && /reasoning_effort/.test(e.message));
  const r = await client.chat.completions.create({ model: NAME, messages: MESSAGES, max_tokens: 4,
    reasoning_effort: 'high', temperature: 0 });
  assert.equal(r.choices[0].message.role, 'assistant');
});
