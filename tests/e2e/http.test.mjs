// http.test.mjs - the server at the HTTP level, with raw sockets: idle
// keep-alive connections close after --timeout-keep-alive (a connection
// that made a generation request too), request framing that is ambiguous
// gets 400 and a closed connection, a Transfer-Encoding other than chunked
// 501 or 400 at once, a chunked body over the limit 413 (also past the
// drain limit), a client that half-closes after its request still gets the
// whole answer (streaming or not), text with NUL bytes survives /detokenize
// and echo and is taken back in prompts, a KV pool that cannot hold
// --max-model-len stops the server at start with both numbers, and so does
// a --max-model-len past the model's own unless it is allowed explicitly.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { spawnSync } from 'node:child_process';
import { startServer, BIN, MODEL, NAME, ALLOW_LONG } from './server.mjs';

let srv;
let port;
before(async () => {
  srv = await startServer(['--timeout-keep-alive', '1']);
  port = Number(new URL(srv.baseURL).port);
});
after(async () => srv && srv.stop());

// Sends raw bytes on a new connection; resolves with everything the server
// sent and when (ms after the send) it closed its side. halfClose: shut down
// our sending side right after the request, still reading.
function exchange(bytes, { halfClose = false, limitMs = 8000 } = {}) {
  return new Promise((resolve, reject) => {
    const s = net.connect(port, '127.0.0.1');
    const chunks = [];
    let endedAt = null;
    const t0 = Date.now();
    s.on('data', (d) => chunks.push(d));
    s.on('end', () => { endedAt = Date.now() - t0; });
    s.on('error', reject);
    const timer = setTimeout(() => s.destroy(), limitMs);
    s.on('close', () => {
      clearTimeout(timer);
      resolve({ text: Buffer.concat(chunks).toString('utf8'), endedAt });
    });
    s.write(bytes);
    if (halfClose) s.end();
  });
}

function post(path, body, extraHeaders = '') {
  const b = JSON.stringify(body);
  return `POST ${path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n` +
    `Content-Length: ${Buffer.byteLength(b)}\r\n${extraHeaders}\r\n${b}`;
}

test('an idle keep-alive connection closes after --timeout-keep-alive, also after a generation', async () => {
  for (const body of [{ model: NAME, prompt: 'Once', max_tokens: 1 },
    { model: NAME, prompt: 'Once', max_tokens: 4, stream: true }]) {
    const r = await exchange(post('/v1/completions', body));
    assert.match(r.text, /^HTTP\/1\.1 200 /);
    assert.ok(r.endedAt !== null, `the server never closed the idle connection (${JSON.stringify(body)})`);
    assert.ok(r.endedAt >= 900 && r.endedAt < 4000, `closed after ${r.endedAt} ms, expected about 1000`);
  }
});

test('many idle connections after generations do not exhaust the server', async () => {
  const N = 40;
  const all = [];
  for (let i = 0; i < N; i++) all.push(exchange(post('/v1/completions', { model: NAME, prompt: 'Hi', max_tokens: 1 })));
  const rs = await Promise.all(all);
  for (const r of rs) {
    assert.match(r.text, /^HTTP\/1\.1 200 /);
    assert.ok(r.endedAt !== null && r.endedAt < 5000, 'an idle connection stayed open');
  }
  const h = await fetch(`${srv.baseURL}/health`);
  assert.equal(h.status, 200);
});

