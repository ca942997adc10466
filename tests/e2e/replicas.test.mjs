// replicas.test.mjs - three replicas behind HAProxy (scripts/serve-replicas
// with deploy/haproxy/pagedlm.cfg), through the official `openai` client, all
// on 127.0.0.1:
// - 20 chats of 4 turns (turns of different chats interleaved, one request at
//   a time): every chat stays on one replica (the X-Pagedlm-Replica header,
//   which system_fingerprint repeats in objects and stream chunks), and the
//   prefix-cache hits summed over the replicas' /metrics beat the same
//   traffic balanced round robin;
// - the affinity key's order: X-Session-Id, then prompt_cache_key, then the
//   start of the first message or of the prompt;
// - an SSE stream through the balancer is byte for byte the stream the
//   replica sends (ids and timestamps aside);
// - SIGKILL of one replica: only its chats move, each to one other replica;
//   no request fails once the health check has marked it down (those in
//   flight on it may: they are counted and reported);
// - SIGTERM stops HAProxy and every replica (no process left);
// - hash-balance-factor: requests with one key, held open at once by stand-in
//   backends, spread once a replica has 1.5 times the average in flight.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import http from 'node:http';
import net from 'node:net';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { BIN, MODEL, NAME, ALLOW_LONG } from './server.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.resolve(HERE, '../..');
const SCRIPT = path.join(ROOT, 'scripts/serve-replicas');
const CFG = path.join(ROOT, 'deploy/haproxy/pagedlm.cfg');
const TEMPLATE = path.join(HERE, 'fixtures/chat_template_concat.jinja');
const N = 3;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---- ports and processes ---------------------------------------------------------------

function portFree(port) {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}

// `count` consecutive free ports on 127.0.0.1
async function freePorts(count) {
  for (let attempt = 0; attempt < 100; attempt++) {
    const base = 20000 + Math.floor(Math.random() * 40000);
    let ok = true;
    for (let p = base; ok && p < base + count; p++) ok = await portFree(p);
    if (ok) return base;
  }
  throw new Error('no free ports');
}

function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

