// structured.test.mjs - structured output and tool calls through the official
// OpenAI SDK: JSON Schemas (response_format), vLLM's structured_outputs
// (choice, regex, grammar) and llama.cpp's grammar field, forced and parsed
// tool calls (in every --tool-call-parser format), streaming tool-call deltas, a conversation with a tool result
// (and a result for no earlier call refused), and 400s that name the keyword.
//
// Every output is sampled (temperature 1, fixed seeds) from stories260K, a
// model that knows nothing of JSON: whatever it produces must parse and
// validate, which only the mask can make true. Its file declares 128
// positions; --max-model-len 1024, allowed explicitly, makes room for the
// tools in chat prompts (the positions past 128 are as good as any for a test
// of the mask). Validation is independent of the server: ajv (with
// ajv-formats) checks each output against its schema.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import Ajv from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { startServer, NAME, ALLOW_LONG } from './server.mjs';

const TEMPLATE = path.join(path.dirname(fileURLToPath(import.meta.url)), 'fixtures/chat_template_tools.jinja');
const ajv = new Ajv({ strict: false, allErrors: true });
addFormats(ajv);

let srv;
let client;
before(async () => {
  srv = await startServer(['--chat-template', TEMPLATE, '--max-model-len', '1024', '--enable-auto-tool-choice', '--tool-call-parser', 'hermes'],
    { env: ALLOW_LONG });
  client = srv.client();
});
after(async () => srv && srv.stop());

const S = (maxLength = 16) => ({ type: 'string', maxLength });
const SCHEMAS = {
  person: { type: 'object', properties: { name: S(), age: { type: 'integer', minimum: 0, maximum: 120 } },
    required: ['name', 'age'], additionalProperties: false },
  enum: { type: 'string', enum: ['red', 'green', 'blue'] },
  const: { const: { kind: 'fixed', n: 3 } },
  int_array: { type: 'array', items: { type: 'integer' }, minItems: 1, maxItems: 4 },
  bounded_number: { type: 'number', minimum: -2.5, maximum: 1000 },
  negative_range: { type: 'integer', minimum: -50, maximum: -10 },
  exclusive: { type: 'integer', exclusiveMinimum: 5, exclusiveMaximum: 9 },
  boolean: { type: 'boolean' },
  null: { type: 'null' },
  nested: { type: 'object', properties: {
    user: { type: 'object', properties: { id: { type: 'integer' }, tags: { type: 'array', items: S(8), maxItems: 3 } },
      required: ['id', 'tags'] },
    address: { type: 'object', properties: { city: S(), zip: { type: 'string', pattern: '^[0-9]{5}$' } },
      required: ['city', 'zip'] } }, required: ['user', 'address'] },
  any_of: { anyOf: [{ type: 'integer' }, S(10), { type: 'boolean' }] },
  one_of_tagged: { oneOf: [
    { type: 'object', properties: { kind: { const: 'circle' }, r: { type: 'number', minimum: 0 } }, required: ['kind', 'r'], additionalProperties: false },
    { type: 'object', properties: { kind: { const: 'square' }, side: { type: 'integer', minimum: 1 } }, required: ['kind', 'side'], additionalProperties: false }] },
  refs: { $defs: { point: { type: 'object', properties: { x: { type: 'integer' }, y: { type: 'integer' } }, required: ['x', 'y'] } },
    type: 'object', properties: { from: { $ref: '#/$defs/point' }, to: { $ref: '#/$defs/point' } }, required: ['from', 'to'] },
  nullable: { type: 'object', properties: { note: { type: ['string', 'null'], maxLength: 12 } }, required: ['note'] },
  date: { type: 'string', format: 'date' },
  date_time: { type: 'string', format: 'date-time' },
  uuid: { type: 'string', format: 'uuid' },
  // (format email is not sampled here: its local part is unbounded, maxLength beside a format is refused,
  // and stories260K writes story text into it until max_tokens; test_grammar_schema checks the format)
  pattern: { type: 'string', pattern: '^[A-Z]{3}-[0-9]{2}$' },
  optional_props: { type: 'object', properties: { a: { type: 'integer' }, b: S(6), c: { type: 'boolean' } },
    required: ['b'], additionalProperties: false },
  object_array: { type: 'array', items: { type: 'object', properties: { id: { type: 'integer', minimum: 1 }, ok: { type: 'boolean' } },
    required: ['id', 'ok'] }, minItems: 2, maxItems: 3 },
  string_lengths: { type: 'string', minLength: 3, maxLength: 5 },
  mixed_enum: { enum: [1, 'a', null, true, { x: 1 }] },
  recursive: { $defs: { node: { type: 'object', properties: { v: { type: 'integer' }, next: { anyOf: [{ $ref: '#/$defs/node' }, { type: 'null' }] } },
    required: ['v', 'next'] } }, $ref: '#/$defs/node' },
  prefix_items: { type: 'array', prefixItems: [{ type: 'integer' }, S(5)], items: false },
};

