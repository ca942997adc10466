#!/usr/bin/env node
// fault-hunt.mjs - replays the hostile-client cases of the fault hunts
// (issue 33 and the hunt before it) against `pagedlm serve` on loopback and
// prints a table: case, HTTP status (or what happened), time, and the
// server's resident memory (VmRSS) and peak (VmHWM) after it. A case whose
// outcome is not the expected one is marked FAIL; a server that dies is
// reported and restarted. Run by hand (not by CTest): the next hunt starts
// from here.
//
//   scripts/fault-hunt [--bin build/pagedlm] [--only TEXT] [--address-limit GIB] [--json]
//
//   --bin             the pagedlm binary (default: build/pagedlm of this checkout)
//   --only TEXT       the cases whose name contains TEXT
//   --address-limit G run each server under `ulimit -v` of G GiB (as in a container with a memory limit)
//   --json            one JSON object per case instead of the table
//
// Test data from PAGEDLM_TESTDATA (default ../shared next to the checkout):
// stories260K for the text cases; the vision cases use a tiny random LLaVA
// written into a temporary folder (tests/e2e/vlm_model.mjs). Every request
// goes to 127.0.0.1; the whole run is bounded (each case has a time limit,
// about 60 cases, a few minutes in all).
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { writeLlava, png } from '../tests/e2e/vlm_model.mjs';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const argv = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : dflt;
};
const BIN = path.resolve(opt('--bin', path.join(ROOT, 'build/pagedlm')));
const ONLY = opt('--only', '');
const AS_LIMIT = opt('--address-limit', '');
const JSON_OUT = argv.includes('--json');
const TESTDATA = process.env.PAGEDLM_TESTDATA || path.resolve(ROOT, '../shared');
const STORIES = path.join(TESTDATA, 'models/stories260K/stories260K.gguf');
const FIXTURES = path.join(ROOT, 'tests/e2e/fixtures');
for (const f of [BIN, STORIES]) if (!fs.existsSync(f)) throw new Error(`fault-hunt: ${f} not found`);

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---- servers ------------------------------------------------------------------------------

async function startServer(args, env = {}) {
  const cmd = [BIN, 'serve', '--host', '127.0.0.1', '--port', '0', '--served-model-name', 'm', ...args]
    .map((a) => `'${String(a).replaceAll("'", "'\\''")}'`).join(' ');
  const limit = AS_LIMIT ? `ulimit -v ${Math.round(Number(AS_LIMIT) * 1024 * 1024)}; ` : '';
  const proc = spawn('sh', ['-c', `${limit}exec ${cmd}`], { stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, ...env } });
  let log = '';
  proc.stderr.on('data', (d) => {
    log += d;
    if (log.length > 1 << 20) log = log.slice(-(1 << 19));
  });
  const exited = new Promise((r) => proc.on('exit', (code, signal) => r({ code, signal })));
  let port = null;
  for (let i = 0; i < 600 && !port; i++) {
    const m = /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(log);
    if (m) port = Number(m[1]);
    else await sleep(50);
    if (proc.exitCode !== null) throw new Error(`server exited: ${log}`);
  }
  if (!port) throw new Error(`server did not listen: ${log}`);
  const base = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 600; i++) {
    const r = await fetch(`${base}/health`).catch(() => null);
    if (r && r.status === 200) break;
    await sleep(50);
  }
  return { proc, port, base, exited, log: () => log, args, env };
}

function memory(pid) {
  try {
    const s = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
    const kb = (k) => Number((new RegExp(`${k}:\\s+(\\d+)`).exec(s) || [0, 0])[1]);
    return { rss: kb('VmRSS') / 1024, hwm: kb('VmHWM') / 1024 };
  } catch {
    return { rss: NaN, hwm: NaN };
  }
}

async function alive(srv) {
  if (srv.proc.exitCode !== null || srv.proc.signalCode) return false;
  const r = await fetch(`${srv.base}/health`, { signal: AbortSignal.timeout(5000) }).catch(() => null);
  return !!r && r.status === 200;
}

// ---- requests -------------------------------------------------------------------------------

async function post(srv, route, body, { timeoutMs = 30000, signal } = {}) {
  const r = await fetch(`${srv.base}${route}`, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body), signal: signal ?? AbortSignal.timeout(timeoutMs) });
  const text = await r.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch { /* not JSON */ }
  return { status: r.status, json, text };
}