// scripts/serve-replicas with n replicas; resolves once it says "ready".
async function startReplicas({ balance = 'affinity' } = {}) {
  const base = await freePorts(N + 2); // balancer, stats, replicas
  const args = ['-n', String(N), '--port', String(base), '--stats-port', String(base + 1), '--replica-port',
    String(base + 2), '--balance', balance, '-t', String(N), '--pagedlm', BIN, '-m', MODEL,
    '--served-model-name', NAME, '--chat-template', TEMPLATE, '--max-model-len', '4096',
    '--kv-cache-memory', '64MiB', '--disable-log-requests'];
  const proc = spawn(SCRIPT, args, { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, ...ALLOW_LONG } });
  let log = '';
  // 'close', not 'exit': the process may exit before its last stderr lines are read
  const exited = new Promise((resolve) => proc.on('close', (code, signal) => resolve({ code, signal })));
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`serve-replicas did not get ready:\n${log}`)), 30000);
    proc.stderr.on('data', (d) => {
      log += d.toString();
      if (log.length > 1 << 21) log = log.slice(-(1 << 20));
      if (/serve-replicas: ready on /.test(log)) {
        clearTimeout(timer);
        resolve();
      }
    });
    proc.on('exit', (code) => reject(new Error(`serve-replicas exited with ${code}:\n${log}`)));
  });
  const replicas = {};
  for (const m of log.matchAll(/serve-replicas: (r\d+): pid (\d+), (http:\/\/127\.0\.0\.1:\d+)/g))
    replicas[m[1]] = { name: m[1], pid: Number(m[2]), url: m[3] };
  const lb = /serve-replicas: haproxy: pid (\d+), (http:\/\/127\.0\.0\.1:\d+)/.exec(log);
  assert.ok(lb && Object.keys(replicas).length === N, log);
  return {
    url: lb[2],
    haproxyPid: Number(lb[1]),
    stats: `http://127.0.0.1:${base + 1}/stats;csv`,
    replicas,
    log: () => log,
    // HAProxy's "Server pagedlm/r1 is DOWN, reason: ..." lines so far
    transitions: () => [...log.matchAll(/^\[haproxy\] (Server pagedlm\/.*)$/gm)].map((m) => m[1]).join('\n'),
    client: new OpenAI({ baseURL: `${lb[2]}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60000 }),
    background: 0, // requests a test holds open through the balancer (see settled)
    async stop() {
      proc.kill('SIGTERM');
      const r = await exited;
      assert.equal(r.code, 0, `serve-replicas exited with ${r.code} (${r.signal}):\n${log.slice(-4000)}`);
      assert.match(log, /serve-replicas: stopped/);
      assert.doesNotMatch(log, /AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|runtime error:/,
        'sanitizer report in a replica\'s log (make test-asan)');
      for (const p of [Number(lb[1]), ...Object.values(replicas).map((x) => x.pid)])
        assert.ok(!alive(p), `process ${p} outlived serve-replicas`);
    },
  };
}

// HAProxy's view of a server: "UP", "DOWN", "UP 1/2", ...
async function serverStatus(dep, name) {
  const csv = await (await fetch(dep.stats)).text();
  for (const line of csv.split('\n')) {
    const f = line.split(',');
    if (f[0] === 'pagedlm' && f[1] === name) return f[17];
  }
  throw new Error(`no server ${name} in the stats:\n${csv}`);
}

// Resolves once HAProxy counts at most d.background requests in flight. It
// counts a request until its stream closes, a moment after the client has
// the answer, and the bounded load (hash-balance-factor) reads that count:
// with one request counted on a replica, the next one for it goes to the next
// replica on the ring (1.5 x (1 + 1) / 3 rounds down to 1 slot each). Traffic
// meant to be one request at a time waits for this first.
async function settled(d) {
  for (let i = 0; ; i++) {
    const csv = await (await fetch(d.stats)).text();
    const row = csv.split('\n').map((l) => l.split(',')).find((f) => f[0] === 'pagedlm' && f[1] === 'BACKEND');
    if (Number(row[4]) <= d.background) return; // scur
    assert.ok(i < 500, `HAProxy still counts ${row[4]} requests in flight`);
    await sleep(2);
  }
}

async function hitsAndQueries(dep) {
  let hits = 0;
  let queries = 0;
  for (const r of Object.values(dep.replicas)) {
    const text = await (await fetch(`${r.url}/metrics`)).text();
    const get = (name) => Number(new RegExp(`^${name}\\{[^}]*\\} (\\S+)$`, 'm').exec(text)[1]);
    hits += get('vllm:prefix_cache_hits_total');
    queries += get('vllm:prefix_cache_queries_total');
  }
  return { hits, queries };
}

// ---- the traffic -------------------------------------------------------------------------

const ANIMALS = ['cat', 'dog', 'bird', 'fox', 'bear', 'frog', 'duck', 'fish', 'bunny', 'lion'];
const NAMES = ['Lily', 'Tom', 'Ben', 'Sue', 'Max', 'Anna', 'Tim', 'Mia', 'Sam', 'Lucy'];
const QUESTIONS = ['Tell me a story.', 'What happened next?', 'Was it fun?', 'How did it end?'];
const CHATS = 20;
const TURNS = 4;
const system = (k) => `Once upon a time there was a ${ANIMALS[k % 10]} named ${NAMES[(k * 3) % 10]} who ` +
  `lived in story number ${k}. Every day ${NAMES[(k * 3) % 10]} went out to play with a friend.`;

// One chat completion through deployment d, once the previous one is closed;
// streamed when asked. Returns the reply, its replica (header) and the usage;
// checks that system_fingerprint names the same replica.
async function ask(d, messages, { stream = false, headers = {}, extra = {} } = {}) {
  await settled(d);
  const client = d.client;
  const body = { model: NAME, messages, max_tokens: 12, temperature: 0, ...extra };
  if (stream) {
    const { data, response } = await client.chat.completions
      .create({ ...body, stream: true, stream_options: { include_usage: true } }, { headers }).withResponse();
    const replica = response.headers.get('x-pagedlm-replica');
    let text = '';
    let usage = null;
    let finish = null;
    for await (const c of data) {
      assert.equal(c.system_fingerprint, replica, 'every chunk names the replica of the header');
      if (c.usage) usage = c.usage;
      text += c.choices[0]?.delta?.content ?? '';
      finish = c.choices[0]?.finish_reason ?? finish;
    }
    assert.ok(finish && usage, 'the stream ended with a finish reason and a usage chunk');
    return { text, replica, usage };
  }
  const { data, response } = await client.chat.completions.create(body, { headers }).withResponse();
  const replica = response.headers.get('x-pagedlm-replica');
  assert.equal(data.system_fingerprint, replica);
  return { text: data.choices[0].message.content, replica, usage: data.usage };
}

// 20 chats x 4 turns, turn-major (turn 1 of every chat, then turn 2, ...),
// every other turn streamed. `script` replays the replies of an earlier run
// so that two deployments see exactly the same prompts.
async function converse(d, script = null) {
  const chats = [];
  for (let k = 0; k < CHATS; k++) chats.push({ messages: [{ role: 'system', content: system(k) }], replicas: [] });
  let cached = 0;
  for (let t = 0; t < TURNS; t++) {
    for (let k = 0; k < CHATS; k++) {
      const c = chats[k];
      c.messages.push({ role: 'user', content: QUESTIONS[t] });
      const r = await ask(d, c.messages, { stream: t % 2 === 1 });
      c.replicas.push(r.replica);
      cached += r.usage.prompt_tokens_details.cached_tokens;
      c.messages.push({ role: 'assistant', content: script ? script[k].messages[2 + 2 * t].content : r.text });
    }
  }
  return { chats, cached };
}

// ---- the tests ---------------------------------------------------------------------------

let dep;
let affinity; // the first deployment's traffic: chats, replicas, cache hits
before(async () => {
  const hv = spawnSync('haproxy', ['-v'], { encoding: 'utf8' });
  assert.equal(hv.status, 0, 'haproxy is needed (scripts/install-deps --test installs it)');
  const check = spawnSync('haproxy', ['-c', '-f', CFG], { encoding: 'utf8' });
  assert.equal(check.status, 0, check.stdout + check.stderr);
  assert.doesNotMatch(check.stdout + check.stderr, /WARNING|ALERT/, 'the shipped configuration parses cleanly');
  dep = await startReplicas();
});
after(async () => dep && dep.stop());

test('every chat stays on one replica, and affinity finds more cached prefixes than round robin', { timeout: 60000 },
  async (t) => {
    const m0 = await hitsAndQueries(dep);
    const run = await converse(dep);
    const m1 = await hitsAndQueries(dep);
    const used = new Set();
    for (const [k, c] of run.chats.entries()) {
      assert.equal(new Set(c.replicas).size, 1, `chat ${k} went to ${c.replicas.join(', ')}\n${dep.transitions()}`);
      assert.ok(c.replicas[0] in dep.replicas, c.replicas[0]);
      used.add(c.replicas[0]);
    }
    assert.ok(used.size >= 2, `20 chats all went to ${[...used]}: the key does not spread`);
    // the replicas' counters agree with what the responses said
    assert.equal(m1.hits - m0.hits, run.cached);
    affinity = { chats: run.chats, hits: m1.hits - m0.hits, queries: m1.queries - m0.queries };

    const rr = await startReplicas({ balance: 'roundrobin' });
    try {
      const r0 = await hitsAndQueries(rr);
      const run2 = await converse(rr, run.chats);
      const r1 = await hitsAndQueries(rr);
      const rrHits = r1.hits - r0.hits;
      assert.equal(r1.queries - r0.queries, affinity.queries, 'both deployments saw the same prompts');
      assert.ok(run2.chats.some((c) => new Set(c.replicas).size > 1), 'round robin moves chats');
      t.diagnostic(`prefix-cache hits: affinity ${affinity.hits}, round robin ${rrHits} of ${affinity.queries} ` +
        `prompt tokens; chats per replica: ${[...used].map((r) => `${r} ${run.chats.filter((c) => c.replicas[0] === r).length}`)}`);
      assert.ok(affinity.hits > rrHits, `affinity ${affinity.hits} hits, round robin ${rrHits}`);
    } finally {
      await rr.stop();
    }
  });

test('the key is X-Session-Id, then prompt_cache_key, then the start of the first message or prompt', async () => {
  const msgs = (s) => [{ role: 'system', content: s }, { role: 'user', content: 'Hi' }];
  const where = async (opts, messages = msgs('Once upon a time')) =>
    (await ask(dep, messages, { ...opts, extra: { max_tokens: 1, ...(opts.extra ?? {}) } })).replica;
  const keys = Array.from({ length: 12 }, (_, i) => `key-${i}`);
  // 12 keys land on more than one replica; one key with 12 bodies on one
  const bySession = new Set();
  for (const k of keys) bySession.add(await where({ headers: { 'X-Session-Id': k } }));
  assert.ok(bySession.size > 1, 'X-Session-Id picks the replica');
  const oneSession = new Set();
  for (const k of keys)
    oneSession.add(await where({ headers: { 'X-Session-Id': 'same' }, extra: { prompt_cache_key: k } }, msgs(k)));
  assert.equal(oneSession.size, 1,
    `X-Session-Id comes before prompt_cache_key and the messages: ${[...oneSession]}\n${dep.transitions()}`);
  const byKey = new Set();
  for (const k of keys) byKey.add(await where({ extra: { prompt_cache_key: k } }));
  assert.ok(byKey.size > 1, 'prompt_cache_key picks the replica');
  const oneKey = new Set();
  for (const k of keys) oneKey.add(await where({ extra: { prompt_cache_key: 'same' } }, msgs(k)));
  assert.equal(oneKey.size, 1, 'prompt_cache_key comes before the messages');
  const byMessage = new Set();
  for (const k of keys) byMessage.add(await where({}, msgs(`${k}: once upon a time`)));
  assert.ok(byMessage.size > 1, 'the first message picks the replica');
  // completions: the first 256 bytes of the prompt, whatever follows
  const head = 'Once upon a time there was a little girl named Lily. '.repeat(6).slice(0, 256);
  const byPrompt = new Set();
  for (const k of keys) {
    await settled(dep);
    const { response } = await dep.client.completions.create({ model: NAME, prompt: `${head} ${k}`, max_tokens: 1 })
      .withResponse();
    byPrompt.add(response.headers.get('x-pagedlm-replica'));
  }
  assert.equal(byPrompt.size, 1, 'prompts sharing their first 256 bytes share a replica');
});

// data: payloads of an SSE body, with the per-request fields blanked
function events(body) {
  assert.ok(body.endsWith('data: [DONE]\n\n'), `the stream ends with [DONE]: ${body.slice(-200)}`);
  return body.split('\n\n').filter((e) => e.startsWith('data: ')).map((e) => e.slice(6))
    .map((d) => (d === '[DONE]' ? d : JSON.stringify({ ...JSON.parse(d), id: '', created: 0 })));
}

test('an SSE stream passes through HAProxy intact', async () => {
  const chat = affinity ? affinity.chats[0] : { messages: [{ role: 'system', content: system(0) }] };
  const body = JSON.stringify({ model: NAME, messages: [...chat.messages, { role: 'user', content: 'Go on.' }],
    max_tokens: 64, temperature: 0, stream: true, stream_options: { include_usage: true } });
  const post = (url) => fetch(`${url}/v1/chat/completions`, { method: 'POST', body,
    headers: { 'content-type': 'application/json' } });
  const via = await post(dep.url);
  assert.equal(via.status, 200);
  assert.match(via.headers.get('content-type'), /^text\/event-stream/);
  const replica = via.headers.get('x-pagedlm-replica');
  const viaText = await via.text();
  // the same request straight to that replica (its prefix is cached now: cached_tokens differ)
  const direct = await post(dep.replicas[replica].url);
  const directText = await direct.text();
  const a = events(viaText);
  const b = events(directText);
  assert.ok(a.length > 10, `${a.length} events`);
  const noUsage = (e) => e.replace(/"cached_tokens":\d+/, '');
  assert.deepEqual(a.map(noUsage), b.map(noUsage));
});

test('killing a replica moves only its chats; nothing fails once it is marked down', { timeout: 60000 }, async (t) => {
  assert.ok(affinity, 'needs the chats of the first test');
  const home = affinity.chats.map((c) => c.replicas[0]);
  const count = (r) => home.filter((h) => h === r).length;
  const victim = Object.keys(dep.replicas).sort((a, b) => count(b) - count(a))[0];
  assert.ok(count(victim) > 0 && count(victim) < CHATS);
  const prompt = (k) => [...affinity.chats[k].messages, { role: 'user', content: 'And then?' }];
  const victimChat = home.indexOf(victim);

  // a long stream in flight on the victim (a plain request would be
  // replayed on another replica: retry-on empty-response)
  await settled(dep);
  const stream = await dep.client.chat.completions.create({ model: NAME, messages: prompt(victimChat), temperature: 0,
    max_tokens: 3000, ignore_eos: true, stream: true });
  dep.background = 1; // the other requests need not wait for it
  const it = stream[Symbol.asyncIterator]();
  for (let i = 0; i < 3; i++) await it.next();
  const inflight = (async () => { for (;;) if ((await it.next()).done) return; })().then(() => null, (e) => String(e));

  // chats go on, one request at a time, while the victim dies
  const log = [];
  let downAt = null;
  let stop = false;
  const t0 = Date.now();
  const worker = (async () => {
    for (let i = 0; !stop && Date.now() - t0 < 30000; i++) {
      const k = i % CHATS;
      const start = Date.now();
      try {
        const r = await ask(dep, prompt(k), { extra: { max_tokens: 4 } });
        log.push({ k, start, replica: r.replica });
      } catch (e) {
        log.push({ k, start, error: String(e) });
      }
    }
  })();
  await sleep(200);
  process.kill(dep.replicas[victim].pid, 'SIGKILL');
  const killedAt = Date.now();
  while (downAt === null && Date.now() - killedAt < 15000) {
    if ((await serverStatus(dep, victim)).startsWith('DOWN')) downAt = Date.now();
    else await sleep(20);
  }
  if (downAt === null) stop = true;
  assert.ok(downAt !== null, 'HAProxy did not mark the killed replica down');
  // every chat twice more once the victim is out
  while (log.filter((e) => e.start > downAt).length < 2 * CHATS && Date.now() - t0 < 30000) await sleep(20);
  stop = true;
  await worker;
  assert.ok(log.filter((e) => e.start > downAt).length >= 2 * CHATS, 'the chats did not go on');
  const lost = (await inflight) === null ? 0 : 1;
  dep.background = 0;

  const after = log.filter((e) => e.start > downAt);
  const between = log.filter((e) => e.start <= downAt && e.start >= killedAt);
  assert.deepEqual(after.filter((e) => e.error), [], 'requests after the replica was marked down failed');
  const moved = new Map();
  for (const e of log) {
    if (e.error) continue;
    if (home[e.k] !== victim) {
      assert.equal(e.replica, home[e.k], `chat ${e.k} moved from ${home[e.k]} to ${e.replica}, yet its replica lives`);
    } else if (e.start > downAt) {
      assert.notEqual(e.replica, victim);
      if (!moved.has(e.k)) moved.set(e.k, e.replica);
      assert.equal(e.replica, moved.get(e.k), `chat ${e.k} did not settle on one replica`);
    }
  }
  assert.equal(moved.size, count(victim));
  t.diagnostic(`killed ${victim} (${count(victim)} of ${CHATS} chats), marked down after ${downAt - killedAt} ms; ` +
    `${between.length} requests in between, ${between.filter((e) => e.error).length} failed; ` +
    `${lost} of 1 stream in flight on it failed; its chats moved to ${[...new Set(moved.values())]}`);
});

test('hash-balance-factor spreads one hot key once its replica holds 1.5x the average', async () => {
  // stand-in backends that hold every request until released, so that HAProxy
  // sees them all in flight at once
  const held = [];
  const servers = [];
  const base = await freePorts(N + 1);
  for (let i = 0; i < N; i++) {
    const s = http.createServer((req, res) => {
      if (req.url === '/health') return res.end();
      req.resume();
      req.on('end', () => held.push(() => res.end(`r${i}`)));
    });
    await new Promise((r) => s.listen(base + 1 + i, '127.0.0.1', r));
    servers.push(s);
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pagedlm-lb-'));
  const cfg = fs.readFileSync(CFG, 'utf8').replace(/^\s*server\s.*\n?/gm, '') +
    Array.from({ length: N }, (_, i) => `    server r${i} 127.0.0.1:${base + 1 + i}\n`).join('');
  fs.writeFileSync(path.join(dir, 'haproxy.cfg'), cfg);
  const lb = spawn('haproxy', ['-db', '-f', path.join(dir, 'haproxy.cfg')],
    { env: { ...process.env, PAGEDLM_LB_BIND: `127.0.0.1:${base}` }, stdio: 'ignore' });
  try {
    for (let i = 0; !(await fetch(`http://127.0.0.1:${base}/health`).then((r) => r.ok, () => false)); i++) {
      assert.ok(i < 100, 'HAProxy did not start');
      await sleep(50);
    }
    const REQS = 12;
    const answers = [];
    for (let i = 0; i < REQS; i++) {
      answers.push(fetch(`http://127.0.0.1:${base}/v1/chat/completions`, { method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ messages: [{ role: 'system', content: 'one hot system prompt' }] }) }).then((r) => r.text()));
      while (held.length < i + 1) await sleep(5); // each one in flight before the next
    }
    held.forEach((f) => f());
    const per = {};
    for (const a of await Promise.all(answers)) per[a] = (per[a] ?? 0) + 1;
    // a replica takes one more only while it holds fewer than ceil(1.5 x (in flight + 1)) / 3
    const most = Math.max(...Object.values(per));
    assert.ok(Object.keys(per).length > 1 && most <= Math.ceil((1.5 * REQS) / N), JSON.stringify(per));
  } finally {
    lb.kill('SIGTERM');
    servers.forEach((s) => s.close());
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
