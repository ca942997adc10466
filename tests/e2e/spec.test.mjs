// spec.test.mjs - speculative decoding as a client sees it, through the
// official `openai` SDK: a server started with vLLM's --speculative-config
// (n-gram, and stories260K drafting for itself) answers with the same text
// as one without, greedy and sampled with a seed, streaming or not, and
// reports vLLM's spec_decode counters on /metrics; a bad config stops the
// server at start with exit status 2.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { startServer, metrics, metric, collect, BIN, MODEL, NAME } from './server.mjs';

let plain;
let ngram;
let draft;
before(async () => {
  plain = await startServer();
  ngram = await startServer(['--speculative-config',
    '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 4}']);
  draft = await startServer(['--speculative-config', JSON.stringify({ model: MODEL, num_speculative_tokens: 3 })]);
});
after(async () => {
  for (const s of [plain, ngram, draft]) if (s) await s.stop();
});

const PROMPTS = ['Once upon a time', 'Lily and Ben went to the park. Lily and Ben', 'The little dog'];

test('the same text with and without speculation, greedy and seeded', async () => {
  for (const srv of [ngram, draft]) {
    for (const prompt of PROMPTS) {
      for (const sampling of [{ temperature: 0 }, { temperature: 0.9, top_p: 0.9, seed: 11 }]) {
        const body = { model: NAME, prompt, max_tokens: 80, ...sampling };
        const a = await plain.client().completions.create(body);
        const b = await srv.client().completions.create(body);
        assert.equal(b.choices[0].text, a.choices[0].text, `${prompt} ${JSON.stringify(sampling)}`);
        assert.equal(b.usage.completion_tokens, a.usage.completion_tokens);
        const s = await collect(await srv.client().completions.create({ ...body, stream: true }));
        assert.equal(s.texts[0], a.choices[0].text);
      }
    }
    const m = await metrics(srv.baseURL);
    const drafted = metric(m, 'vllm:spec_decode_num_draft_tokens_total');
    const accepted = metric(m, 'vllm:spec_decode_num_accepted_tokens_total');
    assert.ok(drafted > 0 && accepted > 0 && accepted <= drafted, `drafted ${drafted}, accepted ${accepted}`);
    assert.ok(metric(m, 'vllm:spec_decode_num_drafts_total') > 0);
    assert.equal(metric(m, 'vllm:spec_decode_num_accepted_tokens_per_pos_total', ',position="0"') > 0, true);
  }
});

test('a bad --speculative-config is a usage error', () => {
  for (const cfg of ['{"method": "eagle", "num_speculative_tokens": 4}', '{"method": "ngram"}', 'not json',
    '{"method": "ngram", "num_speculative_tokens": 4, "bogus": 1}']) {
    const r = spawnSync(BIN, ['serve', '-m', MODEL, '--port', '0', '--speculative-config', cfg], { encoding: 'utf8' });
    assert.equal(r.status, 2, `${cfg}: ${r.stderr}`);
    assert.match(r.stderr, /--speculative-config/);
  }
});
