// bert_embeddings.test.mjs - an encoder (BERT, as bge / all-MiniLM are)
// served for embeddings through the official OpenAI SDK: a tiny random
// BERT folder written here (BertModel's safetensors names, a WordPiece
// tokenizer.json, sentence-transformers' CLS pooling and Normalize), served
// without --task (an encoder only embeds), each vector checked against a
// float64 BERT forward written below from modeling_bert.py over the ids
// the server's /tokenize gives ([CLS] ... [SEP]); the same bytes alone and
// in a batch; generation refused with a 400 that says why. The model's
// numerics are checked more closely in test_bert_reference.c.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer, NAME } from './server.mjs';

const L = 2, H = 32, NH = 4, HD = H / NH, F = 64, P = 64;
const WORDS = ['the', 'quick', 'brown', 'fox', 'jump', '##s', '##ed', 'over', 'lazy', 'dog', 'hello', 'there', 'un',
  '##aff', '##able', 'a', 'b', 'c', '.', ',', '!', '?', 'cafe', 'é'];
const VOCAB = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]', ...WORDS];
const V = VOCAB.length;

let seed = 12345;
const rand = () => {
  seed = (seed * 1103515245 + 12345) % 2147483648;
  return seed / 2147483648;
};
const rnd = (n, scale, center = 0) => Float32Array.from({ length: n }, () => center + scale * (2 * rand() - 1));

const W = {
  word: rnd(V * H, 1), pos: rnd(P * H, 0.5), type: rnd(2 * H, 0.5), lng: rnd(H, 0.2, 1), lnb: rnd(H, 0.2),
  layers: Array.from({ length: L }, () => ({
    wq: rnd(H * H, 0.3), bq: rnd(H, 0.1), wk: rnd(H * H, 0.3), bk: rnd(H, 0.1), wv: rnd(H * H, 0.2), bv: rnd(H, 0.1),
    wo: rnd(H * H, 0.2), bo: rnd(H, 0.1), g1: rnd(H, 0.2, 1), b1: rnd(H, 0.2), wi: rnd(F * H, 0.3), bi: rnd(F, 0.3),
    wd: rnd(H * F, 0.15), bd: rnd(H, 0.1), g2: rnd(H, 0.2, 1), b2: rnd(H, 0.2),
  })),
};

function safetensors(tensors) {
  const header = {};
  let off = 0;
  for (const [name, shape, data] of tensors) {
    header[name] = { dtype: 'F32', shape, data_offsets: [off, off + data.byteLength] };
    off += data.byteLength;
  }
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - (json.length % 8)) % 8);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(json.length));
  return Buffer.concat([len, Buffer.from(json), ...tensors.map(([, , d]) => Buffer.from(d.buffer))]);
}