// Raw bytes over one connection; resolves with what came back by the time
// the server closed (or limitMs passed).
function exchange(srv, chunks, { limitMs = 8000, gapMs = 0, halfClose = false } = {}) {
  return new Promise((resolve) => {
    const s = net.connect(srv.port, '127.0.0.1');
    let out = '';
    const t0 = Date.now();
    const done = (why) => {
      s.destroy();
      resolve({ text: out, ms: Date.now() - t0, why });
    };
    const timer = setTimeout(() => done('limit'), limitMs);
    s.on('data', (d) => (out += d.toString('latin1')));
    s.on('close', () => {
      clearTimeout(timer);
      done('closed');
    });
    s.on('error', () => {});
    s.on('connect', async () => {
      for (const c of [].concat(chunks)) {
        s.write(c);
        if (gapMs) await sleep(gapMs);
      }
      if (halfClose) s.end();
    });
  });
}

const statusOf = (raw) => Number((/^HTTP\/1\.[01] (\d{3})/.exec(raw.text.replace(/^HTTP\/1\.1 1\d\d [^\r]*\r\n\r\n/, '')) || [0, 0])[1]);

// A greyscale PNG of w x h pixels, all one colour: a few hundred bytes for a huge image.
const greyPng = (w, h) => png(w, h, 0, { flat: true, grey: true });
const dataUrl = (b) => `data:image/png;base64,${b.toString('base64')}`;
const imageChat = (url, extra = {}) => ({ model: 'm', max_tokens: 4, ...extra,
  messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url } }, { type: 'text', text: 'What?' }] }] });

// ---- the cases ------------------------------------------------------------------------------

// expect: a status, a list of statuses, or a function (result) -> true/string (the failure).
// prep (optional): makes the request's payload before the clock starts; run(server, payload).
const cases = [];
const add = (server, name, expect, run, prep) => cases.push({ server, name, expect, run, prep });
const chat = (content, extra = {}) => ({ model: 'm', max_tokens: 8, messages: [{ role: 'user', content }], ...extra });
const NESTED = '((a{1,100}){1,100}){1,100}';
const AMBIGUOUS_GBNF = 'root ::= a "b"\na ::= "x" a | "x" a a | ""';
const TOOL = (parameters) => [{ type: 'function', function: { name: 'f', parameters } }];

// 1. grammars (issue 33, defect 1)
for (const [name, body, want] of [
  ['regex (a|a)*b', { prompt: 'Once', max_tokens: 8, guided_regex: '(a|a)*b' }, 200],
  ['regex (ab|ab)*', { prompt: 'Once', max_tokens: 8, structured_outputs: { regex: '(ab|ab)*' } }, 200],
  ['regex nested {1,100}^3', { prompt: 'Once', max_tokens: 8, guided_regex: NESTED }, 400],
  ['regex (a{1,1000}){1,1000}', { prompt: 'Once', max_tokens: 8, structured_outputs: { regex: '(a{1,1000}){1,1000}' } }, 400],
  ['regex (a|b)*a(a|b){20}', { prompt: 'Once', max_tokens: 8, guided_regex: '(a|b)*a(a|b){20}' }, 400],
  ['schema pattern nested', { prompt: 'Once', max_tokens: 8, response_format: { type: 'json_schema',
    json_schema: { name: 'p', schema: { type: 'string', pattern: `^${NESTED}$` } } } }, 400],
  ['gbnf ("a"|"a")* "b"', { prompt: 'Once', max_tokens: 8, grammar: 'root ::= ("a" | "a")* "b"' }, 200],
  ['gbnf nested repetition', { prompt: 'Once', max_tokens: 8, grammar: 'root ::= (("a"){1,100}){1,100} "b"' }, 400],
  ['gbnf ambiguous (stacks double)', { prompt: 'Once', max_tokens: 40, grammar: AMBIGUOUS_GBNF }, 200],
]) add('text', `grammar: ${name}`, want, (s) => post(s, '/v1/completions', { model: 'm', ...body }));
add('text', 'grammar: tool parameters pattern nested', 400, (s) => post(s, '/v1/chat/completions',
  chat('hi', { tools: TOOL({ type: 'object', properties: { s: { type: 'string', pattern: NESTED } } }),
    tool_choice: 'required' })));
// a flood: they compile a few at a time (memory and cores bounded); those that wait past the limit get 503
add('text', 'grammar: 8 explosive regexes at once', (r) => r.ok || `status ${r.status}`, async (s) => {
  const all = await Promise.all(Array.from({ length: 8 }, () => post(s, '/v1/completions',
    { model: 'm', prompt: 'Once', max_tokens: 8, guided_regex: NESTED })));
  const st = all.map((r) => r.status);
  return { status: st.join('/'), ok: st.every((x) => x === 400 || x === 503) };
});
add('text', 'grammar: client leaves after 0.5 s of compiling', 'closed', async (s) => {
  const body = JSON.stringify({ model: 'm', prompt: 'Once', max_tokens: 8, guided_regex: NESTED });
  const r = await exchange(s, `POST /v1/completions HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\n` +
    `Content-Length: ${body.length}\r\n\r\n${body}`, { limitMs: 500 });
  return { status: r.why === 'limit' ? 'closed' : statusOf(r) };
});

