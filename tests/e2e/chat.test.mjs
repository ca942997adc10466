// chat.test.mjs - /v1/chat/completions through the official OpenAI SDK, with
// a small test template given by --chat-template: the rendered prompt is what
// /tokenize shows, greedy chat equals a completion of those ids, streaming
// equals non-streaming (role chunk first), n, stop, logprobs, seeds, and
// template errors as 400.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { startServer, collect, NAME } from './server.mjs';

const TEMPLATE = path.join(path.dirname(fileURLToPath(import.meta.url)), 'fixtures/chat_template.jinja');
let srv;
let client;
before(async () => {
  srv = await startServer(['--chat-template', TEMPLATE]);
  client = srv.client();
});
after(async () => srv && srv.stop());

const MESSAGES = [
  { role: 'system', content: 'Once upon a time there was a girl.' },
  { role: 'user', content: [{ type: 'text', text: 'Tell me' }, { type: 'text', text: 'about the girl' }] },
];

async function tokenize(body) {
  const r = await fetch(`${srv.baseURL}/tokenize`, { method: 'POST', body: JSON.stringify(body) });
  assert.equal(r.status, 200);
  return r.json();
}

test('the template renders the messages; greedy chat equals a completion of the same ids', async () => {
  const tok = await tokenize({ model: NAME, messages: MESSAGES, return_token_strs: true });
  assert.equal(tok.tokens[0], 1, '<s> in the template is BOS, not its characters');
  assert.equal(tok.token_strs.join(''), 'Once upon a time there was a girl.\n\nUser: Tell me\nabout the girl\nAssistant:');
  const chat = await client.chat.completions.create({ model: NAME, messages: MESSAGES, max_tokens: 40, temperature: 0 });
  assert.equal(chat.object, 'chat.completion');
  assert.match(chat.id, /^chatcmpl-/);
  assert.equal(chat.choices[0].message.role, 'assistant');
  assert.equal(chat.usage.prompt_tokens, tok.count);
  const comp = await client.completions.create({ model: NAME, prompt: tok.tokens, max_tokens: 40, temperature: 0 });
  assert.equal(chat.choices[0].message.content, comp.choices[0].text);
  assert.equal(chat.choices[0].finish_reason, comp.choices[0].finish_reason);
  for (const k of ['prompt_tokens', 'completion_tokens', 'total_tokens']) assert.equal(chat.usage[k], comp.usage[k]);
  // the same prompt ids again: every full block but the one with the last token comes from the prefix cache
  assert.equal(comp.usage.prompt_tokens_details.cached_tokens, Math.floor((tok.count - 1) / 16) * 16);
});

test('streaming chat: role first, then the same content, usage and [DONE]', async () => {
  const body = { model: NAME, messages: MESSAGES, max_tokens: 30, temperature: 0 };
  const whole = await client.chat.completions.create(body);
  const stream = await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  assert.equal(chunks[0].object, 'chat.completion.chunk');
  assert.deepEqual(chunks[0].choices[0].delta, { role: 'assistant', content: '' });
  const text = chunks.flatMap((c) => c.choices.map((x) => x.delta.content ?? '')).join('');
  assert.equal(text, whole.choices[0].message.content);
  const last = chunks.at(-1);
  assert.deepEqual(last.choices, []);
  assert.deepEqual(last.usage, whole.usage);
  assert.equal(chunks.at(-2).choices[0].finish_reason, whole.choices[0].finish_reason);
});

test('n, seeds and stop with chat', async () => {
  const body = { model: NAME, messages: MESSAGES, max_tokens: 30, temperature: 1, n: 2, seed: 11 };
  const a = await client.chat.completions.create(body);
  const b = await client.chat.completions.create(body);
  assert.equal(a.choices.length, 2);
  assert.deepEqual(a.choices.map((c) => c.message.content), b.choices.map((c) => c.message.content));
  const s = await collect(await client.chat.completions.create({ ...body, stream: true }));
  assert.deepEqual(s.texts, a.choices.map((c) => c.message.content));
  const greedy = (await client.chat.completions.create({ model: NAME, messages: MESSAGES, max_tokens: 40,
    temperature: 0 })).choices[0].message.content;
  const cut = greedy.trim().split(' ')[2];
  const stopped = await client.chat.completions.create({ model: NAME, messages: MESSAGES, max_tokens: 40,
    temperature: 0, stop: [cut] });
  assert.equal(stopped.choices[0].message.content, greedy.slice(0, greedy.indexOf(cut)));
  assert.equal(stopped.choices[0].finish_reason, 'stop');
});

test('chat logprobs: content entries with bytes and top_logprobs', async () => {
  const r = await client.chat.completions.create({ model: NAME, messages: MESSAGES, max_tokens: 10, temperature: 0,
    logprobs: true, top_logprobs: 2 });
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, r.usage.completion_tokens);
  assert.equal(content.map((e) => e.token).join(''), r.choices[0].message.content);
  for (const e of content) {
    assert.deepEqual(e.bytes, [...Buffer.from(e.token, 'utf8')]);
    assert.equal(e.top_logprobs.length, 2);
    assert.equal(e.top_logprobs[0].logprob, e.logprob, 'greedy picks the most likely token');
  }
  const s = await client.chat.completions.create({ model: NAME, messages: MESSAGES, max_tokens: 10, temperature: 0,
    logprobs: true, top_logprobs: 2, stream: true });
  const streamed = [];
  for await (const c of s) for (const x of c.choices) if (x.logprobs) streamed.push(...x.logprobs.content);
  assert.deepEqual(streamed, content);
});

test('chat errors: template exception, bad messages, unsupported content', async () => {
  const bad = async (body, param) => assert.rejects(client.chat.completions.create({ model: NAME, max_tokens: 5, ...body }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === param);
  await bad({ messages: [{ role: 'robot', content: 'x' }] }, 'messages');
  await bad({ messages: [] }, 'messages');
  await bad({ messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] }, 'messages[0]');
  await bad({ messages: MESSAGES, top_logprobs: 2 }, 'top_logprobs');
  await bad({ messages: MESSAGES, max_tokens: 200 }, 'messages');
});

test('chat: logit_bias and max_completion_tokens through the SDK', async () => {
  const r = await client.chat.completions.create({ model: NAME, messages: [{ role: 'user', content: 'Hi' }],
    max_completion_tokens: 3, temperature: 0, logit_bias: { 3: 100 } });
  assert.equal(r.choices[0].message.content, '\u0000\u0000\u0000'); // <0x00> three times
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.choices[0].stop_reason, null);
});
