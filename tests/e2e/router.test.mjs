// router.test.mjs - several models behind one endpoint (`pagedlm serve
// --models-dir DIR`: the router, one `pagedlm serve` child per loaded model),
// through the official `openai` client:
// - GET /v1/models lists every model of the folder (.gguf files and a folder
//   with config.json) with its status (unloaded, loading, loaded);
// - requests to two models interleaved, streamed and not, each answered by
//   its own model (greedy stories260K text = `pagedlm run`); a request for a
//   cold model waits for its load while the other model keeps answering;
// - unknown model: 404 model_not_found; a model whose server fails to start:
//   5xx with the child's error line;
// - POST /models/unload and /models/load; /metrics per model, and
//   /metrics?model=NAME from the child;
// - a client leaving a stream through the router has its request aborted in
//   the child;
// - --max-loaded-models 1: the other model's request stops the idle one,
//   whose next request loads it again with the same answer bytes;
// - --sleep-idle-seconds: an idle model's server is stopped;
// - SIGTERM: the router exits 0 and no child is left; SIGKILL of the
//   router: its children die too (PR_SET_PDEATHSIG).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { BIN, TESTDATA, ALLOW_LONG, runCli, collect } from './server.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pagedlm-router-'));
const DIR = path.join(tmp, 'models');
const SANITIZER = /AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|runtime error:/;

// the process's state letter from /proc (Z: a zombie, as good as gone), or null
function procState(pid) {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0];
  } catch {
    return null;
  }
}
const alive = (pid) => { const s = procState(pid); return s !== null && s !== 'Z'; };

// pids whose parent is pid
function childrenOf(pid) {
  const out = [];
  for (const d of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${d}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === pid) out.push(Number(d));
    } catch { /* gone meanwhile */ }
  }
  return out;
}

async function waitFor(what, cond, ms = 10000) {
  const until = Date.now() + ms;
  for (;;) {
    const v = await cond();
    if (v) return v;
    if (Date.now() > until) assert.fail(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

async function startRouter(extra = [], env = {}, apiKey = null) {
  const auth = apiKey ? { authorization: `Bearer ${apiKey}` } : {};
  const args = ['serve', '--models-dir', DIR, '--host', '127.0.0.1', '--port', '0', '--kv-cache-memory', '64MiB',
    '-t', '1', '--disable-log-requests', ...extra];
  const proc = spawn(BIN, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  const exited = new Promise((resolve) => proc.on('close', (code, signal) => resolve({ code, signal })));
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`router did not start:\n${log}`)), 30000);
    proc.stderr.on('data', (d) => {
      log += d.toString();
      // the router's own line comes before any child's
      const m = /^pagedlm: listening on http:\/\/127\.0\.0\.1:(\d+) \(router/m.exec(log);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    });
    proc.on('exit', (code) => reject(new Error(`router exited with ${code}:\n${log}`)));
  });
  const baseURL = `http://127.0.0.1:${port}`;
  return {
    proc, baseURL, exited,
    log: () => log,
    client: new OpenAI({ baseURL: `${baseURL}/v1`, apiKey: apiKey ?? 'none', maxRetries: 0, timeout: 60000 }),
    async states() {
      const r = await (await fetch(`${baseURL}/v1/models`, { headers: auth })).json();
      return Object.fromEntries(r.data.map((m) => [m.id, m.status.value]));
    },
    async post(p, body) {
      const r = await fetch(`${baseURL}${p}`, { method: 'POST', headers: { 'content-type': 'application/json', ...auth },
        body: JSON.stringify(body) });
      return { status: r.status, body: await r.json() };
    },
    async metrics(query = '') {
      const text = await (await fetch(`${baseURL}/metrics${query}`)).text();
      const out = {};
      for (const line of text.split('\n')) {
        if (!line || line.startsWith('#')) continue;
        const i = line.lastIndexOf(' ');
        out[line.slice(0, i)] = Number(line.slice(i + 1));
      }
      return out;
    },
    async stop(signal = 'SIGTERM') {
      proc.kill(signal);
      const r = await exited;
      if (signal === 'SIGTERM') {
        assert.doesNotMatch(log, SANITIZER, 'sanitizer report in the router log');
        assert.equal(r.signal, null, `router died of ${r.signal}:\n${log.slice(-4000)}`);
        assert.equal(r.code, 0, `router exited with ${r.code}:\n${log.slice(-4000)}`);
      }
      return r;
    },
  };
}