// 3. stop strings (defect 3): 16 clients with 64 stop strings of 4 KiB while a short request runs
add('text', 'stop: 16 x 64 x 4 KiB stop strings beside a short request', (r) => r.ms < 1000 || `short request took ${r.ms} ms`,
  async (s) => {
    const stops = (k) => Array.from({ length: 64 }, (_, i) => `${k}-${i}-`.padEnd(4096, String.fromCharCode(97 + ((k + i) % 26))));
    const heavy = Array.from({ length: 16 }, (_, k) => post(s, '/v1/completions',
      { model: 'm', prompt: 'Once', max_tokens: 1, stop: stops(k) }, { timeoutMs: 60000 }));
    await sleep(20);
    const t0 = Date.now();
    const short = await post(s, '/v1/completions', { model: 'm', prompt: 'Once', max_tokens: 4 });
    const ms = Date.now() - t0;
    await Promise.all(heavy);
    return { status: short.status, ms, note: `short request ${ms} ms` };
  });

// 4. tool calls cut by max_tokens (defect 4)
add('text', 'tools: required call cut by max_tokens', (r) => {
  const c = r.json?.choices?.[0];
  if (!c) return `status ${r.status}: ${r.json?.error?.message?.slice(0, 120)}`;
  if (c.finish_reason !== 'length') return `finish_reason ${c.finish_reason}`;
  if (/<tool_call>/.test(c.message.content ?? '')) return 'raw <tool_call> text in content';
  if ((c.message.tool_calls ?? []).some((t) => t.function.arguments === '')) return 'a call with arguments ""';
  return true;
}, (s) => post(s, '/v1/chat/completions', chat('weather?', { max_tokens: 12, tool_choice: 'required',
  tools: TOOL({ type: 'object', properties: { city: { type: 'string' } }, required: ['city'] }) })));

// 6. --max-model-len above the model's context (defect 6): the server must refuse to start
add('none', 'start: --max-model-len 1000000 on a 128-token model', (r) => r.status !== 0 || 'the server started',
  async () => {
    const r = spawnSync(BIN, ['serve', '-m', STORIES, '--port', '0', '--max-model-len', '1000000'],
      { encoding: 'utf8', timeout: 20000, env: { ...process.env, PAGEDLM_ALLOW_LONG_MAX_MODEL_LEN: '' } });
    return { status: r.status ?? r.signal, note: (r.stderr || '').split('\n').find((l) => /error/.test(l))?.slice(0, 100) };
  });

// 7. HTTP framing (defect 7) and the framing cases of the hunt before
const HEAD = 'POST /v1/completions HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\n';
const SMALL = JSON.stringify({ model: 'm', prompt: 'Hi', max_tokens: 1 });
add('text', 'http: chunked body over --max-body', 413, async (s) => {
  const piece = `${(64 * 1024).toString(16)}\r\n${'a'.repeat(64 * 1024)}\r\n`;
  const r = await exchange(s, [`${HEAD}Transfer-Encoding: chunked\r\n\r\n`, ...Array(40).fill(piece), '0\r\n\r\n'],
    { gapMs: 5 });
  return { status: statusOf(r) };
});
add('text', 'http: Transfer-Encoding gzip, chunked', (r) => [400, 501].includes(r.status) && r.ms < 1000 ||
  `status ${r.status} after ${r.ms} ms`, async (s) => {
  const r = await exchange(s, `${HEAD}Transfer-Encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n`);
  return { status: statusOf(r), ms: r.ms };
});
add('text', 'http: conflicting Content-Length', 400, async (s) =>
  ({ status: statusOf(await exchange(s, `${HEAD}Content-Length: ${SMALL.length}\r\nContent-Length: ${SMALL.length + 5}\r\n\r\n${SMALL}`)) }));
add('text', 'http: half-close after the request', 200, async (s) =>
  ({ status: statusOf(await exchange(s, `${HEAD}Content-Length: ${SMALL.length}\r\n\r\n${SMALL}`, { halfClose: true })) }));
