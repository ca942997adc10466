// rerank.test.mjs - /v1/rerank (Jina's / Cohere's shape) and /v1/score
// (vLLM's) for a yes/no reranker (`serve --task rerank`, Qwen3-Reranker's
// judging format). The model is qwen3-test with the real Qwen3 tokenizer
// (`make-random-model`, random F32 weights, so the head's products are float
// products as here): "yes" and "no" are single tokens.
//
// Each score is checked against another path through the server: the same
// judging prompt (laid out here from the model card's format, special
// tokens by their ids) followed by "yes", then by "no", through
// /v1/completions with prompt_logprobs: the full LM head's log-softmax at
// the last position, whose difference is logit(yes) - logit(no). The
// rerank order must be the order of those references.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { startServer, TESTDATA, NAME, BIN } from './server.mjs';

const TOKENIZER = path.join(TESTDATA, 'tokenizers/qwen3');
let dir;
let srv;
before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pagedlm-rerank-'));
  const model = path.join(dir, 'qwen3-test.gguf');
  execFileSync(BIN, ['make-random-model', '--preset', 'qwen3-test', '--tokenizer', TOKENIZER, '--seed', '3', '--dtype', 'f32',
    '-o', model], { stdio: 'ignore' });
  srv = await startServer(['--task', 'rerank', '--max-model-len', '512'], { model });
});
after(async () => {
  if (srv) await srv.stop();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

async function post(route, body) {
  const r = await fetch(`${srv.baseURL}${route}`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
  });
  return { status: r.status, body: await r.json() };
}

const SPECIAL = Object.fromEntries(JSON.parse(fs.readFileSync(path.join(TOKENIZER, 'tokenizer.json'), 'utf8'))
  .added_tokens.map((t) => [t.content, t.id]));
const INSTRUCTION = 'Given a web search query, retrieve relevant passages that answer the query';
const judging = (q, d) => '<|im_start|>system\nJudge whether the Document meets the requirements based on the Query ' +
  'and the Instruct provided. Note that the answer can only be "yes" or "no".<|im_end|>\n<|im_start|>user\n' +
  `<Instruct>: ${INSTRUCTION}\n<Query>: ${q}\n<Document>: ${d}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n`;

// ids of text with its special tokens as their ids (the text between them
// tokenized on its own, as a tokenizer that parses special tokens does)
async function idsOf(text) {
  const ids = [];
  for (const part of text.split(/(<\|im_start\|>|<\|im_end\|>|<think>|<\/think>)/)) {
    if (!part) continue;
    if (part in SPECIAL) ids.push(SPECIAL[part]);
    else ids.push(...(await post('/tokenize', { prompt: part, add_special_tokens: false })).body.tokens);
  }
  return ids;
}

async function reference(q, d) {
  const ids = await idsOf(judging(q, d));
  const [yes] = (await post('/tokenize', { prompt: 'yes', add_special_tokens: false })).body.tokens;
  const [no] = (await post('/tokenize', { prompt: 'no', add_special_tokens: false })).body.tokens;
  const lp = async (tok) => {
    const r = await post('/v1/completions', { prompt: [...ids, tok], max_tokens: 1, prompt_logprobs: 0 });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    return Object.values(r.body.choices[0].prompt_logprobs.at(-1))[0].logprob;
  };
  return 1 / (1 + Math.exp(-((await lp(yes)) - (await lp(no)))));
}

const QUERY = 'What is the capital of France?';
const DOCS = ['Paris is the capital of France.', 'Bananas are yellow.', 'France borders Spain and Italy.',
  'The Eiffel Tower is in Paris.', 'x'];

test('rerank: relevance scores equal the head\'s yes/no odds, best first, top_n, documents returned', async () => {
  const r = await post('/v1/rerank', { model: NAME, query: QUERY, documents: DOCS.map((t, i) => (i % 2 ? { text: t } : t)),
    top_n: 4 });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.equal(r.body.model, NAME);
  assert.equal(r.body.results.length, 4);
  const refs = [];
  for (const d of DOCS) refs.push(await reference(QUERY, d));
  const order = refs.map((s, i) => [s, i]).sort((a, b) => b[0] - a[0] || a[1] - b[1]).map(([, i]) => i);
  assert.deepEqual(r.body.results.map((x) => x.index), order.slice(0, 4));
  for (const x of r.body.results) {
    assert.ok(Math.abs(x.relevance_score - refs[x.index]) < 1e-4, `${x.relevance_score} vs ${refs[x.index]}`);
    assert.equal(x.document.text, DOCS[x.index]);
  }
  assert.ok(r.body.usage.prompt_tokens > 5 * 40);
  const bare = await post('/rerank', { query: QUERY, documents: DOCS, return_documents: false });
  assert.equal(bare.body.results.length, DOCS.length);
  assert.equal(bare.body.results[0].document, undefined);
  assert.deepEqual(bare.body.results.map((x) => x.relevance_score), r.body.results.map((x) => x.relevance_score)
    .concat(bare.body.results.slice(4).map((x) => x.relevance_score)));
});

test('score: one text_1 against each text_2, or pair by pair, in order', async () => {
  const one = await post('/v1/score', { model: NAME, text_1: QUERY, text_2: DOCS.slice(0, 3) });
  assert.equal(one.status, 200, JSON.stringify(one.body));
  assert.equal(one.body.object, 'list');
  assert.deepEqual(one.body.data.map((d) => d.index), [0, 1, 2]);
  for (const d of one.body.data) {
    assert.equal(d.object, 'score');
    assert.ok(Math.abs(d.score - await reference(QUERY, DOCS[d.index])) < 1e-4);
  }
  const pairs = await post('/score', { text_1: ['a', QUERY], text_2: ['b', DOCS[0]] });
  assert.equal(pairs.body.data.length, 2);
  assert.ok(Math.abs(pairs.body.data[1].score - one.body.data[0].score) < 1e-12);
});

test('bad requests are 400s naming the field', async () => {
  const cases = [
    ['/v1/rerank', { documents: ['a'] }, 'query'],
    ['/v1/rerank', { query: 'q', documents: [] }, 'documents'],
    ['/v1/rerank', { query: 'q', documents: [5] }, 'documents'],
    ['/v1/rerank', { query: 'q', documents: ['a'], top_n: 0 }, 'top_n'],
    ['/v1/score', { text_1: ['a', 'b'], text_2: ['c', 'd', 'e'] }, 'text_1'],
    ['/v1/score', { text_1: 'a' }, 'text_2'],
  ];
  for (const [route, body, param] of cases) {
    const r = await post(route, body);
    assert.equal(r.status, 400, `${route} ${JSON.stringify(body)}`);
    assert.equal(r.body.error.param, param, `${route} ${JSON.stringify(body)}`);
  }
});
