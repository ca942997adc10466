// messages.test.mjs - Anthropic's Messages API (POST /v1/messages, what
// Claude Code and the Anthropic SDKs speak) through the official
// @anthropic-ai/sdk: messages.create; messages.stream (the published event
// sequence, its finalMessage equal to the message a plain request gives);
// stop_sequences; a tool_use forced with tool_choice, its input validated
// with ajv, then a tool_result sent back; "auto" without
// --enable-auto-tool-choice; thinking blocks (--reasoning-parser qwen3);
// count_tokens; x-api-key and Bearer keys (--api-key); errors in Anthropic's
// shape.
//
// The model is Qwen3's architecture and vocabulary at width 64 with random
// weights (make-random-model --preset qwen3-test): its chat template renders
// tools, calls and the thinking switch as Qwen3's does; its text is noise, so
// the tests force what they check (tool_choice, a schema, logit bias, the
// thinking budget).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Anthropic from '@anthropic-ai/sdk';
import Ajv from 'ajv/dist/2020.js';
import { startServer, BIN, TESTDATA } from './server.mjs';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pagedlm-messages-'));
const MODEL = path.join(tmp, 'qwen3-test');
const NAME = 'q';
const THINK = 151667; // <think> in Qwen3's vocabulary
const ajv = new Ajv({ strict: false });
const SERVER_ARGS = ['--served-model-name', NAME, '--reasoning-parser', 'qwen3', '--max-model-len', '2048'];

let srv;
let client;
const anthropic = (baseURL, opts = {}) => new Anthropic({ baseURL, apiKey: 'none', maxRetries: 0, timeout: 60000,
  ...opts });

before(async () => {
  const r = spawnSync(BIN, ['make-random-model', '--preset', 'qwen3-test', '--format', 'hf', '--dtype', 'bf16',
    '--tokenizer', path.join(TESTDATA, 'tokenizers/qwen3'), '-o', MODEL], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  srv = await startServer(SERVER_ARGS, { model: MODEL });
  client = anthropic(srv.baseURL);
});
after(async () => {
  if (srv) await srv.stop();
  fs.rmSync(tmp, { recursive: true, force: true });
});

const WEATHER = { name: 'get_weather', description: 'The weather in a city',
  input_schema: { type: 'object', properties: { city: { type: 'string', maxLength: 12 } }, required: ['city'],
    additionalProperties: false } };
const USER = [{ role: 'user', content: 'Say hi' }];

// A raw SSE answer as [{event, data}].
async function rawEvents(body, base = srv.baseURL) {
  const r = await fetch(`${base}/v1/messages`, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ...body, stream: true }) });
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /^text\/event-stream/);
  const text = await r.text();
  return text.split('\n\n').filter((e) => e && !e.startsWith(':')).map((e) => {
    const m = /^event: (\S+)\ndata: (.*)$/s.exec(e);
    assert.ok(m, `not an event: ${e}`);
    return { event: m[1], data: JSON.parse(m[2]) };
  });
}

// The SDK's stream: its events and finalMessage.
async function streamed(body) {
  const stream = client.messages.stream(body);
  const events = [];
  for await (const e of stream) events.push(e);
  return { events, final: await stream.finalMessage() };
}

// What a streamed message must equal of the plain one (ids and usage aside:
// each response names its calls afresh, and the second request reads the
// prompt from the prefix cache).
function sameMessage(a, b) {
  const noIds = (content) => content.map((block) => {
    if (block.type !== 'tool_use') return block;
    assert.match(block.id, /^call_/);
    return { ...block, id: 'x' };
  });
  assert.deepEqual(noIds(a.content), noIds(b.content));
  for (const k of ['type', 'role', 'model', 'stop_reason', 'stop_sequence']) assert.deepEqual(a[k], b[k], k);
  assert.equal(a.usage.output_tokens, b.usage.output_tokens);
  assert.equal(a.usage.input_tokens + a.usage.cache_read_input_tokens,
    b.usage.input_tokens + b.usage.cache_read_input_tokens);
}