for (const [name, schema] of Object.entries(SCHEMAS)) {
  test(`json_schema '${name}': sampled output parses and validates`, async () => {
    const validate = ajv.compile(schema);
    for (const seed of [1, 2]) {
      const r = await client.completions.create({
        model: NAME, prompt: 'Once upon a time', max_tokens: 300, temperature: 1, seed,
        response_format: { type: 'json_schema', json_schema: { name, schema, strict: true } },
      });
      const { text, finish_reason } = r.choices[0];
      assert.equal(finish_reason, 'stop', `seed ${seed}: ${JSON.stringify(text)}`);
      let value;
      assert.doesNotThrow(() => { value = JSON.parse(text); }, `seed ${seed}: not JSON: ${JSON.stringify(text)}`);
      assert.ok(validate(value), `seed ${seed}: ${text}\n${JSON.stringify(validate.errors)}`);
    }
  });
}

test('chat with response_format json_schema, and json_object', async () => {
  const schema = SCHEMAS.person;
  const r = await client.chat.completions.create({
    model: NAME, messages: [{ role: 'user', content: 'Who is she?' }], max_tokens: 200, temperature: 1, seed: 7,
    response_format: { type: 'json_schema', json_schema: { name: 'person', schema } },
  });
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.ok(ajv.validate(schema, JSON.parse(r.choices[0].message.content)), r.choices[0].message.content);
  // any JSON object: stories260K writes story text into its keys and strings, so most samples run to
  // max_tokens even with '"' and '}' (ids 313 and 128) favoured by logit_bias (which the mask keeps);
  // every one that ends must be an object, and some must end
  let ended = 0;
  for (const seed of [1, 2, 3, 4, 5, 6]) {
    const o = await client.completions.create({
      model: NAME, prompt: 'Once', max_tokens: 400, temperature: 1, seed, logit_bias: { 313: 6, 128: 6 },
      response_format: { type: 'json_object' },
    });
    o.choices[0].message = { content: o.choices[0].text };
    if (o.choices[0].finish_reason !== 'stop') continue;
    ended++;
    const v = JSON.parse(o.choices[0].message.content);
    assert.ok(typeof v === 'object' && v !== null && !Array.isArray(v), o.choices[0].message.content);
  }
  assert.ok(ended >= 1, 'no json_object sample ended');
});

test('choice, regex, GBNF (vLLM structured_outputs and llama.cpp grammar)', async () => {
  const choices = ['the cat', 'the dog', 'a bird'];
  for (const seed of [1, 2, 3]) {
    const r = await client.completions.create({ model: NAME, prompt: 'Once', max_tokens: 20, temperature: 1, seed,
      structured_outputs: { choice: choices } });
    assert.ok(choices.includes(r.choices[0].text), r.choices[0].text);
    const g = await client.completions.create({ model: NAME, prompt: 'Once', max_tokens: 40, temperature: 1, seed,
      structured_outputs: { regex: '[0-9]{3}-[a-z]{2,4}\\.' } });
    assert.match(g.choices[0].text, /^[0-9]{3}-[a-z]{2,4}\.$/);
  }
  const arith = 'root ::= expr\nexpr ::= term (("+" | "-") term)*\nterm ::= num | "(" expr ")"\nnum ::= [1-9] [0-9]{0,2}\n';
  for (const [field, seed] of [['structured_outputs', 4], ['grammar', 5]]) {
    const body = { model: NAME, prompt: 'Once', max_tokens: 60, temperature: 1, seed };
    body[field] = field === 'grammar' ? arith : { grammar: arith };
    const r = await client.completions.create(body);
    const t = r.choices[0].text;
    if (r.choices[0].finish_reason === 'stop') {
      // an independent check: the expression evaluates in JavaScript, with the grammar's characters only
      assert.match(t, /^[0-9+\-()]+$/);
      assert.equal(typeof Function(`return (${t})`)(), 'number', t);
    } else {
      assert.equal(r.choices[0].finish_reason, 'length');
      assert.match(t, /^[0-9+\-()]*$/);
    }
  }
});

