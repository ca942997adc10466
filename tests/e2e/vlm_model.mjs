// vlm_model.mjs - a tiny random-weight LLaVA 1.5 written as a Hugging Face
// LlavaForConditionalGeneration folder, and PNG images, for the vision e2e
// tests. The shapes are tests/test_vision_llava.c's (CLIP tower: 3 layers of
// width 32 over 28 x 28 pixels in 7 x 7 patches; Llama text model: 2 layers
// of width 48), the tokenizer is stories260K's with "<image>" added as id
// 512; the weights come from a seeded generator (their values matter to no
// assertion: the tests compare the server with itself and with the CLI).
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';

const VH = 32, VFFN = 64, VL = 3, IMG = 28, PATCH = 7, NPOS = (IMG / PATCH) ** 2 + 1;
const TH = 48, NH = 3, HD = 16, NKV = 1, FFN = 96, VOC = 513, NL = 2;
export const IMAGE_ROWS = (IMG / PATCH) ** 2;

function rng(seed) {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296 - 0.5;
  };
}

// A list of random tensors and the function that adds one: values uniform in
// [-0.5, 0.5), or (kind 1) 1 + 0.2 of that (norm weights), or (kind 2) 0.2 of
// it (biases).
function randomTensors(seed) {
  const r = rng(seed);
  const list = [];
  const add = (name, shape, kind = 0) => {
    const n = shape.reduce((a, b) => a * b, 1);
    const data = new Float32Array(n);
    for (let i = 0; i < n; i++) data[i] = kind === 1 ? 1 + 0.2 * r() : kind === 2 ? 0.2 * r() : r();
    list.push({ name, shape, data });
  };
  return { list, add };
}

function tensors() {
  const { list, add } = randomTensors(22);
  const vm = 'vision_tower.vision_model';
  add(`${vm}.embeddings.patch_embedding.weight`, [VH, 3, PATCH, PATCH]);
  add(`${vm}.embeddings.class_embedding`, [VH]);
  add(`${vm}.embeddings.position_embedding.weight`, [NPOS, VH]);
  add(`${vm}.pre_layrnorm.weight`, [VH], 1);
  add(`${vm}.pre_layrnorm.bias`, [VH], 2);
  for (let l = 0; l < VL; l++) {
    const p = `${vm}.encoder.layers.${l}`;
    add(`${p}.layer_norm1.weight`, [VH], 1);
    add(`${p}.layer_norm1.bias`, [VH], 2);
    for (const m of ['q_proj', 'k_proj', 'v_proj', 'out_proj']) {
      add(`${p}.self_attn.${m}.weight`, [VH, VH]);
      add(`${p}.self_attn.${m}.bias`, [VH], 2);
    }
    add(`${p}.layer_norm2.weight`, [VH], 1);
    add(`${p}.layer_norm2.bias`, [VH], 2);
    add(`${p}.mlp.fc1.weight`, [VFFN, VH]);
    add(`${p}.mlp.fc1.bias`, [VFFN], 2);
    add(`${p}.mlp.fc2.weight`, [VH, VFFN]);
    add(`${p}.mlp.fc2.bias`, [VH], 2);
  }
  add(`${vm}.post_layernorm.weight`, [VH], 1);
  add(`${vm}.post_layernorm.bias`, [VH], 2);
  add('multi_modal_projector.linear_1.weight', [TH, VH]);
  add('multi_modal_projector.linear_1.bias', [TH], 2);
  add('multi_modal_projector.linear_2.weight', [TH, TH]);
  add('multi_modal_projector.linear_2.bias', [TH], 2);
  add('language_model.model.embed_tokens.weight', [VOC, TH]);
  add('language_model.model.norm.weight', [TH], 1);
  add('language_model.lm_head.weight', [VOC, TH]);
  for (let l = 0; l < NL; l++) {
    const p = `language_model.model.layers.${l}`;
    add(`${p}.input_layernorm.weight`, [TH], 1);
    add(`${p}.self_attn.q_proj.weight`, [NH * HD, TH]);
    add(`${p}.self_attn.k_proj.weight`, [NKV * HD, TH]);
    add(`${p}.self_attn.v_proj.weight`, [NKV * HD, TH]);
    add(`${p}.self_attn.o_proj.weight`, [TH, NH * HD]);
    add(`${p}.post_attention_layernorm.weight`, [TH], 1);
    add(`${p}.mlp.gate_proj.weight`, [FFN, TH]);
    add(`${p}.mlp.up_proj.weight`, [FFN, TH]);
    add(`${p}.mlp.down_proj.weight`, [TH, FFN]);
  }
  return list;
}

function safetensors(list) {
  const header = {};
  let off = 0;
  for (const t of list) {
    header[t.name] = { dtype: 'F32', shape: t.shape, data_offsets: [off, off + t.data.byteLength] };
    off += t.data.byteLength;
  }
  let h = JSON.stringify(header);
  h += ' '.repeat((8 - (h.length % 8)) % 8);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(h.length));
  return Buffer.concat([len, Buffer.from(h), ...list.map((t) => Buffer.from(t.data.buffer))]);
}