test('messages.create: a text message, max_tokens, usage', async () => {
  const r = await client.messages.create({ model: NAME, max_tokens: 8, temperature: 0, system: 'Be brief.',
    messages: USER });
  assert.equal(r.type, 'message');
  assert.equal(r.role, 'assistant');
  assert.equal(r.model, NAME);
  assert.match(r.id, /^msg_[0-9a-f]{32}$/);
  assert.deepEqual(r.content.map((b) => b.type), ['text']);
  assert.ok(r.content[0].text.length > 0);
  assert.equal(r.stop_reason, 'max_tokens');
  assert.equal(r.stop_sequence, null);
  assert.equal(r.usage.output_tokens, 8);
  assert.ok(r.usage.input_tokens > 0);
  // the system prompt is in the prompt: one more message, more tokens
  const bare = await client.messages.create({ model: NAME, max_tokens: 1, messages: USER });
  assert.ok(r.usage.input_tokens + r.usage.cache_read_input_tokens >
    bare.usage.input_tokens + bare.usage.cache_read_input_tokens);
});

test('stop_sequences: the text ends before the first one, stop_reason stop_sequence', async () => {
  const body = { model: NAME, temperature: 0, messages: [{ role: 'user', content: 'Hi' }] };
  const text = (await client.messages.create({ ...body, max_tokens: 8 })).content[0].text;
  const stop = text.slice(-3);
  const r = await client.messages.create({ ...body, max_tokens: 16, stop_sequences: ['NEVER', stop] });
  assert.equal(r.stop_reason, 'stop_sequence');
  assert.equal(r.stop_sequence, stop);
  assert.equal(r.content.find((b) => b.type === 'text')?.text ?? '', text.slice(0, text.indexOf(stop)));
});

test('messages.stream: the published event sequence; finalMessage equals the plain message', async () => {
  const body = { model: NAME, max_tokens: 8, temperature: 0, system: [{ type: 'text', text: 'Be brief.' }],
    messages: USER };
  const whole = await client.messages.create(body);
  const raw = await rawEvents(body);
  for (const e of raw) assert.equal(e.event, e.data.type);
  assert.match(raw.map((e) => e.event).join(' '),
    /^message_start ping content_block_start( content_block_delta)+ content_block_stop message_delta message_stop$/);
  const start = raw[0].data.message;
  assert.deepEqual(start.content, []);
  assert.equal(start.stop_reason, null);
  assert.equal(start.usage.input_tokens, whole.usage.input_tokens + whole.usage.cache_read_input_tokens);
  assert.deepEqual(raw[2].data, { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } });
  const deltas = raw.filter((e) => e.event === 'content_block_delta');
  assert.ok(deltas.every((e) => e.data.index === 0 && e.data.delta.type === 'text_delta'));
  assert.equal(deltas.map((e) => e.data.delta.text).join(''), whole.content[0].text);
  assert.deepEqual(raw.at(-2).data.delta, { stop_reason: 'max_tokens', stop_sequence: null });
  assert.equal(raw.at(-2).data.usage.output_tokens, 8);
  // the SDK's accumulation
  const { events, final } = await streamed(body);
  assert.equal(events[0].type, 'message_start');
  assert.equal(events.at(-1).type, 'message_stop');
  sameMessage(final, whole);
});

test('a forced tool_use validates against input_schema; its tool_result goes back', async () => {
  const body = { model: NAME, max_tokens: 200, temperature: 1, seed: 2, tools: [WEATHER],
    tool_choice: { type: 'any', disable_parallel_tool_use: true },
    messages: [{ role: 'user', content: 'Weather in Paris?' }] };
  const r = await client.messages.create(body);
  assert.equal(r.stop_reason, 'tool_use');
  const uses = r.content.filter((b) => b.type === 'tool_use');
  assert.equal(uses.length, 1, JSON.stringify(r.content));
  const use = uses[0];
  assert.equal(use.name, 'get_weather');
  assert.equal(typeof use.id, 'string');
  assert.ok(ajv.validate(WEATHER.input_schema, use.input), JSON.stringify(use.input));
  // streamed: input_json_delta fragments add up to the same input
  const { events, final } = await streamed(body);
  const startIdx = events.findIndex((e) => e.type === 'content_block_start' && e.content_block.type === 'tool_use');
  assert.ok(startIdx > 0);
  const index = events[startIdx].index;
  const json = events.filter((e) => e.type === 'content_block_delta' && e.index === index)
    .map((e) => { assert.equal(e.delta.type, 'input_json_delta'); return e.delta.partial_json; }).join('');
  assert.deepEqual(JSON.parse(json), use.input);
  sameMessage(final, r);
  // the call and its result go back into the conversation
  const history = [...body.messages, { role: 'assistant', content: r.content },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: 'sunny, 21 C' }] }];
  const next = await client.messages.create({ model: NAME, max_tokens: 5, temperature: 0, tools: [WEATHER],
    tool_choice: { type: 'none' }, messages: history });
  assert.equal(next.type, 'message');
  assert.equal(next.stop_reason, 'max_tokens');
  assert.ok(next.usage.input_tokens + next.usage.cache_read_input_tokens >
    r.usage.input_tokens + r.usage.cache_read_input_tokens + 10);
  // a result whose tool_use_id names no call is refused (chat's rule)
  await assert.rejects(client.messages.create({ model: NAME, max_tokens: 5, tools: [WEATHER],
    messages: [...body.messages, { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_nobody',
      content: 'x' }] }] }), (e) => e instanceof Anthropic.BadRequestError && e.type === 'invalid_request_error');
});