function writeModel(dir) {
  const t = [['embeddings.word_embeddings.weight', [V, H], W.word], ['embeddings.position_embeddings.weight', [P, H], W.pos],
    ['embeddings.token_type_embeddings.weight', [2, H], W.type], ['embeddings.LayerNorm.weight', [H], W.lng],
    ['embeddings.LayerNorm.bias', [H], W.lnb]];
  W.layers.forEach((x, l) => {
    const p = `encoder.layer.${l}.`;
    t.push([`${p}attention.self.query.weight`, [H, H], x.wq], [`${p}attention.self.query.bias`, [H], x.bq],
      [`${p}attention.self.key.weight`, [H, H], x.wk], [`${p}attention.self.key.bias`, [H], x.bk],
      [`${p}attention.self.value.weight`, [H, H], x.wv], [`${p}attention.self.value.bias`, [H], x.bv],
      [`${p}attention.output.dense.weight`, [H, H], x.wo], [`${p}attention.output.dense.bias`, [H], x.bo],
      [`${p}attention.output.LayerNorm.weight`, [H], x.g1], [`${p}attention.output.LayerNorm.bias`, [H], x.b1],
      [`${p}intermediate.dense.weight`, [F, H], x.wi], [`${p}intermediate.dense.bias`, [F], x.bi],
      [`${p}output.dense.weight`, [H, F], x.wd], [`${p}output.dense.bias`, [H], x.bd],
      [`${p}output.LayerNorm.weight`, [H], x.g2], [`${p}output.LayerNorm.bias`, [H], x.b2]);
  });
  fs.writeFileSync(path.join(dir, 'model.safetensors'), safetensors(t));
  fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify({
    architectures: ['BertModel'], model_type: 'bert', hidden_size: H, num_hidden_layers: L, num_attention_heads: NH,
    intermediate_size: F, vocab_size: V, max_position_embeddings: P, type_vocab_size: 2, layer_norm_eps: 1e-12,
    hidden_act: 'gelu', position_embedding_type: 'absolute', pad_token_id: 0,
  }));
  const special = (id, content) => ({ id, content, single_word: false, lstrip: false, rstrip: false,
    normalized: false, special: true });
  fs.writeFileSync(path.join(dir, 'tokenizer.json'), JSON.stringify({
    version: '1.0', truncation: null, padding: null,
    added_tokens: [special(0, '[PAD]'), special(1, '[UNK]'), special(2, '[CLS]'), special(3, '[SEP]'),
      special(4, '[MASK]')],
    normalizer: { type: 'BertNormalizer', clean_text: true, handle_chinese_chars: true, strip_accents: null,
      lowercase: true },
    pre_tokenizer: { type: 'BertPreTokenizer' },
    post_processor: { type: 'TemplateProcessing',
      single: [{ SpecialToken: { id: '[CLS]', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } },
        { SpecialToken: { id: '[SEP]', type_id: 0 } }],
      pair: [{ SpecialToken: { id: '[CLS]', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } },
        { SpecialToken: { id: '[SEP]', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } },
        { SpecialToken: { id: '[SEP]', type_id: 1 } }],
      special_tokens: { '[CLS]': { id: '[CLS]', ids: [2], tokens: ['[CLS]'] },
        '[SEP]': { id: '[SEP]', ids: [3], tokens: ['[SEP]'] } } },
    decoder: { type: 'WordPiece', prefix: '##', cleanup: true },
    model: { type: 'WordPiece', unk_token: '[UNK]', continuing_subword_prefix: '##', max_input_chars_per_word: 100,
      vocab: Object.fromEntries(VOCAB.map((w, i) => [w, i])) },
  }));
  fs.writeFileSync(path.join(dir, 'modules.json'), JSON.stringify([
    { idx: 0, name: '0', path: '', type: 'sentence_transformers.models.Transformer' },
    { idx: 1, name: '1', path: '1_Pooling', type: 'sentence_transformers.models.Pooling' },
    { idx: 2, name: '2', path: '2_Normalize', type: 'sentence_transformers.models.Normalize' }]));
  fs.mkdirSync(path.join(dir, '1_Pooling'));
  fs.writeFileSync(path.join(dir, '1_Pooling/config.json'), JSON.stringify({ word_embedding_dimension: H,
    pooling_mode_cls_token: true, pooling_mode_mean_tokens: false }));
}

// ---- float64 BERT (modeling_bert.py: embeddings sum + LayerNorm; per layer
// LayerNorm(x + attn(x)), LayerNorm(x + dense(gelu(dense(x)))); no mask) ----
const layerNorm = (x, g, b) => {
  const mean = x.reduce((s, v) => s + v, 0) / H;
  const v = x.reduce((s, t) => s + (t - mean) ** 2, 0) / H;
  return x.map((t, i) => ((t - mean) / Math.sqrt(v + 1e-12)) * g[i] + b[i]);
};
const linear = (w, b, x, out, inp) => Array.from({ length: out }, (_, o) => {
  let s = b[o];
  for (let i = 0; i < inp; i++) s += w[o * inp + i] * x[i];
  return s;
});
// erf in float64: its Taylor series below 2 (terms stay small), the
// continued fraction of erfc above (evaluated from the tail): ~1e-15
function erf(x) {
  const ax = Math.abs(x);
  if (ax < 2) {
    let sum = 0, term = ax;
    for (let n = 0; n < 100 && Math.abs(term) > 1e-20; n++) {
      sum += term / (2 * n + 1);
      term *= -ax * ax / (n + 1);
    }
    return Math.sign(x) * (2 / Math.sqrt(Math.PI)) * sum;
  }
  let t = ax;
  for (let n = 400; n >= 1; n--) t = ax + (n / 2) / t;
  return Math.sign(x) * (1 - Math.exp(-ax * ax) / Math.sqrt(Math.PI) / t);
}
function reference(ids) {
  const n = ids.length;
  let x = ids.map((id, r) => layerNorm(Array.from({ length: H }, (_, i) => W.word[id * H + i] + W.pos[r * H + i] +
    W.type[i]), W.lng, W.lnb));
  for (const lw of W.layers) {
    const q = x.map((r) => linear(lw.wq, lw.bq, r, H, H)), k = x.map((r) => linear(lw.wk, lw.bk, r, H, H));
    const v = x.map((r) => linear(lw.wv, lw.bv, r, H, H));
    x = x.map((xr, r) => {
      const a = new Array(H).fill(0);
      for (let h = 0; h < NH; h++) {
        const sc = k.map((kr) => {
          let s = 0;
          for (let d = 0; d < HD; d++) s += q[r][h * HD + d] * kr[h * HD + d];
          return s / Math.sqrt(HD);
        });
        const m = Math.max(...sc), e = sc.map((s) => Math.exp(s - m)), z = e.reduce((s, t) => s + t, 0);
        for (let d = 0; d < HD; d++) a[h * HD + d] = e.reduce((s, p, j) => s + (p / z) * v[j][h * HD + d], 0);
      }
      const o = linear(lw.wo, lw.bo, a, H, H);
      const x1 = layerNorm(xr.map((t, i) => t + o[i]), lw.g1, lw.b1);
      const hi = linear(lw.wi, lw.bi, x1, F, H).map((t) => 0.5 * t * (1 + erf(t / Math.SQRT2)));
      const d = linear(lw.wd, lw.bd, hi, H, F);
      return layerNorm(x1.map((t, i) => t + d[i]), lw.g2, lw.b2);
    });
  }
  const cls = x[0], norm = Math.sqrt(cls.reduce((s, t) => s + t * t, 0));
  return cls.map((t) => t / norm);
}