add('text', 'http: body of 5 MiB', 413, (s) => post(s, '/v1/completions', JSON.stringify({ model: 'm', prompt: 'x'.repeat(5 << 20) })));
add('text', 'json: \\u0000 in the prompt', (r) => [200, 400].includes(r.status) || `status ${r.status}`,
  (s) => post(s, '/v1/completions', '{"model": "m", "prompt": "a\\u0000b", "max_tokens": 1}'));
add('text', 'json: malformed', 400, (s) => post(s, '/v1/completions', '{"model": "m", "prompt": '));
add('text', 'json: invalid UTF-8 in a string', 400, (s) => post(s, '/v1/completions',
  Buffer.concat([Buffer.from('{"model": "m", "prompt": "'), Buffer.from([0xff, 0xfe]), Buffer.from('"}')])));
add('text', 'json: nested 100000 deep', 400, (s) => post(s, '/v1/completions', '['.repeat(100000)));
add('text', 'idle keep-alive connection closes', (r) => r.why === 'closed' || 'still open after 12 s', async (s) => {
  const r = await exchange(s, '', { limitMs: 12000 });
  return { status: r.why, why: r.why, ms: r.ms };
});

// earlier hunts: limits on what one request may ask for
for (const [name, body, want] of [
  ['n = 65', { prompt: 'Hi', n: 65 }, 400],
  ['max_tokens = -1', { prompt: 'Hi', max_tokens: -1 }, 400],
  ['logprobs = 21', { prompt: 'Hi', logprobs: 21, max_tokens: 1 }, 400],
  ['prompt_logprobs over the bound', { prompt: [Array(2000).fill(403)], prompt_logprobs: 20, n: 1, max_tokens: 1 }, 400],
  ['65 stop strings', { prompt: 'Hi', stop: Array(65).fill('x') }, 400],
  ['stop string of 4097 bytes', { prompt: 'Hi', stop: ['x'.repeat(4097)] }, 400],
  ['logit_bias with 5000 entries', { prompt: 'Hi', logit_bias: Object.fromEntries(Array.from({ length: 5000 }, (_, i) => [i % 512, 1])) }, 200],
  ['token id out of range', { prompt: [1, 99999], max_tokens: 1 }, 400],
  ['prompt beyond the context', { prompt: 'Once upon a time '.repeat(400), max_tokens: 1 }, 400],
  ['seed out of range', { prompt: 'Hi', seed: 1e30, max_tokens: 1 }, 400],
]) add('text', `limits: ${name}`, want, (s) => post(s, '/v1/completions', { model: 'm', ...body }));
add('text', 'cache_salt: another salt gets no cached tokens', (r) => r.ok || r.note, async (s) => {
  const body = { model: 'm', prompt: 'Once upon a time there was a little girl named Lily. She liked to play outside in the park with her friends. One day she saw a big', max_tokens: 1 };
  await post(s, '/v1/completions', { ...body, cache_salt: 'a' });
  const same = await post(s, '/v1/completions', { ...body, cache_salt: 'a' });
  const other = await post(s, '/v1/completions', { ...body, cache_salt: 'b' });
  const cached = (r) => r.json?.usage?.prompt_tokens_details?.cached_tokens ?? -1;
  return { status: other.status, ok: cached(same) > 0 && cached(other) === 0,
    note: `same salt ${cached(same)} cached, other salt ${cached(other)}` };
});

// 9. tool_call_id that matches no earlier call
add('text', 'tools: tool_call_id matching no earlier call', [200, 400], (s) => post(s, '/v1/chat/completions', {
  model: 'm', max_tokens: 2, tools: TOOL({ type: 'object' }), messages: [{ role: 'user', content: 'hi' },
    { role: 'tool', tool_call_id: 'call_nobody', content: '42' }] }));

// 2, 5, 8. images (a tiny random LLaVA)
for (const [w, h] of [[300000, 1], [1, 300000], [1, 30000], [30000, 1], [67000000, 1], [16385, 100], [9000, 9000]])
  add('vision', `image: ${w} x ${h} grey PNG`, 400, (s, body) => post(s, '/v1/chat/completions', body),
    () => imageChat(dataUrl(greyPng(w, h))));
add('vision', 'image: 80 x 60 RGB PNG', 200, (s) => post(s, '/v1/chat/completions', imageChat(dataUrl(png(80, 60, 3)))));
add('vision', 'image: truncated PNG', 400, (s) => post(s, '/v1/chat/completions',
  imageChat(dataUrl(png(40, 30, 4).subarray(0, 100)))));