test('tool_choice {type: "tool"} names the call and says tool_use; "auto" needs no server flag', async () => {
  const r = await client.messages.create({ model: NAME, max_tokens: 200, temperature: 1, seed: 3,
    tools: [WEATHER, { name: 'get_time', input_schema: { type: 'object', properties: {} } }],
    tool_choice: { type: 'tool', name: 'get_time' }, messages: [{ role: 'user', content: 'What time is it?' }] });
  assert.equal(r.stop_reason, 'tool_use');
  assert.ok(r.content.length >= 1);
  for (const b of r.content.filter((x) => x.type === 'tool_use')) assert.equal(b.name, 'get_time');
  assert.ok(r.content.some((b) => b.type === 'tool_use'));
  // the server runs without --enable-auto-tool-choice, where chat refuses "auto"; Messages clients always send it
  const auto = await client.messages.create({ model: NAME, max_tokens: 4, temperature: 0, tools: [WEATHER],
    tool_choice: { type: 'auto' }, messages: USER });
  assert.equal(auto.type, 'message');
  const chat = await fetch(`${srv.baseURL}/v1/chat/completions`, { method: 'POST',
    headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: NAME, max_tokens: 4, messages: USER,
      tools: [{ type: 'function', function: { name: 'get_weather', parameters: WEATHER.input_schema } }],
      tool_choice: 'auto' }) });
  assert.equal(chat.status, 400);
});

test('thinking: a thinking block before the text, streamed as thinking_delta; disabled reaches the template',
  async () => {
    const body = { model: NAME, max_tokens: 12, temperature: 0, logit_bias: { [THINK]: 100 },
      thinking: { type: 'enabled', budget_tokens: 3 },
      output_config: { format: { type: 'json_schema', schema: { type: 'integer', minimum: 10, maximum: 99 } } },
      messages: [{ role: 'user', content: 'Think first' }] };
    const r = await client.messages.create(body);
    assert.deepEqual(r.content.map((b) => b.type), ['thinking', 'text']);
    assert.equal(r.content[0].thinking, '<think><think><think>');
    assert.equal(typeof r.content[0].signature, 'string');
    assert.match(r.content[1].text, /^[1-9][0-9]$/);
    const raw = await rawEvents(body);
    const thinking = raw.filter((e) => e.data.delta?.type === 'thinking_delta');
    assert.equal(thinking.map((e) => e.data.delta.thinking).join(''), '<think><think><think>');
    assert.ok(thinking.every((e) => e.data.index === 0));
    const sig = raw.findIndex((e) => e.data.delta?.type === 'signature_delta');
    assert.ok(sig > raw.indexOf(thinking.at(-1)));
    assert.deepEqual(raw[sig + 1].data, { type: 'content_block_stop', index: 0 });
    const text = raw.filter((e) => e.data.delta?.type === 'text_delta');
    assert.ok(text.length > 0 && text.every((e) => e.data.index === 1));
    const { final } = await streamed(body);
    sameMessage(final, r);
    // disabled: Qwen3's template writes an empty block into the prompt
    const count = async (extra) => (await client.messages.countTokens({ model: NAME, messages: USER, ...extra }))
      .input_tokens;
    assert.ok(await count({ thinking: { type: 'disabled' } }) > await count({}));
    const off = await client.messages.create({ model: NAME, max_tokens: 4, temperature: 0, messages: USER,
      thinking: { type: 'disabled' } });
    assert.deepEqual(off.content.map((b) => b.type), ['text']);
  });

