// chat_page.test.mjs - the chat page (GET /) in headless Chromium (Debian's
// package, scripts/install-deps --test): the page loads with the model
// list, a message typed into the box (Chrome DevTools Protocol's
// Input.insertText and an Enter key press) streams an answer from
// /v1/chat/completions, the conversation survives a reload (localStorage),
// and a screenshot is kept as a test artifact (Testing/chat-page.png beside
// the binary). Chromium is driven over --remote-debugging-pipe (JSON
// messages ending in NUL on fds 3 and 4), so no WebSocket client is needed.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn, execFileSync } from 'node:child_process';
import { startServer, BIN, NAME } from './server.mjs';

const TEMPLATE = path.join(path.dirname(new URL(import.meta.url).pathname), 'fixtures/chat_template.jinja');

function findChromium() {
  for (const name of [process.env.CHROMIUM, 'chromium', 'chromium-browser', 'google-chrome']) {
    if (!name) continue;
    try {
      execFileSync('sh', ['-c', `command -v "${name}"`], { stdio: 'pipe' });
      return name;
    } catch { /* next */ }
  }
  throw new Error('chat_page.test.mjs needs Chromium (scripts/install-deps --test installs Debian\'s chromium; or set CHROMIUM)');
}

// A minimal DevTools Protocol client over the pipe.
class Browser {
  constructor(bin, profile) {
    this.proc = spawn(bin, ['--headless', '--no-sandbox', '--disable-gpu', '--remote-debugging-pipe',
      `--user-data-dir=${profile}`, '--window-size=1000,800', 'about:blank'],
    { stdio: ['ignore', 'ignore', 'ignore', 'pipe', 'pipe'] });
    this.next = 1;
    this.waiting = new Map();
    let buf = '';
    this.proc.stdio[4].on('data', (d) => {
      buf += d.toString();
      let cut;
      while ((cut = buf.indexOf('\0')) >= 0) {
        const msg = JSON.parse(buf.slice(0, cut));
        buf = buf.slice(cut + 1);
        const w = msg.id && this.waiting.get(msg.id);
        if (!w) continue;
        this.waiting.delete(msg.id);
        if (msg.error) w.reject(new Error(`${w.method}: ${msg.error.message}`));
        else w.resolve(msg.result);
      }
    });
  }

  send(method, params = {}, sessionId) {
    const id = this.next++;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject, method });
      this.proc.stdio[3].write(JSON.stringify({ id, method, params, ...(sessionId ? { sessionId } : {}) }) + '\0');
    });
  }

  async page(url) {
    const { targetId } = await this.send('Target.createTarget', { url: 'about:blank' });
    const { sessionId } = await this.send('Target.attachToTarget', { targetId, flatten: true });
    const call = (m, p) => this.send(m, p, sessionId);
    await call('Page.enable');
    await call('Runtime.enable');
    await call('Page.navigate', { url });
    return call;
  }

  // killed, and gone (so that its profile folder can be removed)
  close() {
    const gone = new Promise((resolve) => this.proc.on('exit', resolve));
    if (this.proc.exitCode === null && this.proc.signalCode === null) this.proc.kill('SIGKILL');
    else return Promise.resolve();
    return gone;
  }
}

async function evaluate(call, expression) {
  const r = await call('Runtime.evaluate', { expression, returnByValue: true });
  return r.result.value;
}

async function until(call, expression, what, ms = 30000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await evaluate(call, expression);
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

let srv;
let browser;
let profile;
before(async () => {
  srv = await startServer(['--chat-template', TEMPLATE]);
  profile = fs.mkdtempSync(path.join(os.tmpdir(), 'pagedlm-chromium-'));
  browser = new Browser(findChromium(), profile);
});
after(async () => {
  if (browser) await browser.close();
  if (srv) await srv.stop();
  if (profile) fs.rmSync(profile, { recursive: true, force: true, maxRetries: 5 });
});

test('GET / is the chat page, built in, fetching nothing from elsewhere', async () => {
  const r = await fetch(`${srv.baseURL}/`);
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /^text\/html/);
  const html = await r.text();
  assert.match(html, /<title>pagedlm<\/title>/);
  assert.doesNotMatch(html, /(src|href)="https?:/); // no network fetches
});

test('a message typed in Chromium streams an answer, which a reload keeps', async () => {
  const call = await browser.page(`${srv.baseURL}/`);
  await until(call, `document.getElementById('model').options.length > 0 && document.getElementById('model').value`,
    'the model list');
  assert.equal(await evaluate(call, `document.getElementById('model').value`), NAME);
  await evaluate(call, `document.getElementById('input').focus()`);
  await call('Input.insertText', { text: 'Tell me a story about a cat' });
  for (const type of ['keyDown', 'keyUp'])
    await call('Input.dispatchKeyEvent', { type, key: 'Enter', code: 'Enter', windowsVirtualKeyCode: 13 });
  await until(call, `document.body.dataset.state === 'streaming' || document.querySelectorAll('.msg').length === 2`,
    'the request to start');
  await until(call, `document.body.dataset.state !== 'streaming' &&
    document.querySelector('.msg.assistant .body').textContent.length > 0`, 'the answer');
  assert.equal(await evaluate(call, 'document.body.dataset.state'), 'idle');
  const user = await evaluate(call, `document.querySelector('.msg.user .body').textContent`);
  const answer = await evaluate(call, `document.querySelector('.msg.assistant .body').textContent`);
  assert.equal(user, 'Tell me a story about a cat');
  assert.ok(answer.trim().length > 10, `answer: ${answer}`);
  assert.equal(await evaluate(call, `document.getElementById('input').value`), '');

  const shot = await call('Page.captureScreenshot', { format: 'png' });
  const dir = path.join(path.dirname(BIN), 'Testing');
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, 'chat-page.png'), Buffer.from(shot.data, 'base64'));
  assert.ok(fs.statSync(path.join(dir, 'chat-page.png')).size > 1000);

  await call('Page.reload');
  await until(call, `document.querySelectorAll('.msg').length === 2`, 'the conversation after a reload');
  assert.equal(await evaluate(call, `document.querySelector('.msg.assistant .body').textContent`), answer);
});

test('an error from the server shows in the page', async () => {
  const call = await browser.page(`${srv.baseURL}/`);
  await until(call, `document.getElementById('model').options.length > 0`, 'the model list');
  // a model name the server does not serve: a 404 with a message
  await evaluate(call, `(() => { const o = document.createElement('option'); o.value = o.textContent = 'nope';
    const s = document.getElementById('model'); s.append(o); s.value = 'nope'; })()`);
  await evaluate(call, `document.getElementById('input').value = 'hi';
    document.getElementById('form').requestSubmit()`);
  await until(call, `document.body.dataset.state === 'error'`, 'the error');
  assert.match(await evaluate(call, `document.querySelector('.msg.assistant .error').textContent`), /nope/);
});
