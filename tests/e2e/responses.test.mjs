// responses.test.mjs - OpenAI's Responses API (POST /v1/responses, what the
// Codex CLI speaks) through the official openai SDK's client.responses:
// plain and streamed (the published event sequence, sequence numbers, deltas
// adding up to the final output), a function tool call and its output sent
// back, text.format json_schema validated with ajv, reasoning items
// (--reasoning-parser qwen3), and the 400s for what is not supported.
//
// The model is Qwen3's architecture and vocabulary at width 64 with random
// weights (make-random-model --preset qwen3-test): its chat template renders
// tools and calls as Qwen3's does; its text is noise, so the tests force what
// they check (tool_choice, a schema, logit bias, the thinking budget).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Ajv from 'ajv/dist/2020.js';
import { startServer, BIN, TESTDATA } from './server.mjs';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pagedlm-responses-'));
const MODEL = path.join(tmp, 'qwen3-test');
const NAME = 'q';
const THINK = 151667;
const ajv = new Ajv({ strict: false });

let srv;
let client;
before(async () => {
  const r = spawnSync(BIN, ['make-random-model', '--preset', 'qwen3-test', '--format', 'hf', '--dtype', 'bf16',
    '--tokenizer', path.join(TESTDATA, 'tokenizers/qwen3'), '-o', MODEL], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  srv = await startServer(['--served-model-name', NAME, '--reasoning-parser', 'qwen3', '--max-model-len', '2048'],
    { model: MODEL });
  client = srv.client();
});
after(async () => {
  if (srv) await srv.stop();
  fs.rmSync(tmp, { recursive: true, force: true });
});

const WEATHER = { type: 'function', name: 'get_weather', description: 'The weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 12 } }, required: ['city'],
    additionalProperties: false } };

async function events(body) {
  const stream = await client.responses.create({ ...body, stream: true });
  const list = [];
  for await (const e of stream) list.push(e);
  return list;
}

test('a plain response: one message of output_text, incomplete at max_output_tokens, usage', async () => {
  const r = await client.responses.create({ model: NAME, input: 'Say hi', max_output_tokens: 8, temperature: 0 });
  assert.equal(r.object, 'response');
  assert.match(r.id, /^resp_/);
  assert.equal(r.status, 'incomplete');
  assert.deepEqual(r.incomplete_details, { reason: 'max_output_tokens' });
  assert.equal(r.output.length, 1);
  assert.equal(r.output[0].type, 'message');
  assert.equal(r.output[0].role, 'assistant');
  assert.equal(r.output[0].content[0].type, 'output_text');
  assert.equal(r.output_text, r.output[0].content[0].text); // the SDK's convenience
  assert.equal(r.usage.output_tokens, 8);
  assert.ok(r.usage.input_tokens > 0);
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + 8);
  assert.equal(r.max_output_tokens, 8);
});

test('streamed: the published event sequence, numbered from 0, deltas adding up to the same output', async () => {
  const body = { model: NAME, input: [{ role: 'user', content: [{ type: 'input_text', text: 'Say hi' }] }],
    instructions: 'Be brief.', max_output_tokens: 8, temperature: 0 };
  const whole = await client.responses.create(body);
  const list = await events(body);
  list.forEach((e, i) => assert.equal(e.sequence_number, i));
  assert.deepEqual(list.slice(0, 4).map((e) => e.type),
    ['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added']);
  assert.deepEqual(list.slice(-4).map((e) => e.type),
    ['response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.incomplete']);
  const text = list.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
  assert.equal(text, whole.output_text);
  const last = list.at(-1).response;
  assert.deepEqual(last.output.map((o) => o.content[0].text), [whole.output_text]);
  assert.equal(last.usage.output_tokens, 8);
});