async function expect400(body, param, re) {
  // param: the field, or for a field inside structured_outputs its dotted path
  const r = await fetch(`${srv.baseURL}/v1/chat/completions`, { method: 'POST', body: JSON.stringify(body),
    headers: { 'Content-Type': 'application/json' } });
  assert.equal(r.status, 400);
  const e = (await r.json()).error;
  assert.equal(e.type, 'invalid_request_error');
  assert.ok(e.param === param || e.param.startsWith(`${param}.`), `param ${e.param}`);
  assert.match(e.message, re);
}

test('what cannot be compiled is a 400 naming the field, the keyword and where', async () => {
  const msgs = [{ role: 'user', content: 'hi' }];
  await expect400({ model: NAME, messages: msgs, response_format: { type: 'json_schema', json_schema: { name: 'x',
    schema: { type: 'object', properties: { a: { type: 'string', not: { const: 'b' } } } } } } },
  'response_format', /unsupported keyword 'not'.*\/properties\/a/);
  await expect400({ model: NAME, messages: msgs, grammar: 'root ::= "a" undefined_rule' }, 'grammar', /undefined_rule/);
  await expect400({ model: NAME, messages: msgs, response_format: { type: 'json_object' }, structured_outputs: { choice: ['a'] } },
    'structured_outputs', /only one/);
  await expect400({ model: NAME, messages: msgs, structured_outputs: { regex: 'a(b' } }, 'structured_outputs', /offset/);
  await expect400({ model: NAME, messages: msgs, tools: [TOOLS[0]], tool_choice: { type: 'function', function: { name: 'nope' } } },
    'tool_choice', /nope/);
});

test('a grammar whose automaton explodes is a 400 naming the field, and the server keeps serving', async () => {
  // issue 33: a few bytes of regex made the compiler grow without bound (24 GB, then the OOM killer)
  const msgs = [{ role: 'user', content: 'hi' }];
  const nested = '((a{1,100}){1,100}){1,100}';
  const pattern = { type: 'string', pattern: `^${nested}$` };
  await expect400({ model: NAME, messages: msgs, guided_regex: nested }, 'guided_regex', /grammar too complex/);
  await expect400({ model: NAME, messages: msgs, structured_outputs: { regex: '(a{1,1000}){1,1000}' } },
    'structured_outputs.regex', /grammar too complex/);
  await expect400({ model: NAME, messages: msgs, response_format: { type: 'json_schema', json_schema: { name: 'p',
    schema: pattern } } }, 'response_format', /grammar too complex/);
  await expect400({ model: NAME, messages: msgs, grammar: 'root ::= (("a"){1,100}){1,100} "b"' }, 'grammar',
    /grammar too complex/);
  await expect400({ model: NAME, messages: msgs, tool_choice: 'required', tools: [{ type: 'function', function: {
    name: 'f', parameters: { type: 'object', properties: { s: pattern }, required: ['s'] } } }] }, 'tools',
  /grammar too complex/);
  // duplicate alternatives are the small automaton they denote
  for (const [field, value] of [['guided_regex', '(a|a)*b'], ['grammar', 'root ::= ("a" | "a")* "b"']]) {
    const r = await client.completions.create({ model: NAME, prompt: 'Once', max_tokens: 8, temperature: 1, seed: 1,
      [field]: value });
    const t = r.choices[0].text;
    assert.match(t, r.choices[0].finish_reason === 'stop' ? /^a*b$/ : /^a*$/, `${field}: ${t}`);
  }
  const ok = await client.completions.create({ model: NAME, prompt: 'Once', max_tokens: 4 });
  assert.equal(ok.choices[0].finish_reason, 'length');
});