add('vision', 'image: not an image', 400, (s) => post(s, '/v1/chat/completions', imageChat(dataUrl(Buffer.from('hello')))));
add('vision', 'file://: outside the allowed path, existing and not', (r) => r.ok || r.note, async (s) => {
  const a = await post(s, '/v1/chat/completions', imageChat('file:///etc/passwd'));
  const b = await post(s, '/v1/chat/completions', imageChat('file:///etc/nonexistent-fault-hunt'));
  const c = await post(s, '/v1/chat/completions', imageChat(`file://${s.media}/../../etc/passwd`));
  const same = a.json?.error?.message === b.json?.error?.message && b.json?.error?.message === c.json?.error?.message;
  return { status: `${a.status}/${b.status}/${c.status}`, ok: a.status === 400 && b.status === 400 && same,
    note: same ? '' : `messages differ: "${a.json?.error?.message}" / "${b.json?.error?.message}"` };
});
add('vision', 'file://: an http URL', 400, (s) => post(s, '/v1/chat/completions', imageChat('http://127.0.0.1:1/x.png')));

// ---- run --------------------------------------------------------------------------------------

function verdict(expect, r) {
  if (typeof expect === 'function') {
    const v = expect(r);
    return v === true ? null : String(v);
  }
  const want = [].concat(expect);
  return want.includes(r.status) ? null : `expected ${want.join(' or ')}`;
}

async function main() {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pagedlm-fault-hunt-'));
  const specs = {
    // 512 positions (stories260K was trained with 512; its GGUF declares 128) make room for tool prompts
    text: async () => startServer(['-m', STORIES, '--kv-cache-memory', '256MiB', '--max-body', '1MiB',
      '--chat-template', path.join(FIXTURES, 'chat_template_tools.jinja'), '--enable-auto-tool-choice',
      '--tool-call-parser', 'hermes', '--timeout-keep-alive', '5', '--max-model-len', '512'],
    { PAGEDLM_ALLOW_LONG_MAX_MODEL_LEN: '1' }),
    vision: async () => {
      const dir = path.join(tmp, 'llava');
      if (!fs.existsSync(dir)) writeLlava(dir, TESTDATA);
      const media = path.join(tmp, 'media');
      fs.mkdirSync(media, { recursive: true });
      const s = await startServer(['-m', dir, '--kv-cache-memory', '256MiB', '--chat-template',
        path.join(FIXTURES, 'chat_template.jinja'), '--allowed-local-media-path', media]);
      s.media = media;
      return s;
    },
  };
  const servers = {};
  const rows = [];
  const selected = cases.filter((c) => c.name.includes(ONLY));
  for (const c of selected) {
    let s = null;
    if (c.server !== 'none') {
      if (!servers[c.server] || !(await alive(servers[c.server]))) servers[c.server] = await specs[c.server]();
      s = servers[c.server];
    }
    const payload = c.prep ? c.prep() : undefined;
    const t0 = Date.now();
    let r;
    try {
      r = await Promise.race([c.run(s, payload), sleep(90000).then(() => ({ status: 'timeout' }))]);
    } catch (e) {
      r = { status: `error: ${e.message.slice(0, 60)}` };
    }
    const ms = r.ms ?? Date.now() - t0;
    const mem = s ? memory(s.proc.pid) : { rss: NaN, hwm: NaN };
    let why = verdict(c.expect, { ...r, ms });
    if (s && !(await alive(s))) {
      why = `SERVER DIED (${s.proc.signalCode || s.proc.exitCode}) ${why || ''}`;
      process.stderr.write(s.log().slice(-2000));
    }
    const row = { case: c.name, status: r.status, ms: Date.now() - t0, rss_mb: mem.rss, peak_mb: mem.hwm,
      result: why ? 'FAIL' : 'ok', why: why || r.note || '' };
    rows.push(row);
    if (JSON_OUT) console.log(JSON.stringify(row));
    else console.log(`${row.result.padEnd(4)} ${row.case.padEnd(58).slice(0, 58)} ${String(row.status).padEnd(10)}` +
      ` ${String(row.ms).padStart(6)} ms ${row.rss_mb.toFixed(0).padStart(6)} MB ${row.peak_mb.toFixed(0).padStart(6)} MB` +
      `  ${row.why}`);
  }
  for (const s of Object.values(servers)) {
    s.proc.kill('SIGTERM');
    await s.exited;
  }
  fs.rmSync(tmp, { recursive: true, force: true });
  const failed = rows.filter((r) => r.result !== 'ok').length;
  if (!JSON_OUT) console.log(`\n${rows.length} cases, ${failed} failed (columns: status, time, server RSS after, server peak RSS)`);
  process.exit(failed ? 1 : 0);
}

main().catch((e) => {
  console.error(e);
  process.exit(2);
});