test('a function call, then its output sent back as function_call_output', async () => {
  const r = await client.responses.create({ model: NAME, input: 'Weather in Paris?', tools: [WEATHER],
    tool_choice: 'required', max_output_tokens: 200, temperature: 1, seed: 2 });
  assert.equal(r.status, 'completed');
  const calls = r.output.filter((o) => o.type === 'function_call');
  assert.equal(calls.length >= 1, true, JSON.stringify(r.output));
  const call = calls[0];
  assert.equal(call.name, 'get_weather');
  assert.match(call.call_id, /^call_/);
  assert.ok(ajv.validate(WEATHER.parameters, JSON.parse(call.arguments)), call.arguments);
  // streamed: the argument deltas add up to the arguments
  const list = await events({ model: NAME, input: 'Weather in Paris?', tools: [WEATHER], tool_choice: 'required',
    max_output_tokens: 200, temperature: 1, seed: 2 });
  const dones = list.filter((e) => e.type === 'response.function_call_arguments.done');
  for (const done of dones) {
    const args = list.filter((e) => e.type === 'response.function_call_arguments.delta' && e.item_id === done.item_id)
      .map((e) => e.delta).join('');
    assert.equal(args, done.arguments);
  }
  assert.deepEqual(dones.map((d) => d.arguments), calls.map((c) => c.arguments));
  // the call and its output go back into the conversation
  const next = await client.responses.create({ model: NAME, tools: [WEATHER], max_output_tokens: 5, temperature: 0,
    input: [{ role: 'user', content: 'Weather in Paris?' },
      { type: 'function_call', call_id: call.call_id, name: call.name, arguments: call.arguments },
      { type: 'function_call_output', call_id: call.call_id, output: 'sunny, 21 C' }] });
  assert.equal(next.output[0].type, 'message');
  // an output whose call_id names no call is refused (chat's rule)
  await assert.rejects(client.responses.create({ model: NAME, input: [{ role: 'user', content: 'x' },
    { type: 'function_call_output', call_id: 'call_nobody', output: '1' }] }), (e) => e.status === 400);
});

test('text.format json_schema: the output validates', async () => {
  const schema = { type: 'object', properties: { n: { type: 'integer', minimum: 1, maximum: 9 }, tag: { type: 'string',
    maxLength: 6 } }, required: ['n', 'tag'], additionalProperties: false };
  const r = await client.responses.create({ model: NAME, input: 'Give me JSON', max_output_tokens: 100, temperature: 1,
    seed: 4, text: { format: { type: 'json_schema', name: 'thing', schema, strict: true } } });
  assert.equal(r.status, 'completed');
  assert.ok(ajv.validate(schema, JSON.parse(r.output_text)), r.output_text);
});

test('reasoning: a reasoning item before the message, streamed as reasoning_text deltas', async () => {
  const body = { model: NAME, input: 'Think first', max_output_tokens: 12, temperature: 0, logit_bias: { [THINK]: 100 },
    thinking_token_budget: 3, text: { format: { type: 'json_schema', name: 'n', schema: { type: 'integer',
      minimum: 10, maximum: 99 } } } };
  const r = await client.responses.create(body);
  assert.deepEqual(r.output.map((o) => o.type), ['reasoning', 'message']);
  assert.equal(r.output[0].content[0].text, '<think><think><think>');
  assert.match(r.output_text, /^[1-9][0-9]$/);
  const list = await events(body);
  const thought = list.filter((e) => e.type === 'response.reasoning_text.delta').map((e) => e.delta).join('');
  assert.equal(thought, '<think><think><think>');
  const firstText = list.findIndex((e) => e.type === 'response.output_text.delta');
  const lastThought = list.findLastIndex((e) => e.type === 'response.reasoning_text.delta');
  assert.ok(lastThought < firstText);
});

test('what is not supported is a 400 naming the field', async () => {
  const cases = [
    [{ store: true }, 'store'],
    [{ previous_response_id: 'resp_x' }, 'previous_response_id'],
    [{ tools: [{ type: 'web_search' }] }, 'tools'],
    [{ input: [{ type: 'computer_call' }] }, 'input[0]'],
    [{ text: { format: { type: 'yaml' } } }, 'text.format'],
  ];
  for (const [extra, param] of cases) {
    const r = await fetch(`${srv.baseURL}/v1/responses`, { method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: NAME, input: 'x', ...extra }) });
    assert.equal(r.status, 400, JSON.stringify(extra));
    const e = (await r.json()).error;
    assert.equal(e.param, param);
    assert.equal(e.type, 'invalid_request_error');
  }
});
