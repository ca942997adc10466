// soak.mjs - a load check of `pagedlm serve` run by hand (not by CTest):
// CLIENTS concurrent streaming clients for DURATION seconds against the
// stories model, a mix of completions and chat, greedy and sampled, n = 1..2,
// logprobs, stop strings, and about one request in 20 abandoned mid-stream.
// Reports errors (must be 0), requests and tokens, the server's peak RSS
// (VmHWM) and its RSS every 30 s (it must not keep growing), and checks that
// /metrics ends with no request running and no KV block in use and that
// SIGTERM exits 0.
//
//   PAGEDLM_BIN=build/pagedlm PAGEDLM_TESTDATA=../shared node tests/e2e/soak.mjs [CLIENTS] [DURATION]
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startServer, metrics, metric, NAME } from './server.mjs';

const CLIENTS = Number(process.argv[2] ?? 64);
const DURATION = Number(process.argv[3] ?? 300);
const TEMPLATE = path.join(path.dirname(fileURLToPath(import.meta.url)), 'fixtures/chat_template.jinja');
const PROMPTS = ['Once upon a time', 'The little dog', 'Lily wanted to', 'One day, a big', 'Tom and his mom',
  'The sun was', 'She saw a bird', 'They played in the'];

function status(pid) {
  const s = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (k) => Number(new RegExp(`${k}:\\s+(\\d+) kB`).exec(s)[1]);
  return { rss: kb('VmRSS'), hwm: kb('VmHWM'), threads: Number(/Threads:\s+(\d+)/.exec(s)[1]) };
}

const srv = await startServer(['--chat-template', TEMPLATE, '--max-model-len', '512']);
const client = srv.client({ timeout: 120000 });
const pid = srv.proc.pid;
const stats = { requests: 0, chunks: 0, abandoned: 0, errors: 0, firstErrors: [] };
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
  const common = { model: NAME, max_tokens: 16 + (r % 200), stream: true, stream_options: { include_usage: true } };
  if (r % 4 === 0) common.temperature = 0;
  else Object.assign(common, { temperature: 0.9, top_p: 0.95, seed: r });
  if (r % 7 === 0) common.n = 2;
  if (r % 11 === 0) common.stop = [' the', '.'];
  const abandon = r % 20 === 0;
  const prompt = PROMPTS[r % PROMPTS.length];
  let stream;
  if (chat) {
    if (r % 5 === 0) Object.assign(common, { logprobs: true, top_logprobs: 2 });
    stream = await client.chat.completions.create({ ...common, messages: [{ role: 'user', content: prompt }] });
  } else {
    if (r % 5 === 0) common.logprobs = 2;
    stream = await client.completions.create({ ...common, prompt });
  }
  let n = 0;
  let usage = null;
  for await (const c of stream) {
    n++;
    if (c.usage) usage = c.usage;
    if (abandon && n === 3) {
      stats.abandoned++;
      break; // the SDK aborts the request
    }
  }
  stats.chunks += n;
  if (!abandon && !usage) throw new Error('stream ended without the usage chunk');
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
const result = {
  clients: CLIENTS,
  seconds: DURATION,
  requests: stats.requests,
  abandoned_on_purpose: stats.abandoned,
  errors: stats.errors,
  chunks: stats.chunks,
  generation_tokens: metric(m, 'vllm:generation_tokens_total'),
  running_after: metric(m, 'vllm:num_requests_running'),
  kv_cache_usage_after: metric(m, 'vllm:kv_cache_usage_perc'),
  peak_rss_kB: samples.at(-1).hwm,
  rss_kB_every_30s: samples.map((s) => s.rss),
};
console.log(JSON.stringify(result, null, 2));
if (stats.firstErrors.length) console.log(stats.firstErrors.join('\n---\n'));
await srv.stop();
console.log('server stopped with exit code 0');
process.exit(stats.errors || result.running_after || result.kv_cache_usage_after ? 1 : 0);
