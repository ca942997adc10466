// server.mjs - starts `pagedlm serve` for an e2e test file and stops it.
//
// The server listens on 127.0.0.1 with --port 0; its "listening on" line on
// stderr says which port it got, then /health is polled until the model is
// loaded. stop() sends SIGTERM and resolves with the exit code; tests assert
// it is 0 and that the sanitizers (make test-asan) printed nothing.
import { spawn, spawnSync } from 'node:child_process';
import path from 'node:path';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

export const BIN = process.env.PAGEDLM_BIN;
export const TESTDATA = process.env.PAGEDLM_TESTDATA;
if (!BIN || !TESTDATA) throw new Error('PAGEDLM_BIN and PAGEDLM_TESTDATA must be set (run through ctest or run.sh)');
export const MODEL = path.join(TESTDATA, 'models/stories260K/stories260K.gguf');
export const NAME = 'stories';
// stories260K's file declares 128 positions (llama2.c trained it with 512);
// a test that serves a longer --max-model-len allows it explicitly, as vLLM's
// VLLM_ALLOW_LONG_MAX_MODEL_LEN does: startServer(args, { env: ALLOW_LONG }).
export const ALLOW_LONG = { PAGEDLM_ALLOW_LONG_MAX_MODEL_LEN: '1' };

const SANITIZER = /AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|runtime error:/;

export async function startServer(extra = [], { env = {}, model = MODEL } = {}) {
  const args = ['serve', '-m', model, '--host', '127.0.0.1', '--port', '0', '--served-model-name', NAME,
    '--kv-cache-memory', '64MiB', '--disable-log-requests', ...extra];
  const proc = spawn(BIN, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start:\n${log}`)), 30000);
    proc.stderr.on('data', (d) => {
      log += d.toString();
      if (log.length > 1 << 20) log = log.slice(-(1 << 19)); // keep the tail; the pipe must be drained
      const m = /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(log);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    });
    proc.on('exit', (code) => reject(new Error(`server exited with ${code} before listening:\n${log}`)));
  });
  const baseURL = `http://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    const r = await fetch(`${baseURL}/health`).catch(() => null);
    if (r && r.status === 200) break;
    if (i > 600) throw new Error(`server not healthy after 30 s:\n${log}`);
    await new Promise((res) => setTimeout(res, 50));
  }
  let terminated = false;
  const terminate = () => {
    if (!terminated) proc.kill('SIGTERM'); // a second signal would mean "exit without draining"
    terminated = true;
  };
  return {
    proc,
    baseURL,
    terminate,
    log: () => log,
    client: (opts = {}) => new OpenAI({ baseURL: `${baseURL}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60000, ...opts }),
    async stop() {
      terminate();
      const r = await exited;
      assert.doesNotMatch(log, SANITIZER, 'sanitizer report in the server log');
      assert.equal(r.signal, null, `server died of ${r.signal}:\n${log.slice(-4000)}`);
      assert.equal(r.code, 0, `server exited with ${r.code}:\n${log.slice(-4000)}`);
      return r;
    },
  };
}

// `pagedlm run --json` for the same prompt: the reference for greedy output.
export function runCli(prompt, n) {
  const r = spawnSync(BIN, ['run', '-m', MODEL, '-p', prompt, '-n', String(n), '--temp', '0', '--json'],
    { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout);
}

// The text of a streamed completion (or chat completion), choice by choice.
export async function collect(stream) {
  const texts = [];
  const finish = [];
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      texts[c.index] = (texts[c.index] ?? '') + (c.text ?? c.delta?.content ?? '');
      if (c.finish_reason) finish[c.index] = c.finish_reason;
    }
  }
  return { texts, finish, usage, chunks };
}

// /metrics as {name{labels}: value}.
export async function metrics(baseURL) {
  const text = await (await fetch(`${baseURL}/metrics`)).text();
  const out = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const i = line.lastIndexOf(' ');
    out[line.slice(0, i)] = Number(line.slice(i + 1));
  }
  return out;
}

// The metrics once `done(m)` holds, polled for up to `ms`: the engine thread
// updates its gauges after the step whose events a client may already have
// read (the last one is taken either way, for the test's assertions).
export async function settledMetrics(baseURL, done, ms = 3000) {
  const until = Date.now() + ms;
  for (;;) {
    const m = await metrics(baseURL);
    if (done(m) || Date.now() > until) return m;
    await new Promise((r) => setTimeout(r, 20));
  }
}

export function metric(m, name, extra = '') {
  const key = `${name}{model_name="${NAME}"${extra}}`;
  assert.ok(key in m, `no metric ${key}`);
  return m[key];
}