test('a stream that waits longer than the keep-alive limit for its first token is kept alive', async () => {
  // one sequence at a time: the stream waits behind a long answer, which the
  // client drops after 2 s (a fixed wait: a length of answer would take 1 s on
  // an idle machine and a minute under ASan)
  const TESTDATA = process.env.PAGEDLM_TESTDATA;
  const slow = await startServer(['--timeout-keep-alive', '1', '--max-num-seqs', '1', '-m',
    `${TESTDATA}/models/qwen3-tiny/model-f32.gguf`]);
  try {
    const port2 = Number(new URL(slow.baseURL).port);
    const drop = new AbortController();
    const long = fetch(`${slow.baseURL}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' },
      signal: drop.signal,
      body: JSON.stringify({ model: NAME, prompt: [1, 2, 3], max_tokens: 30000, ignore_eos: true, temperature: 0 }) })
      .then((res) => `status ${res.status}`, (e) => e.name);
    await new Promise((r) => setTimeout(r, 100));
    const t0 = Date.now();
    setTimeout(() => drop.abort(), 2000);
    const r = await new Promise((resolve, reject) => {
      const sock = net.connect(port2, '127.0.0.1');
      const chunks = [];
      sock.on('data', (d) => chunks.push(d));
      sock.on('error', reject);
      sock.on('close', () => resolve(Buffer.concat(chunks).toString('utf8')));
      const b = JSON.stringify({ model: NAME, prompt: [1, 2, 3], max_tokens: 5, stream: true });
      sock.write(`POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n` +
        `Content-Length: ${b.length}\r\n\r\n${b}`);
      setTimeout(() => sock.destroy(), 60000).unref();
    });
    const waited = Date.now() - t0;
    assert.ok(waited > 1500, `the stream got its answer after ${waited} ms: it did not wait`);
    assert.match(r, /data: \[DONE\]/, 'the stream was cut while it waited');
    assert.match(r, /: keep-alive/);
    assert.equal(await long, 'AbortError', 'the long answer ended before it was dropped');
  } finally {
    await slow.stop();
  }
});

test('conflicting Content-Length, or Content-Length beside Transfer-Encoding, is 400 and the connection closes', async () => {
  const b = JSON.stringify({ model: NAME, prompt: 'Hi', max_tokens: 1 });
  const head = 'POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n';
  for (const framing of [`Content-Length: ${b.length}\r\nContent-Length: ${b.length + 5}\r\n`,
    `Content-Length: ${b.length}\r\nTransfer-Encoding: chunked\r\n`]) {
    const r = await exchange(`${head}${framing}\r\n${b}`);
    assert.match(r.text, /^HTTP\/1\.1 400 /, r.text.slice(0, 200));
    assert.match(r.text, /Connection: close/i);
    assert.match(r.text, /Content-Length|Transfer-Encoding/);
    assert.ok(r.endedAt !== null && r.endedAt < 900, 'the connection stayed open after ambiguous framing');
  }
  // the same value twice is not ambiguous
  const same = await exchange(`${head}Content-Length: ${b.length}\r\nContent-Length: ${b.length}\r\n\r\n${b}`);
  assert.match(same.text, /^HTTP\/1\.1 200 /);
});

test('a Transfer-Encoding other than chunked alone is 501 or 400 at once, with a JSON body, and the connection closes', async () => {
  const b = JSON.stringify({ model: NAME, prompt: 'Hi', max_tokens: 1 });
  const chunked = `${b.length.toString(16)}\r\n${b}\r\n0\r\n\r\n`;
  for (const [te, status, why] of [['gzip, chunked', 501, /not implemented: only chunked is/],
    ['deflate,chunked', 501, /not implemented/], ['identity', 400, /does not end in one chunked coding/],
    ['chunked, gzip', 400, /does not end in one chunked coding/], ['chunked, chunked', 400, /one chunked coding/],
    ['chunked ', 400, /write it as 'Transfer-Encoding: chunked'/]]) {
    const r = await exchange(`POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n` +
      `Transfer-Encoding: ${te}\r\n\r\n${chunked}`);
    assert.match(r.text, new RegExp(`^HTTP/1\\.1 ${status} `), `${te}: ${r.text.slice(0, 200)}`);
    assert.match(r.text, /Connection: close/i);
    const err = JSON.parse(r.text.slice(r.text.indexOf('\r\n\r\n') + 4)).error;
    assert.match(err.message, why, te);
    assert.equal(err.type, 'invalid_request_error');
    assert.ok(r.endedAt !== null && r.endedAt < 900, `${te}: the connection stayed open ${r.endedAt} ms`);
  }
  // chunked alone, in any case, is served
  const ok = await exchange(`POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n` +
    `Connection: close\r\nTransfer-Encoding: Chunked\r\n\r\n${chunked}`);
  assert.match(ok.text, /^HTTP\/1\.1 200 /);
});

// Sends a chunked body of `total` bytes in 1 MiB chunks (as fast as the
// server reads it, until it stops reading); resolves with what came back.
function sendChunked(total) {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    const got = [];
    let done = false;
    const finish = () => {
      if (!done) resolve(Buffer.concat(got).toString('utf8'));
      done = true;
    };
    s.on('data', (d) => got.push(d));
    s.on('error', () => {}); // a reset after the answer: the answer is what counts
    s.on('close', finish);
    setTimeout(() => { s.destroy(); finish(); }, 30000).unref();
    s.write('POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n' +
      'Transfer-Encoding: chunked\r\n\r\n');
    const piece = Buffer.concat([Buffer.from('100000\r\n'), Buffer.alloc(1 << 20, 'a'), Buffer.from('\r\n')]);
    let sent = 0;
    const pump = () => {
      while (!s.destroyed && sent < total) {
        sent += 1 << 20;
        if (!s.write(piece)) return void s.once('drain', pump);
      }
      if (!s.destroyed) s.write('0\r\n\r\n');
    };
    pump();
  });
}

test('a chunked body over --max-body gets a 413 with a JSON body, also past the 64 MiB drain limit', async () => {
  for (const mib of [5, 80]) {
    const text = await sendChunked(mib << 20);
    assert.match(text, /^HTTP\/1\.1 413 /, `${mib} MiB: ${JSON.stringify(text.slice(0, 200))}`);
    assert.match(text, /Connection: close/i);
    const err = JSON.parse(text.slice(text.indexOf('\r\n\r\n') + 4)).error;
    assert.equal(err.code, 'request_too_large');
    assert.match(err.message, /the limit is 4194304/);
  }
  const h = await fetch(`${srv.baseURL}/health`);
  assert.equal(h.status, 200);
});

test('a client that half-closes after its request gets the whole answer', async () => {
  const stream = await exchange(post('/v1/completions', { model: NAME, prompt: 'Once upon a time', max_tokens: 60,
    stream: true, temperature: 0 }), { halfClose: true });
  assert.match(stream.text, /^HTTP\/1\.1 200 /);
  assert.match(stream.text, /data: \[DONE\]/, 'the stream was cut');
  const tokens = (stream.text.match(/"text":/g) ?? []).length;
  assert.ok(tokens >= 10, `only ${tokens} chunks`);
  // long enough (64 x 100 tokens) that the server looks at the socket while it works
  const whole = await exchange(post('/v1/completions', { model: NAME, prompt: 'Once', max_tokens: 100, n: 64,
    ignore_eos: true }), { halfClose: true, limitMs: 60000 });
  const i = whole.text.indexOf('HTTP/1.1 200 ');
  assert.ok(i >= 0, whole.text.slice(0, 300));
  // before the answer, at most an interim 102
  assert.match(whole.text.slice(0, i), /^(HTTP\/1\.1 102 Processing\r\n\r\n)?$/);
  const body = JSON.parse(whole.text.slice(whole.text.indexOf('\r\n\r\n', i) + 4));
  assert.equal(body.choices.length, 64);
  assert.equal(body.usage.completion_tokens, 6400);
});

test('NUL bytes in text survive /detokenize and echo, and come back in as \\u0000 in prompts', async () => {
  // token 3 is <0x00>
  const d = await (await fetch(`${srv.baseURL}/detokenize`, { method: 'POST',
    headers: { 'content-type': 'application/json' }, body: JSON.stringify({ tokens: [403, 3, 407] }) })).json();
  assert.equal(d.prompt, 'Once\u0000 upon');
  const c = await (await fetch(`${srv.baseURL}/v1/completions`, { method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: NAME, prompt: [403, 3, 407], echo: true, max_tokens: 1, temperature: 0 }) })).json();
  assert.ok(c.choices[0].text.startsWith('Once\u0000 upon'), JSON.stringify(c.choices[0].text));
  // generated NULs (logit_bias on <0x00>) reach the client too
  const g = await (await fetch(`${srv.baseURL}/v1/completions`, { method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: NAME, prompt: 'Once', max_tokens: 3, temperature: 0, logit_bias: { 3: 100 } }) }))
    .json();
  assert.equal(g.choices[0].text, '\u0000\u0000\u0000');
  // and the server takes them back in the text it reads: a prompt, a message
  const e = await (await fetch(`${srv.baseURL}/v1/completions`, { method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: NAME, prompt: 'Once\u0000 upon', echo: true, max_tokens: 1, temperature: 0 }) }))
    .json();
  assert.ok(e.choices[0].text.startsWith('Once\u0000 upon'), JSON.stringify(e));
  const t = await (await fetch(`${srv.baseURL}/tokenize`, { method: 'POST',
    body: JSON.stringify({ model: NAME, prompt: 'Once\u0000 upon', add_special_tokens: false }) })).json();
  assert.deepEqual(t.tokens, [403, 3, 407]);
  // elsewhere NUL is a 400 naming the field
  const m = await fetch(`${srv.baseURL}/v1/completions`, { method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: `${NAME}\u0000`, prompt: 'Once', max_tokens: 1 }) });
  assert.equal(m.status, 400);
  const err = (await m.json()).error;
  assert.equal(err.param, 'model');
  assert.match(err.message, /'model' holds a NUL character \(\\u0000\)/);
});

test('a KV pool that cannot hold --max-model-len stops the server at start, naming both numbers', () => {
  const r = spawnSync(BIN, ['serve', '-m', MODEL, '--port', '0', '--max-model-len', '128', '--kv-cache-memory',
    '40KiB'], { encoding: 'utf8', timeout: 30000 });
  assert.equal(r.status, 1, r.stderr);
  assert.match(r.stderr, /max seq len \(128\) is larger than the maximum number of tokens that can be stored in the KV cache \(\d+/);
  assert.match(r.stderr, /--kv-cache-memory/);
  assert.match(r.stderr, /--max-model-len/);
});

test('a --max-model-len past the model\'s own stops the server at start unless allowed; allowed, it is served', async () => {
  const r = spawnSync(BIN, ['serve', '-m', MODEL, '--port', '0', '--max-model-len', '1000000'],
    { encoding: 'utf8', timeout: 30000, env: { ...process.env, PAGEDLM_ALLOW_LONG_MAX_MODEL_LEN: '' } });
  assert.equal(r.status, 1, r.stderr);
  assert.match(r.stderr, /the context length asked for, 1000000, is longer than the model's own, 128/);
  assert.match(r.stderr, /PAGEDLM_ALLOW_LONG_MAX_MODEL_LEN=1/);
  const long = await startServer(['--max-model-len', '512'], { env: ALLOW_LONG });
  try {
    const models = await (await fetch(`${long.baseURL}/v1/models`)).json();
    assert.equal(models.data[0].max_model_len, 512);
    assert.match(long.log(), /context length 512 is longer than the model's own, 128 \(allowed\): positions past 128 were not trained/);
  } finally {
    await long.stop();
  }
});

test('every answer names its replica, host:port by default: health, metrics, errors, objects and streams', async () => {
  const name = `127.0.0.1:${port}`;
  // fetch's pool may hold a connection to this server idle for about the
  // --timeout-keep-alive of 1 s (the tests before used other servers): one
  // reused just as the server closes it fails with 'fetch failed' (seen
  // under ASan). Let the server close the idle ones first (its timeout
  // sweep runs about once a second).
  await new Promise((resolve) => setTimeout(resolve, 2500));
  for (const [path, init, status] of [['/health', {}, 200], ['/metrics', {}, 200], ['/v1/nothing', {}, 404],
    ['/v1/completions', { method: 'POST', body: '{"prompt": 7}' }, 400]]) {
    const r = await fetch(`${srv.baseURL}${path}`, { headers: { 'content-type': 'application/json' }, ...init });
    assert.equal(r.status, status, path);
    assert.equal(r.headers.get('x-pagedlm-replica'), name, path);
    await r.text();
  }
  const client = srv.client();
  const { data, response } = await client.completions.create({ model: NAME, prompt: 'Hi', max_tokens: 2 })
    .withResponse();
  assert.equal(response.headers.get('x-pagedlm-replica'), name);
  assert.equal(data.system_fingerprint, name);
  const s = await client.completions.create({ model: NAME, prompt: 'Hi', max_tokens: 2, stream: true })
    .withResponse();
  assert.equal(s.response.headers.get('x-pagedlm-replica'), name);
  let chunks = 0;
  for await (const c of s.data) {
    assert.equal(c.system_fingerprint, name);
    chunks++;
  }
  assert.ok(chunks >= 2);
});

test('a --replica-name that cannot be a header value is refused at start (exit 2, naming why)', async () => {
  for (const [bad, why] of [['', /it is empty/], [' r1', /starts or ends with a space/], ['r1 ', /starts or ends/],
    ['r\t1', /printable ASCII/], ['r\u00e91', /printable ASCII/], ['r'.repeat(129), /longer than 128 bytes/]]) {
    const r = spawnSync(BIN, ['serve', '-m', MODEL, '--port', '0', '--replica-name', bad],
      { encoding: 'utf8', timeout: 30000 });
    assert.equal(r.status, 2, `${JSON.stringify(bad)}: ${r.stderr}`);
    assert.match(r.stderr, /--replica-name/);
    assert.match(r.stderr, why, JSON.stringify(bad));
  }
  // 128 bytes with inner spaces are fine
  const name = `node a ${'r'.repeat(121)}`;
  const ok = await startServer(['--replica-name', name]);
  try {
    const r = await fetch(`${ok.baseURL}/health`);
    assert.equal(r.headers.get('x-pagedlm-replica'), name);
  } finally {
    await ok.stop();
  }
});