// Writes the folder under dir; testdata is the shared test data folder.
export function writeLlava(dir, testdata) {
  fs.mkdirSync(dir, { recursive: true });
  const config = {
    architectures: ['LlavaForConditionalGeneration'], model_type: 'llava', image_token_index: 512,
    projector_hidden_act: 'gelu', vision_feature_layer: -2, vision_feature_select_strategy: 'default',
    text_config: {
      model_type: 'llama', hidden_size: TH, num_hidden_layers: NL, num_attention_heads: NH, num_key_value_heads: NKV,
      intermediate_size: FFN, vocab_size: VOC, rms_norm_eps: 1e-5, rope_theta: 10000.0, max_position_embeddings: 256,
      tie_word_embeddings: false, hidden_act: 'silu', bos_token_id: 1, eos_token_id: 2,
    },
    vision_config: {
      model_type: 'clip_vision_model', hidden_size: VH, intermediate_size: VFFN, num_hidden_layers: VL,
      num_attention_heads: 2, image_size: IMG, patch_size: PATCH, layer_norm_eps: 1e-5, hidden_act: 'quick_gelu',
    },
  };
  fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify(config));
  fs.writeFileSync(path.join(dir, 'preprocessor_config.json'), JSON.stringify({
    image_processor_type: 'CLIPImageProcessor', size: { shortest_edge: IMG }, crop_size: { height: IMG, width: IMG },
    do_center_crop: true, resample: 3, rescale_factor: 1 / 255,
    image_mean: [0.48145466, 0.4578275, 0.40821073], image_std: [0.26862954, 0.26130258, 0.27577711],
  }));
  const src = path.join(testdata, 'models/stories260K-hf');
  const tok = JSON.parse(fs.readFileSync(path.join(src, 'tokenizer.json'), 'utf8'));
  tok.added_tokens.push({ id: 512, content: '<image>', single_word: false, lstrip: false, rstrip: false,
    normalized: false, special: true });
  fs.writeFileSync(path.join(dir, 'tokenizer.json'), JSON.stringify(tok));
  fs.copyFileSync(path.join(src, 'tokenizer_config.json'), path.join(dir, 'tokenizer_config.json'));
  fs.writeFileSync(path.join(dir, 'model.safetensors'), safetensors(tensors()));
}

