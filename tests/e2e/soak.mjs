// soak.mjs - a load check of `pagedlm serve` run by hand (not by CTest):
// CLIENTS concurrent clients for DURATION seconds against the stories
// model, through the official `openai` SDK: completions and chat, streaming
// and not, greedy and sampled, n = 1..2, logprobs, stop strings, logit_bias
// and min_tokens, and about one request in 20 abandoned mid-way (a stream
// left after a few chunks, a non-streaming request aborted by the client).
// Reports requests, errors (must be 0), end-to-end latency p50/p99 of the
// requests that were not abandoned, the server's RSS at start and end and
// every 30 s (it must not keep growing) and its peak (VmHWM), and checks
// that /metrics ends with no request running and no KV block in use and
// that SIGTERM exits 0. Exit status 1 when any of that fails.
//
//   PAGEDLM_BIN=build/pagedlm PAGEDLM_TESTDATA=../shared node tests/e2e/soak.mjs [CLIENTS] [DURATION]
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startServer, metrics, metric, NAME, ALLOW_LONG } from './server.mjs';

const CLIENTS = Number(process.argv[2] ?? 32);
const DURATION = Number(process.argv[3] ?? 180);
const TEMPLATE = path.join(path.dirname(fileURLToPath(import.meta.url)), 'fixtures/chat_template.jinja');
const PROMPTS = ['Once upon a time', 'The little dog', 'Lily wanted to', 'One day, a big', 'Tom and his mom',
  'The sun was', 'She saw a bird', 'They played in the'];

function status(pid) {
  const s = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (k) => Number(new RegExp(`${k}:\\s+(\\d+) kB`).exec(s)[1]);
  return { rss: kb('VmRSS'), hwm: kb('VmHWM'), threads: Number(/Threads:\s+(\d+)/.exec(s)[1]) };
}

function percentile(sorted, q) {
  if (!sorted.length) return 0;
  const x = (q / 100) * (sorted.length - 1);
  const i = Math.floor(x);
  return i + 1 < sorted.length ? sorted[i] + (x - i) * (sorted[i + 1] - sorted[i]) : sorted[i];
}

const srv = await startServer(['--chat-template', TEMPLATE, '--max-model-len', '512'], { env: ALLOW_LONG });
const client = srv.client({ timeout: 120000 });
const pid = srv.proc.pid;
const stats = { requests: 0, streaming: 0, chat: 0, chunks: 0, abandoned: 0, errors: 0, firstErrors: [] };
const latencies = [];
const t0 = Date.now();
const deadline = t0 + DURATION * 1000;
const samples = [{ t: 0, ...status(pid) }];
const sampler = setInterval(() => {
  const s = { t: Math.round((Date.now() - t0) / 1000), ...status(pid) };
  samples.push(s);
  console.log(`t=${s.t}s rss=${s.rss} kB hwm=${s.hwm} kB threads=${s.threads} requests=${stats.requests} ` +
    `errors=${stats.errors}`);
}, 30000);

async function one(k, i) {
  const r = (k * 7919 + i * 104729) % 1000;
  const chat = r % 3 === 0;
  const stream = r % 2 === 0;
  const common = { model: NAME, max_tokens: 16 + (r % 200) };
  if (stream) Object.assign(common, { stream: true, stream_options: { include_usage: true } });
  if (r % 4 === 0) common.temperature = 0;
  else Object.assign(common, { temperature: 0.9, top_p: 0.95, seed: r });
  if (r % 7 === 0) common.n = 2;
  if (r % 11 === 0) common.stop = [' the', '.'];
  if (r % 13 === 0) common.logit_bias = { 403: -5, 261: 3 };
  if (r % 17 === 0) common.min_tokens = 8;
  const abandon = r % 20 === 0;
  const prompt = PROMPTS[r % PROMPTS.length];
  const controller = new AbortController();
  const opts = { signal: controller.signal };
  const start = Date.now();
  if (!stream && abandon) setTimeout(() => controller.abort(), 5 + (r % 20));
  let res;
  try {
    if (chat) {
      if (r % 5 === 0) Object.assign(common, { logprobs: true, top_logprobs: 2 });
      res = await client.chat.completions.create({ ...common, messages: [{ role: 'user', content: prompt }] }, opts);
    } else {
      if (r % 5 === 0) common.logprobs = 2;
      res = await client.completions.create({ ...common, prompt }, opts);
    }
  } catch (e) {
    if (abandon && !stream && controller.signal.aborted) {
      stats.abandoned++;
      return;
    }
    throw e;
  }
  stats.streaming += stream;
  stats.chat += chat;
  if (!stream) {
    if (!res.choices?.length || !res.usage) throw new Error('a response without choices or usage');
    latencies.push(Date.now() - start);
    return;
  }
  let n = 0;
  let usage = null;
  for await (const c of res) {
    n++;
    if (c.usage) usage = c.usage;
    if (abandon && n === 3) {
      stats.abandoned++;
      break; // the SDK aborts the request
    }
  }
  stats.chunks += n;
  if (abandon && n === 3) return;
  if (!usage) throw new Error('stream ended without the usage chunk');
  latencies.push(Date.now() - start);
}

async function worker(k) {
  for (let i = 0; Date.now() < deadline; i++) {
    try {
      await one(k, i);
      stats.requests++;
    } catch (e) {
      stats.errors++;
      if (stats.firstErrors.length < 5) stats.firstErrors.push(String(e?.stack ?? e));
    }
  }
}

await Promise.all(Array.from({ length: CLIENTS }, (_, k) => worker(k)));
clearInterval(sampler);
samples.push({ t: Math.round((Date.now() - t0) / 1000), ...status(pid) });
let m;
for (let i = 0; i < 100; i++) {
  m = await metrics(srv.baseURL);
  if (metric(m, 'vllm:num_requests_running') === 0 && metric(m, 'vllm:kv_cache_usage_perc') === 0) break;
  await new Promise((r) => setTimeout(r, 50));
}
latencies.sort((a, b) => a - b);
const result = {
  clients: CLIENTS,
  seconds: DURATION,
  requests: stats.requests,
  streaming: stats.streaming,
  chat: stats.chat,
  abandoned_on_purpose: stats.abandoned,
  errors: stats.errors,
  latency_ms_p50: Math.round(percentile(latencies, 50)),
  latency_ms_p99: Math.round(percentile(latencies, 99)),
  chunks: stats.chunks,
  generation_tokens: metric(m, 'vllm:generation_tokens_total'),
  running_after: metric(m, 'vllm:num_requests_running'),
  kv_cache_usage_after: metric(m, 'vllm:kv_cache_usage_perc'),
  rss_kB_start: samples[0].rss,
  rss_kB_end: samples.at(-1).rss,
  peak_rss_kB: samples.at(-1).hwm,
  rss_kB_every_30s: samples.map((s) => s.rss),
};
console.log(JSON.stringify(result, null, 2));
if (stats.firstErrors.length) console.log(stats.firstErrors.join('\n---\n'));
await srv.stop();
console.log('server stopped with exit code 0');
process.exit(stats.errors || result.running_after || result.kv_cache_usage_after ? 1 : 0);