test('a grammar still compiling when its client leaves stops compiling', async () => {
  // limits raised so that only the client's leaving can stop the compilation
  const big = await startServer(['--grammar-max-work', '1000000000000', '--grammar-timeout', '120']);
  try {
    const ctl = new AbortController();
    const pending = fetch(`${big.baseURL}/v1/completions`, { method: 'POST', signal: ctl.signal,
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ model: NAME, prompt: 'Once', max_tokens: 8, guided_regex: '((a{1,100}){1,100}){1,100}' }) });
    await new Promise((res) => setTimeout(res, 500));
    ctl.abort();
    await assert.rejects(pending);
    const t0 = Date.now();
    while (!/its client left while the request was parsed \(.*compilation cancelled/.test(big.log())) {
      assert.ok(Date.now() - t0 < 10000, `no cancellation in the log:\n${big.log().slice(-2000)}`);
      await new Promise((res) => setTimeout(res, 50));
    }
    const r = await big.client().completions.create({ model: NAME, prompt: 'Once', max_tokens: 4 });
    assert.equal(r.choices[0].finish_reason, 'length');
  } finally {
    await big.stop();
  }
});

const TOOLS = [
  { type: 'function', function: { name: 'get_weather', description: 'The weather in a city',
    parameters: { type: 'object', properties: { city: S(20), unit: { type: 'string', enum: ['celsius', 'fahrenheit'] } },
      required: ['city', 'unit'], additionalProperties: false } } },
  { type: 'function', function: { name: 'get_time', description: 'The time in a zone',
    parameters: { type: 'object', properties: { zone: S(12) }, required: ['zone'], additionalProperties: false } } },
];
const MSGS = [{ role: 'user', content: 'What is the weather in Paris?' }];

function checkCalls(calls) {
  assert.ok(calls.length >= 1);
  for (const c of calls) {
    assert.equal(c.type, 'function');
    assert.match(c.id, /^call_[A-Za-z0-9]{24}$/);
    const tool = TOOLS.find((t) => t.function.name === c.function.name);
    assert.ok(tool, `unknown tool ${c.function.name}`);
    const args = JSON.parse(c.function.arguments);
    assert.ok(ajv.validate(tool.function.parameters, args), `${c.function.arguments}: ${JSON.stringify(ajv.errors)}`);
  }
}

const withoutIds = (calls) => calls.map(({ id, ...rest }) => rest);