// A tiny random-weight Qwen2.5-VL (Qwen2_5_VLForConditionalGeneration) in the
// shapes of tests/test_vision_qwen25vl.c: tower 3 layers of width 32 (layer 1
// full attention, windows of 2 x 2 merged cells), patches of 4 px merged 2 x 2,
// pixel budget [256, 2560]; Qwen2 text model with mrope_section [2, 3, 3];
// stories260K's tokenizer with <|vision_start|>, <|vision_end|>, <|image_pad|>
// added as ids 512, 513, 514.
export function writeQwen25vl(dir, testdata) {
  fs.mkdirSync(dir, { recursive: true });
  const { list, add } = randomTensors(25);
  const QVH = 32, QFFN = 48, QVL = 3, QP = 4, QVOC = 520;
  add('visual.patch_embed.proj.weight', [QVH, 3, 2, QP, QP]);
  for (let l = 0; l < QVL; l++) {
    const p = `visual.blocks.${l}`;
    add(`${p}.norm1.weight`, [QVH], 1);
    add(`${p}.norm2.weight`, [QVH], 1);
    add(`${p}.attn.qkv.weight`, [3 * QVH, QVH]);
    add(`${p}.attn.qkv.bias`, [3 * QVH], 2);
    add(`${p}.attn.proj.weight`, [QVH, QVH]);
    add(`${p}.attn.proj.bias`, [QVH], 2);
    for (const m of ['gate_proj', 'up_proj']) {
      add(`${p}.mlp.${m}.weight`, [QFFN, QVH]);
      add(`${p}.mlp.${m}.bias`, [QFFN], 2);
    }
    add(`${p}.mlp.down_proj.weight`, [QVH, QFFN]);
    add(`${p}.mlp.down_proj.bias`, [QVH], 2);
  }
  add('visual.merger.ln_q.weight', [QVH], 1);
  add('visual.merger.mlp.0.weight', [4 * QVH, 4 * QVH]);
  add('visual.merger.mlp.0.bias', [4 * QVH], 2);
  add('visual.merger.mlp.2.weight', [TH, 4 * QVH]);
  add('visual.merger.mlp.2.bias', [TH], 2);
  add('model.embed_tokens.weight', [QVOC, TH]);
  add('model.norm.weight', [TH], 1);
  add('lm_head.weight', [QVOC, TH]);
  for (let l = 0; l < NL; l++) {
    const p = `model.layers.${l}`;
    add(`${p}.input_layernorm.weight`, [TH], 1);
    add(`${p}.self_attn.q_proj.weight`, [NH * HD, TH]);
    add(`${p}.self_attn.q_proj.bias`, [NH * HD], 2);
    add(`${p}.self_attn.k_proj.weight`, [NKV * HD, TH]);
    add(`${p}.self_attn.k_proj.bias`, [NKV * HD], 2);
    add(`${p}.self_attn.v_proj.weight`, [NKV * HD, TH]);
    add(`${p}.self_attn.v_proj.bias`, [NKV * HD], 2);
    add(`${p}.self_attn.o_proj.weight`, [TH, NH * HD]);
    add(`${p}.post_attention_layernorm.weight`, [TH], 1);
    add(`${p}.mlp.gate_proj.weight`, [FFN, TH]);
    add(`${p}.mlp.up_proj.weight`, [FFN, TH]);
    add(`${p}.mlp.down_proj.weight`, [TH, FFN]);
  }
  const config = {
    architectures: ['Qwen2_5_VLForConditionalGeneration'], model_type: 'qwen2_5_vl',
    image_token_id: 514, vision_start_token_id: 512, vision_end_token_id: 513, bos_token_id: 1, eos_token_id: 2,
    hidden_size: TH, num_hidden_layers: NL, num_attention_heads: NH, num_key_value_heads: NKV, intermediate_size: FFN,
    vocab_size: QVOC, rms_norm_eps: 1e-6, rope_theta: 1000000.0, max_position_embeddings: 256,
    tie_word_embeddings: false, hidden_act: 'silu', use_sliding_window: false,
    rope_scaling: { type: 'mrope', mrope_section: [2, 3, 3] },
    vision_config: {
      depth: QVL, hidden_size: QVH, intermediate_size: QFFN, num_heads: 2, in_chans: 3, patch_size: QP,
      spatial_merge_size: 2, temporal_patch_size: 2, window_size: 16, fullatt_block_indexes: [1], out_hidden_size: TH,
      hidden_act: 'silu',
    },
  };
  fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify(config));
  fs.writeFileSync(path.join(dir, 'preprocessor_config.json'), JSON.stringify({
    image_processor_type: 'Qwen2VLImageProcessor', min_pixels: 256, max_pixels: 2560, patch_size: QP,
    temporal_patch_size: 2, merge_size: 2, resample: 3, rescale_factor: 1 / 255,
    image_mean: [0.48145466, 0.4578275, 0.40821073], image_std: [0.26862954, 0.26130258, 0.27577711],
  }));
  const src = path.join(testdata, 'models/stories260K-hf');
  const tok = JSON.parse(fs.readFileSync(path.join(src, 'tokenizer.json'), 'utf8'));
  ['<|vision_start|>', '<|vision_end|>', '<|image_pad|>'].forEach((content, i) => tok.added_tokens.push({
    id: 512 + i, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true }));
  fs.writeFileSync(path.join(dir, 'tokenizer.json'), JSON.stringify(tok));
  fs.copyFileSync(path.join(src, 'tokenizer_config.json'), path.join(dir, 'tokenizer_config.json'));
  fs.writeFileSync(path.join(dir, 'model.safetensors'), safetensors(list));
}

function crc32(buf) {
  let c = ~0;
  for (const b of buf) {
    c ^= b;
    for (let k = 0; k < 8; k++) c = (c >>> 1) ^ (0xedb88320 & -(c & 1));
  }
  return ~c >>> 0;
}

// An 8-bit RGB PNG of w x h pixels whose colours follow `seed` (flat: all
// grey 128, which deflates to a few hundred bytes at any size; grey: one
// channel, a third of the pixel bytes to deflate).
export function png(w, h, seed, { flat = false, grey = false } = {}) {
  const r = rng(seed);
  const rows = [];
  for (let y = 0; y < h; y++) {
    const row = Buffer.alloc(1 + (grey ? 1 : 3) * w, flat ? 128 : 0);
    row[0] = 0;
    for (let i = 1; !flat && i < row.length; i++) row[i] = Math.floor((r() + 0.5) * 256);
    rows.push(row);
  }
  const chunk = (type, data) => {
    const len = Buffer.alloc(4);
    len.writeUInt32BE(data.length);
    const td = Buffer.concat([Buffer.from(type), data]);
    const crc = Buffer.alloc(4);
    crc.writeUInt32BE(crc32(td));
    return Buffer.concat([len, td, crc]);
  };
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(w, 0);
  ihdr.writeUInt32BE(h, 4);
  ihdr[8] = 8, ihdr[9] = grey ? 0 : 2;
  return Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), chunk('IHDR', ihdr),
    chunk('IDAT', zlib.deflateSync(Buffer.concat(rows))), chunk('IEND', Buffer.alloc(0))]);
}