const PROMPT = 'Once upon a time';
const N = 24;
let ref; // stories260K's greedy text (`pagedlm run`)
let A; // the main router

before(async () => {
  fs.mkdirSync(DIR);
  const models = path.join(TESTDATA, 'models');
  fs.symlinkSync(path.join(models, 'stories260K/stories260K.gguf'), path.join(DIR, 'stories.gguf'));
  fs.symlinkSync(path.join(models, 'llama-2-tiny-random/llama-2-tiny-random.gguf'), path.join(DIR, 'tiny.gguf'));
  fs.symlinkSync(path.join(models, 'stories260K-hf'), path.join(DIR, 'stories-hf')); // a folder with config.json
  fs.writeFileSync(path.join(DIR, 'broken.gguf'), 'GGUF and then nonsense');
  fs.writeFileSync(path.join(DIR, 'README.txt'), 'not a model');
  fs.mkdirSync(path.join(DIR, 'empty-folder'));
  ref = runCli(PROMPT, N).text;
  // stories with a long context (the abort test), from --models-config
  const cfg = path.join(tmp, 'models.json');
  fs.writeFileSync(cfg, JSON.stringify({ stories: ['--max-model-len', 4096] }));
  // every child waits 1 s before loading: the "loading" state can be seen
  A = await startRouter(['--models-config', cfg], { ...ALLOW_LONG, PAGEDLM_TEST_LOAD_DELAY_MS: '1000' });
});
after(async () => {
  if (A && A.proc.exitCode === null) await A.stop();
  fs.rmSync(tmp, { recursive: true, force: true });
});

test('GET /v1/models lists the folder\'s models, all unloaded; /health is the router\'s', async () => {
  const r = await (await fetch(`${A.baseURL}/v1/models`)).json();
  assert.equal(r.object, 'list');
  assert.deepEqual(r.data.map((m) => m.id).sort(), ['broken', 'stories', 'stories-hf', 'tiny']);
  for (const m of r.data) {
    assert.equal(m.object, 'model');
    assert.equal(m.status.value, 'unloaded');
    assert.ok(Array.isArray(m.status.args));
  }
  const stories = r.data.find((m) => m.id === 'stories');
  assert.deepEqual(stories.status.args.slice(-2), ['--max-model-len', '4096'], 'its --models-config arguments');
  assert.equal((await fetch(`${A.baseURL}/health`)).status, 200);
  assert.deepEqual(childrenOf(A.proc.pid), [], 'no child before a request');
});

test('a cold model loads on its first request while the other model keeps answering', async () => {
  const c = A.client;
  const first = await c.completions.create({ model: 'stories', prompt: PROMPT, max_tokens: N, temperature: 0 });
  assert.equal(first.model, 'stories');
  assert.equal(first.choices[0].text, ref);
  // tiny is cold: its request waits for the load (1 s and more) ...
  const t0 = Date.now();
  const cold = c.completions.create({ model: 'tiny', prompt: PROMPT, max_tokens: 8, temperature: 0 });
  await waitFor('tiny loading', async () => (await A.states()).tiny === 'loading');
  // ... and meanwhile stories answers
  let tCold = 0;
  cold.then(() => { tCold = Date.now(); }, () => {});
  const warm = await c.completions.create({ model: 'stories', prompt: PROMPT, max_tokens: 4, temperature: 0 });
  const tWarm = Date.now();
  assert.equal(warm.choices[0].text, ref.slice(0, warm.choices[0].text.length));
  const r = await cold;
  assert.ok(tWarm <= tCold, `stories answered ${tWarm - t0} ms in, before tiny (${tCold - t0} ms): not held up`);
  assert.equal(r.model, 'tiny');
  const s = await A.states();
  assert.equal(s.stories, 'loaded');
  assert.equal(s.tiny, 'loaded');
  assert.equal(s['stories-hf'], 'unloaded');
  assert.equal(childrenOf(A.proc.pid).length, 2);
});