let dir, srv, client;
before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pagedlm-bert-'));
  writeModel(dir);
  srv = await startServer([], { model: dir });
  client = srv.client();
});
after(async () => {
  if (srv) await srv.stop();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

const f32 = (v) => Buffer.from(new Float32Array(v).buffer).toString('hex');
const tokenize = async (text) => {
  const r = await fetch(`${srv.baseURL}/tokenize`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ prompt: text }),
  });
  assert.equal(r.status, 200);
  return (await r.json()).tokens;
};

test('each vector is the float64 BERT forward of [CLS] text [SEP], CLS-pooled and normalized', async () => {
  const texts = ['The quick brown fox jumps over the lazy dog.', 'Hello there!', 'unaffable café', 'a'];
  const r = await client.embeddings.create({ model: NAME, input: texts, encoding_format: 'float' });
  assert.equal(r.data.length, texts.length);
  for (let i = 0; i < texts.length; i++) {
    const ids = await tokenize(texts[i]);
    assert.equal(ids[0], 2, `[CLS] first: ${ids}`);
    assert.equal(ids[ids.length - 1], 3, `[SEP] last: ${ids}`);
    const want = reference(ids), got = r.data[i].embedding;
    assert.equal(got.length, H);
    const d = Math.max(...got.map((t, j) => Math.abs(t - want[j])));
    // the server's default F16 KV cache rounds K and V to 11 bits (2^-11 relative), which
    // moves these unit-scale vectors by up to ~5e-5 from float64 (an F32 cache: ~1e-7);
    // a causal mask, a position off by one or the norm in the wrong place moves them ~0.1
    assert.ok(d < 3e-4, `text ${i}: ${d} from the float64 forward`);
  }
  assert.ok(r.usage.prompt_tokens >= 4 * 3);
});

test('a text alone and inside a batch gives the same bytes', async () => {
  const alone = await client.embeddings.create({ model: NAME, input: 'hello there', encoding_format: 'float' });
  const batch = await client.embeddings.create({ model: NAME, encoding_format: 'float',
    input: ['the lazy dog jumped over the quick brown fox , the lazy dog jumped', 'hello there', 'c'] });
  assert.equal(f32(batch.data[1].embedding), f32(alone.data[0].embedding));
});

test('generation is refused with a 400 that names the encoder; so is a text past its positions', async () => {
  await assert.rejects(client.chat.completions.create({ model: NAME, messages: [{ role: 'user', content: 'hi' }],
    max_tokens: 4 }), (e) => {
    assert.ok(e.status === 400, `status ${e.status}`);
    assert.match(e.message, /encoder/);
    return true;
  });
  await assert.rejects(client.completions.create({ model: NAME, prompt: 'hello', max_tokens: 4 }),
    (e) => e.status === 400 && /encoder/.test(e.message));
  await assert.rejects(client.embeddings.create({ model: NAME, input: 'a '.repeat(P) }), (e) => {
    assert.equal(e.status, 400);
    assert.match(e.message, /at most|max/);
    return true;
  });
  const ok = await client.embeddings.create({ model: NAME, input: 'still here' });
  assert.equal(ok.data.length, 1);
});