// The calls a stream's delta.tool_calls chunks add up to.
async function streamCalls(body, cl = client) {
  const stream = await cl.chat.completions.create({ ...body, stream: true });
  const calls = [];
  let content = '';
  let finish = null;
  for await (const chunk of stream) {
    for (const ch of chunk.choices) {
      if (ch.delta.content) content += ch.delta.content;
      for (const d of ch.delta.tool_calls ?? []) {
        if (!calls[d.index]) {
          assert.ok(d.id && d.function.name, 'the first delta of a call has its id and name');
          calls[d.index] = { id: d.id, type: 'function', function: { name: d.function.name, arguments: '' } };
        }
        calls[d.index].function.arguments += d.function.arguments ?? '';
      }
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  return { calls, content, finish };
}

test('tool_choice "required": a valid call comes out, streamed the same', async () => {
  for (const seed of [1, 2, 3]) {
    // one call (parallel_tool_calls false): a random model asked for one or more calls calls until max_tokens
    const body = { model: NAME, messages: MSGS, tools: TOOLS, tool_choice: 'required', parallel_tool_calls: false,
      max_tokens: 300, temperature: 1, seed };
    const r = await client.chat.completions.create(body);
    const m = r.choices[0].message;
    assert.equal(r.choices[0].finish_reason, 'tool_calls', JSON.stringify(m));
    assert.equal(m.content, null);
    checkCalls(m.tool_calls);
    assert.equal(m.tool_calls.length, 1);
    const s = await streamCalls(body);
    assert.deepEqual(withoutIds(s.calls), withoutIds(m.tool_calls)); // ids are random per response
    assert.equal(s.content, '');
    assert.equal(s.finish, 'tool_calls');
  }
});

test('a named tool_choice calls that function', async () => {
  const body = { model: NAME, messages: MSGS, tools: TOOLS, max_tokens: 200, temperature: 1, seed: 11,
    tool_choice: { type: 'function', function: { name: 'get_time' } } };
  const r = await client.chat.completions.create(body);
  const m = r.choices[0].message;
  assert.equal(m.tool_calls.length, 1);
  assert.equal(m.tool_calls[0].function.name, 'get_time');
  checkCalls(m.tool_calls);
  assert.equal(r.choices[0].finish_reason, 'stop'); // as vLLM: a named choice finishes with "stop"
});

test('tool_choice "auto" parses a call out of the text; streaming splits it at token boundaries', async () => {
  // The model's text is forced by a regex into content followed by a Hermes call: the parser must split them.
  const regex = 'Sure\\. <tool_call>\\n\\{"name": "get_weather", "arguments": \\{"city": "[a-z]{3,8}", "unit": "celsius"\\}\\}\\n</tool_call>';
  const body = { model: NAME, messages: MSGS, tools: TOOLS, max_tokens: 200, temperature: 1, seed: 5,
    structured_outputs: { regex } };
  const r = await client.chat.completions.create(body);
  const m = r.choices[0].message;
  assert.equal(m.content, 'Sure. ');
  assert.equal(m.tool_calls.length, 1);
  checkCalls(m.tool_calls);
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  const s = await streamCalls(body);
  assert.deepEqual(withoutIds(s.calls), withoutIds(m.tool_calls));
  assert.equal(s.content, 'Sure. ');
  assert.equal(s.finish, 'tool_calls');
  // the same text without tools is content only
  const plain = await client.chat.completions.create({ ...body, tools: undefined });
  assert.match(plain.choices[0].message.content, /^Sure\. <tool_call>/);
  assert.equal(plain.choices[0].message.tool_calls, undefined);
});

test('a conversation with a call and its result renders and goes on', async () => {
  const r = await client.chat.completions.create({ model: NAME, tools: TOOLS, tool_choice: 'required', messages: MSGS,
    max_tokens: 200, temperature: 1, seed: 3 });
  const call = r.choices[0].message.tool_calls[0];
  const messages = [...MSGS, { role: 'assistant', content: null, tool_calls: [call] },
    { role: 'tool', tool_call_id: call.id, content: 'sunny, 21 degrees' }];
  const tok = await (await fetch(`${srv.baseURL}/tokenize`, { method: 'POST',
    body: JSON.stringify({ model: NAME, messages, tools: TOOLS, return_token_strs: true }) })).json();
  const text = tok.token_strs.join('');
  // the call as the template wrote it (arguments as an object, not as the string the API carries)
  const rendered = [...text.matchAll(/<tool_call>\n(.*)\n<\/tool_call>/g)].map((m) => m[1]);
  assert.equal(rendered.length, 2, text); // the template's instructions, then the call
  assert.deepEqual(JSON.parse(rendered[1]), { name: call.function.name, arguments: JSON.parse(call.function.arguments) });
  assert.ok(text.includes('Tool: sunny, 21 degrees'), text);
  const next = await client.chat.completions.create({ model: NAME, tools: TOOLS, tool_choice: 'none', messages, max_tokens: 10 });
  assert.equal(next.choices[0].message.tool_calls, undefined);
  assert.equal(typeof next.choices[0].message.content, 'string');
  // a result for a call that was never made is a 400 naming the field
  const stray = [...messages.slice(0, -1), { role: 'tool', tool_call_id: `${call.id}x`, content: 'sunny' }];
  await assert.rejects(client.chat.completions.create({ model: NAME, tools: TOOLS, messages: stray, max_tokens: 10 }),
    (e) => e.status === 400 && e.param === `messages[${stray.length - 1}].tool_call_id` &&
      /which is the id of no tool call in an earlier assistant message/.test(e.message));
});

// The newer formats (--tool-call-parser): per format, a server whose
// forced calls are written in that format's syntax (its markers spelled out
// by the small model's byte tokens) and read back by its parser, streamed
// the same; and "auto" output the model writes in that syntax (forced by a
// regex) parsed into content and a call. Kimi-K2 carries the model's own id.
const DS = (w) => `<\uff5c${w.replace(/ /g, '\u2581')}\uff5c>`;
const esc = (s) => s.replace(/[|[\]{}()\\.*+?^$]/g, '\\$&');
const FORMATS = {
  qwen3_coder: `<tool_call>\n<function=get_weather>\n<parameter=city>\n[a-z]{3,8}\n</parameter>\n<parameter=unit>\n` +
    'celsius\n</parameter>\n</function>\n</tool_call>',
  glm45: '<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>[a-z]{3,8}</arg_value>\n<arg_key>unit</arg_key>\n' +
    '<arg_value>celsius</arg_value>\n</tool_call>',
  pythonic: '[get_weather(city="[a-z]{3,8}", unit="celsius")]',
  deepseek_v3: `${DS('tool calls begin')}${DS('tool call begin')}function${DS('tool sep')}get_weather\n\`\`\`json\n` +
    `{"city": "[a-z]{3,8}", "unit": "celsius"}\n\`\`\`${DS('tool call end')}${DS('tool calls end')}`,
  kimi_k2: '<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>' +
    '{"city": "[a-z]{3,8}", "unit": "celsius"}<|tool_call_end|><|tool_calls_section_end|>',
};
// The parts of each regex above that are the format's literal text.
const LITERAL = { pythonic: ['[get_weather(city="', '", unit="celsius")]'] };

test('the newer tool-call formats: forced calls in their syntax, and their calls parsed out of text', async () => {
  for (const [format, shape] of Object.entries(FORMATS)) {
    const s = await startServer(['--chat-template', TEMPLATE, '--max-model-len', '2048', '--enable-auto-tool-choice',
      '--tool-call-parser', format], { env: ALLOW_LONG });
    try {
      const c = s.client();
      const idOk = (id) => (format === 'kimi_k2' ? /^functions\.get_(weather|time):\d+$/ : /^call_[A-Za-z0-9]{24}$/).test(id);
      for (const seed of [1, 2]) {
        const body = { model: NAME, messages: MSGS, tools: TOOLS, tool_choice: 'required', parallel_tool_calls: false,
          max_tokens: 1200, temperature: 1, seed };
        const r = await c.chat.completions.create(body);
        const m = r.choices[0].message;
        assert.equal(r.choices[0].finish_reason, 'tool_calls', `${format}: ${JSON.stringify(m)}`);
        assert.equal(m.content, null, format);
        assert.equal(m.tool_calls.length, 1, format);
        for (const call of m.tool_calls) {
          assert.ok(idOk(call.id), `${format}: id ${call.id}`);
          const tool = TOOLS.find((t) => t.function.name === call.function.name);
          assert.ok(tool, `${format}: unknown tool ${call.function.name}`);
          const args = JSON.parse(call.function.arguments);
          assert.ok(ajv.validate(tool.function.parameters, args), `${format}: ${call.function.arguments}`);
        }
        const st = await streamCalls(body, c);
        assert.deepEqual(withoutIds(st.calls), withoutIds(m.tool_calls), format);
        assert.equal(st.finish, 'tool_calls', format);
      }
      // "auto": the text is forced into content plus a call in the format
      const regex = (format === 'pythonic' ? '' : 'Sure\\. ') +
        (LITERAL[format] ? `${esc(LITERAL[format][0])}[a-z]{3,8}${esc(LITERAL[format][1])}`
          : shape.split('[a-z]{3,8}').map(esc).join('[a-z]{3,8}'));
      const body = { model: NAME, messages: MSGS, tools: TOOLS, max_tokens: 600, temperature: 1, seed: 5,
        structured_outputs: { regex } };
      const r = await c.chat.completions.create(body);
      const m = r.choices[0].message;
      assert.equal(m.tool_calls?.length, 1, `${format}: ${JSON.stringify(m)}`);
      assert.equal(m.content, format === 'pythonic' ? null : 'Sure. ', format);
      assert.equal(m.tool_calls[0].function.name, 'get_weather');
      assert.ok(idOk(m.tool_calls[0].id), `${format}: id ${m.tool_calls[0].id}`);
      const args = JSON.parse(m.tool_calls[0].function.arguments);
      assert.equal(args.unit, 'celsius');
      assert.match(args.city, /^[a-z]{3,8}$/);
      assert.equal(r.choices[0].finish_reason, 'tool_calls');
      const st = await streamCalls(body, c);
      assert.deepEqual(withoutIds(st.calls), withoutIds(m.tool_calls), format);
      assert.equal(st.content, format === 'pythonic' ? '' : 'Sure. ');
    } finally {
      await s.stop();
    }
  }
});