test('count_tokens: the prompt create renders, tools included', async () => {
  const body = { model: NAME, system: 'Be brief.', messages: [{ role: 'user', content: 'Weather in Paris?' }] };
  const bare = await client.messages.countTokens(body);
  const withTools = await client.messages.countTokens({ ...body, tools: [WEATHER] });
  assert.ok(withTools.input_tokens > bare.input_tokens + 20, JSON.stringify([bare, withTools]));
  assert.deepEqual(Object.keys(withTools), ['input_tokens']);
  const r = await client.messages.create({ ...body, tools: [WEATHER], max_tokens: 1 });
  assert.equal(r.usage.input_tokens + r.usage.cache_read_input_tokens, withTools.input_tokens);
});

test('errors in Anthropic\'s shape: max_tokens missing, an unknown model, a server tool, malformed JSON', async () => {
  const post = async (body, p = '/v1/messages') => {
    const r = await fetch(`${srv.baseURL}${p}`, { method: 'POST', headers: { 'content-type': 'application/json' },
      body: typeof body === 'string' ? body : JSON.stringify(body) });
    return { status: r.status, body: await r.json() };
  };
  const check = (r, status, type, needle) => {
    assert.equal(r.status, status);
    assert.deepEqual(Object.keys(r.body), ['type', 'error']);
    assert.equal(r.body.type, 'error');
    assert.deepEqual(Object.keys(r.body.error), ['type', 'message']);
    assert.equal(r.body.error.type, type);
    assert.match(r.body.error.message, needle);
  };
  check(await post({ model: NAME, messages: USER }), 400, 'invalid_request_error', /max_tokens/);
  check(await post({ model: 'claude-sonnet-4-5', max_tokens: 4, messages: USER }), 404, 'not_found_error',
    /claude-sonnet-4-5/);
  check(await post({ model: NAME, max_tokens: 4, messages: USER, tools: [{ type: 'web_search_20250305',
    name: 'web_search' }] }), 400, 'invalid_request_error', /web_search_20250305/);
  check(await post('{"model": '), 400, 'invalid_request_error', /not valid JSON/);
  check(await post({ model: NAME, messages: 'x' }, '/v1/messages/count_tokens'), 400, 'invalid_request_error',
    /messages/);
  // the SDK reads them
  await assert.rejects(client.messages.create({ model: NAME, messages: USER }),
    (e) => e instanceof Anthropic.BadRequestError && e.type === 'invalid_request_error' &&
      /max_tokens/.test(e.message));
  await assert.rejects(client.messages.create({ model: 'claude-x', max_tokens: 4, messages: USER }),
    (e) => e instanceof Anthropic.NotFoundError && e.type === 'not_found_error');
});

test('--api-key: x-api-key and Bearer are taken; a wrong key is a 401 authentication_error', async () => {
  const KEY = 'sk-test-messages';
  const s = await startServer([...SERVER_ARGS, '--api-key', KEY], { model: MODEL });
  try {
    const body = { model: NAME, max_tokens: 2, messages: USER };
    // x-api-key (the SDK's apiKey), with the headers Claude Code sends
    const byKey = anthropic(s.baseURL, { apiKey: KEY,
      defaultHeaders: { 'anthropic-beta': 'prompt-caching-2024-07-31' } });
    assert.equal((await byKey.messages.create(body)).type, 'message');
    assert.ok((await byKey.messages.countTokens({ model: NAME, messages: USER })).input_tokens > 0);
    // Bearer (the SDK's authToken)
    const byToken = anthropic(s.baseURL, { apiKey: null, authToken: KEY });
    assert.equal((await byToken.messages.create(body)).type, 'message');
    for (const opts of [{ apiKey: 'wrong' }, { apiKey: KEY + 'x' }, { apiKey: null, authToken: 'wrong' }]) {
      await assert.rejects(anthropic(s.baseURL, opts).messages.create(body),
        (e) => e instanceof Anthropic.AuthenticationError && e.status === 401 && e.type === 'authentication_error');
    }
    const raw = await fetch(`${s.baseURL}/v1/messages`, { method: 'POST',
      headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    assert.equal(raw.status, 401);
    assert.deepEqual((await raw.json()).error.type, 'authentication_error');
    // x-api-key on the OpenAI routes too; their 401 keeps OpenAI's shape
    assert.equal((await fetch(`${s.baseURL}/v1/models`, { headers: { 'x-api-key': KEY } })).status, 200);
    const openai = await fetch(`${s.baseURL}/v1/models`, { headers: { 'x-api-key': 'wrong' } });
    assert.equal(openai.status, 401);
    assert.equal((await openai.json()).error.code, 'invalid_api_key');
  } finally {
    await s.stop();
  }
});