test('requests to two models interleaved, streamed and not', async () => {
  const c = A.client;
  const tinyRef = (await c.completions.create({ model: 'tiny', prompt: PROMPT, max_tokens: N, temperature: 0 }))
    .choices[0].text;
  const jobs = [];
  for (let i = 0; i < 3; i++) {
    for (const model of ['stories', 'tiny']) {
      jobs.push((async () => {
        const stream = await c.completions.create({ model, prompt: PROMPT, max_tokens: N, temperature: 0,
          stream: true });
        const got = await collect(stream);
        assert.ok(got.chunks > 2, 'streamed in several chunks');
        return { model, text: got.texts[0] };
      })());
      jobs.push(c.completions.create({ model, prompt: PROMPT, max_tokens: N, temperature: 0 })
        .then((r) => ({ model, text: r.choices[0].text, answered: r.model })));
    }
  }
  for (const j of await Promise.all(jobs)) {
    if (j.answered) assert.equal(j.answered, j.model);
    assert.equal(j.text, j.model === 'stories' ? ref : tinyRef, `${j.model}'s answer`);
  }
  assert.notEqual(ref, tinyRef);
  // an SSE stream comes through event by event, as the child sends it
  const res = await fetch(`${A.baseURL}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'stories', prompt: PROMPT, max_tokens: 8, temperature: 0, stream: true }) });
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type'), /^text\/event-stream/);
  const text = await res.text();
  assert.equal(text.match(/^data: /gm).length, 8 + 2, '8 tokens, the finish chunk and [DONE]');
  assert.match(text, /data: \[DONE\]\n\n$/);
});

test('unknown model: 404 model_not_found; a model that fails to start: 503 with its error', async () => {
  await assert.rejects(A.client.completions.create({ model: 'nope', prompt: 'x', max_tokens: 1 }), (e) => {
    assert.equal(e.status, 404);
    assert.equal(e.code, 'model_not_found');
    assert.equal(e.type, 'invalid_request_error');
    assert.equal(e.param, 'model');
    return true;
  });
  assert.equal((await A.post('/models/load', { model: 'nope' })).status, 404);
  await assert.rejects(A.client.completions.create({ model: 'broken', prompt: 'x', max_tokens: 1 }), (e) => {
    assert.ok(e.status >= 500, `status ${e.status}`);
    assert.match(e.message, /broken failed to load \(exit status 1\): error: .*broken\.gguf/);
    return true;
  });
  const broken = (await (await fetch(`${A.baseURL}/v1/models`)).json()).data.find((m) => m.id === 'broken');
  assert.equal(broken.status.value, 'unloaded');
  assert.equal(broken.status.failed, true);
  assert.equal(broken.status.exit_code, 1);
  // the others are untouched
  const r = await A.client.completions.create({ model: 'stories', prompt: PROMPT, max_tokens: N, temperature: 0 });
  assert.equal(r.choices[0].text, ref);
});

test('POST /models/unload and /models/load; /metrics per model and ?model=NAME from the child', async () => {
  const tinyPid = () => childrenOf(A.proc.pid).find((p) => fs.readFileSync(`/proc/${p}/cmdline`, 'utf8').includes('tiny.gguf'));
  const pid = tinyPid();
  assert.ok(pid, 'tiny has a child');
  const before = await A.metrics();
  let r = await A.post('/models/unload', { model: 'tiny' });
  assert.equal(r.status, 200);
  assert.equal(r.body.success, true);
  assert.equal((await A.states()).tiny, 'unloaded');
  await waitFor('the child of tiny to end', () => !alive(pid));
  r = await A.post('/models/load', { model: 'tiny' });
  assert.equal(r.status, 200);
  assert.equal((await A.states()).tiny, 'loaded', 'load answers once the model is loaded');
  assert.ok(tinyPid() && tinyPid() !== pid, 'a new child');
  const m = await A.metrics();
  assert.equal(m['pagedlm_router_unloads_total{model="tiny"}'], before['pagedlm_router_unloads_total{model="tiny"}'] + 1);
  assert.equal(m['pagedlm_router_loads_total{model="tiny"}'], before['pagedlm_router_loads_total{model="tiny"}'] + 1);
  assert.equal(m['pagedlm_router_model_loaded{model="tiny"}'], 1);
  assert.equal(m['pagedlm_router_model_loaded{model="stories-hf"}'], 0);
  assert.ok(m['pagedlm_router_requests_total{model="stories"}'] >= 10);
  assert.ok(m['pagedlm_router_load_seconds_total{model="tiny"}'] >= 2, 'two loads of 1 s and more');
  assert.equal(m['pagedlm_router_load_failures_total{model="broken"}'], 1);
  const child = await A.metrics('?model=stories');
  assert.ok(child['vllm:num_requests_running{model_name="stories"}'] === 0, 'the child\'s own metrics');
});

test('a client leaving a stream through the router aborts the request in the child', async () => {
  const abortedN = async () => (await A.metrics('?model=stories'))[
    'vllm:request_success_total{model_name="stories",finished_reason="abort"}'] ?? 0;
  const before = await abortedN();
  const stream = await A.client.completions.create({ model: 'stories', prompt: PROMPT, max_tokens: 4000,
    temperature: 0.8, seed: 1, ignore_eos: true, stream: true });
  let chunks = 0;
  for await (const c of stream) {
    assert.equal(c.choices[0].finish_reason, null);
    if (++chunks === 5) {
      stream.controller.abort();
      break;
    }
  }
  await waitFor('the abort in the child', async () => (await abortedN()) === before + 1);
  await waitFor('no request running in the child', async () =>
    (await A.metrics('?model=stories'))['vllm:num_requests_running{model_name="stories"}'] === 0);
  await waitFor('no request in flight in the router', async () =>
    (await A.metrics())['pagedlm_router_requests_in_flight{model="stories"}'] === 0);
});

test('a client leaving a non-streaming request through the router aborts it in the child', async () => {
  const abortedN = async () => (await A.metrics('?model=stories'))[
    'vllm:request_success_total{model_name="stories",finished_reason="abort"}'] ?? 0;
  const before = await abortedN();
  const ac = new AbortController();
  const pending = fetch(`${A.baseURL}/v1/completions`, { method: 'POST', signal: ac.signal,
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'stories', prompt: PROMPT, max_tokens: 4000, temperature: 0.8, seed: 2,
      ignore_eos: true }) });
  await waitFor('the request running in the child', async () =>
    (await A.metrics('?model=stories'))['vllm:num_requests_running{model_name="stories"}'] === 1);
  ac.abort();
  await assert.rejects(pending);
  await waitFor('the abort in the child', async () => (await abortedN()) === before + 1, 3000);
});

test('a child that dies is marked unloaded and started again by the next request', async () => {
  const pids = childrenOf(A.proc.pid);
  const pid = pids.find((p) => fs.readFileSync(`/proc/${p}/cmdline`, 'utf8').includes('stories.gguf'));
  process.kill(pid, 'SIGKILL');
  await waitFor('stories unloaded', async () => (await A.states()).stories === 'unloaded');
  assert.equal((await A.states()).tiny, 'loaded', 'the other model is untouched');
  const r = await A.client.completions.create({ model: 'stories', prompt: PROMPT, max_tokens: N, temperature: 0 });
  assert.equal(r.choices[0].text, ref);
  assert.equal((await A.metrics())['pagedlm_router_crashes_total{model="stories"}'], 1);
});

test('SIGTERM: the router exits 0 and leaves no child', async () => {
  const pids = childrenOf(A.proc.pid);
  assert.equal(pids.length, 2);
  await A.stop();
  for (const p of pids) assert.ok(!alive(p), `child ${p} is left`);
});

test('--max-loaded-models 1: a request for the other model stops the idle one; it reloads with the same answer', async () => {
  const B = await startRouter(['--max-loaded-models', '1', '--max-model-len', '4096'], ALLOW_LONG);
  try {
    const ask = (model) => B.client.completions.create({ model, prompt: PROMPT, max_tokens: N, temperature: 0 });
    const a1 = (await ask('stories')).choices[0].text;
    assert.equal(a1, ref);
    assert.equal((await B.states()).stories, 'loaded');
    await ask('tiny');
    let s = await B.states();
    assert.equal(s.tiny, 'loaded');
    assert.equal(s.stories, 'unloaded', 'the least recently used model was stopped');
    assert.equal(childrenOf(B.proc.pid).length, 1);
    const a2 = (await ask('stories')).choices[0].text;
    assert.equal(a2, a1, 'the same greedy bytes after the reload');
    s = await B.states();
    assert.equal(s.stories, 'loaded');
    assert.equal(s.tiny, 'unloaded');
    const m = await B.metrics();
    assert.equal(m['pagedlm_router_loads_total{model="stories"}'], 2);
    assert.equal(m['pagedlm_router_unloads_total{model="stories"}'], 1);
    assert.equal(m['pagedlm_router_unloads_total{model="tiny"}'], 1);
    // a request in flight keeps its model: tiny waits for stories' stream to end
    const stream = await B.client.completions.create({ model: 'stories', prompt: PROMPT, max_tokens: 2000,
      temperature: 0.8, seed: 3, ignore_eos: true, stream: true });
    let tinyDone = 0;
    let streamDone = 0;
    let chunks = 0;
    let finish = null;
    let tiny;
    for await (const c of stream) {
      if (++chunks === 3) {
        tiny = ask('tiny').then(() => { tinyDone = Date.now(); });
        await sleep(300);
        s = await B.states();
        assert.equal(s.stories, 'loaded', 'the busy model is not stopped');
        assert.equal(s.tiny, 'unloaded', 'the other model waits');
      }
      finish = c.choices[0].finish_reason ?? finish;
    }
    streamDone = Date.now();
    assert.equal(finish, 'length', 'the stream of the busy model ran to its end');
    await tiny;
    assert.ok(tinyDone >= streamDone, 'tiny answered after the stream ended');
    assert.equal((await B.states()).tiny, 'loaded');
  } finally {
    // SIGKILL of the router: its children die with it (PR_SET_PDEATHSIG)
    const pids = childrenOf(B.proc.pid);
    await B.stop('SIGKILL');
    await waitFor('the children of a killed router to die', () => pids.every((p) => !alive(p)), 5000);
    assert.ok(pids.length >= 1, 'the router had a child');
  }
});

test('--sleep-idle-seconds: an idle model\'s server is stopped, and loads again on demand (with --api-key)', async () => {
  const C = await startRouter(['--sleep-idle-seconds', '1', '--api-key', 'k-router'], {}, 'k-router');
  try {
    // the key is the router's and its children's; never on a child's command line
    const noKey = new OpenAI({ baseURL: `${C.baseURL}/v1`, apiKey: 'wrong', maxRetries: 0 });
    await assert.rejects(noKey.completions.create({ model: 'stories', prompt: 'x', max_tokens: 1 }),
      (e) => e.status === 401);
    assert.equal((await C.states()).stories, 'unloaded', 'a refused request loads nothing');
    const t0 = Date.now();
    const r = await C.client.completions.create({ model: 'stories', prompt: PROMPT, max_tokens: N, temperature: 0 });
    const tAnswer = Date.now();
    assert.equal(r.choices[0].text, ref);
    assert.equal((await C.states()).stories, 'loaded');
    const [child] = childrenOf(C.proc.pid);
    assert.doesNotMatch(fs.readFileSync(`/proc/${child}/cmdline`, 'utf8'), /k-router/);
    const port = /stories loaded in [0-9.]+ s \(pid \d+, port (\d+)\)/.exec(C.log())[1];
    const direct = await fetch(`http://127.0.0.1:${port}/v1/models`);
    assert.equal(direct.status, 401, 'the child checks the key too');
    await waitFor('stories asleep', async () => (await C.states()).stories === 'unloaded', 5000);
    assert.ok(Date.now() - tAnswer >= 900, `stopped ${Date.now() - tAnswer} ms after its last request`);
    // "unloaded" from SIGTERM on; the process ends a moment later
    await waitFor('the child to exit', () => childrenOf(C.proc.pid).filter(alive).length === 0, 5000);
    const again = await C.client.completions.create({ model: 'stories', prompt: PROMPT, max_tokens: N, temperature: 0 });
    assert.equal(again.choices[0].text, ref);
    assert.ok(t0 > 0);
  } finally {
    await C.stop();
  }
});
