// The browser tier: `mcpvisor serve --ui` driven by headless Chromium.
//
//   node scenarios.mjs [--only NAME,...] [--readme-shot FILE]
//
// Each scenario starts from the page of one gateway (started here, with a
// config of fake workers and small Python servers in a temp dir) and is
// bounded by its own timeout. The gateway's stdio front is this script's MCP
// client: tools added through the wizard are called through it, and a
// server's secret is checked by asking the server for the value's digest.
// Screenshots go to $BROWSER_SHOTS (target/browser-screenshots/). The last
// line is `browser: N passed, M failed`.
//
// Environment (run.sh sets it): MCPVISOR_BIN, FAKE_WORKER_BIN, BROWSER_PYTHON,
// BROWSER_NPM_PREFIX, BROWSER_CHROMIUM, BROWSER_SHOTS; for the OAuth
// scenario, OAUTH_NODE, OAUTH_AS, OAUTH_PYTHON and OAUTH_RS (the OAuth
// tier's authorization server and protected MCP server, and what runs them).

import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const env = (k) => {
  const v = process.env[k];
  if (!v) throw new Error(`browser: ${k} is not set (run tests/browser/run.sh)`);
  return v;
};
const BIN = env('MCPVISOR_BIN');
const FAKE = env('FAKE_WORKER_BIN');
const PYTHON = env('BROWSER_PYTHON');
const CHROMIUM = process.env.BROWSER_CHROMIUM || '/usr/bin/chromium';
const SHOTS = env('BROWSER_SHOTS');
const MINI = path.join(HERE, 'fixtures', 'mini_server.py');
const { chromium } = createRequire(path.join(env('BROWSER_NPM_PREFIX'), 'node_modules') + '/')('playwright-core');

const AUTH_URL = 'https://auth.example.com/authorize?client_id=mcpvisor-browser-tier&state=s1';
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

// ---- small helpers ---------------------------------------------------------

function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}

function withTimeout(promise, ms, what) {
  let timer;
  return Promise.race([
    promise.finally(() => clearTimeout(timer)),
    new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(`${what}: no result within ${ms} ms`)), ms); }),
  ]);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const sha256 = (s) => createHash('sha256').update(s).digest('hex');

async function until(what, fn, ms = 15000, every = 100) {
  const deadline = Date.now() + ms;
  let last;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}${last ? ` (last error: ${last.message})` : ''}`);
    await sleep(every);
  }
}

// ---- the gateway -------------------------------------------------------------

// Every gateway started, so that a run cut short (run.sh's timeout) leaves
// none behind: mcpvisor stops its servers when it gets SIGTERM.
const running = new Set();
for (const sig of ['SIGTERM', 'SIGINT']) {
  process.on(sig, () => {
    for (const proc of running) proc.kill('SIGTERM');
    console.log(`browser: stopped by ${sig}`);
    process.exit(1);
  });
}

class Gateway {
  // opts: `ui` (the --ui address, default 127.0.0.1:0), `args` (more
  // arguments of serve), `env` (more environment).
  constructor(dir, servers, opts = {}) {
    this.dir = dir;
    this.ui = opts.ui || '127.0.0.1:0';
    this.args = opts.args || [];
    this.env = opts.env || {};
    this.config = path.join(dir, 'servers.json');
    fs.writeFileSync(this.config, JSON.stringify({ mcpServers: servers }, null, 2));
    this.stderr = '';
    this.pending = new Map();
    this.nextId = 1;
    this.notifications = [];
  }

  async start() {
    this.proc = spawn(BIN, ['serve', '--config', this.config, '--ui', this.ui, '--no-watch', ...this.args], {
      cwd: this.dir,
      stdio: ['pipe', 'pipe', 'pipe'],
      // Its state (the pin store, OAuth tokens) in its own dir, not the user's.
      env: { ...process.env, XDG_RUNTIME_DIR: this.dir, XDG_STATE_HOME: path.join(this.dir, 'state'), RUST_LOG: process.env.RUST_LOG || '', ...this.env },
    });
    running.add(this.proc);
    this.exited = new Promise((resolve) => this.proc.on('exit', (code, signal) => {
      running.delete(this.proc);
      resolve({ code, signal });
    }));
    this.proc.stderr.setEncoding('utf8');
    this.proc.stderr.on('data', (d) => { this.stderr += d; });
    let buf = '';
    this.proc.stdout.setEncoding('utf8');
    this.proc.stdout.on('data', (d) => {
      buf += d;
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (line.trim()) this.onLine(line);
      }
    });
    const m = await until('the gateway to print its UI address', async () => {
      if (this.proc.exitCode !== null) throw new Error(`mcpvisor serve exited: ${this.stderr}`);
      return /mcpvisor: UI at (http:\/\/[^\s/]+)\/\?token=(\S+)/.exec(this.stderr);
    }, 20000, 50);
    this.origin = m[1];
    this.token = m[2];
    this.loginUrl = `${this.origin}/?token=${this.token}`;
    const init = await this.request('initialize', {
      protocolVersion: '2025-06-18',
      capabilities: {},
      clientInfo: { name: 'browser-tier', version: '1' },
    }, 30000);
    assert(init.result, `initialize failed: ${JSON.stringify(init)}`);
    this.notify('notifications/initialized', {});
  }

  onLine(line) {
    let msg;
    try { msg = JSON.parse(line); } catch (_) { return; }
    if (msg.id !== undefined && !msg.method && this.pending.has(msg.id)) {
      this.pending.get(msg.id)(msg);
      this.pending.delete(msg.id);
    } else if (msg.method && msg.id !== undefined) {
      // A server's request to the client: this client offers nothing.
      this.send({ jsonrpc: '2.0', id: msg.id, error: { code: -32601, message: 'not offered' } });
    } else if (msg.method) {
      this.notifications.push(msg);
    }
  }

  send(msg) {
    this.proc.stdin.write(JSON.stringify(msg) + '\n');
  }

  notify(method, params) {
    this.send({ jsonrpc: '2.0', method, params });
  }

  request(method, params, ms = 20000) {
    const id = this.nextId++;
    const answer = new Promise((resolve) => this.pending.set(id, resolve));
    this.send({ jsonrpc: '2.0', id, method, params });
    return withTimeout(answer, ms, `${method} through the stdio front`);
  }

  async callTool(name, args, ms) {
    const r = await this.request('tools/call', { name, arguments: args || {} }, ms);
    assert(r.result, `tools/call ${name} failed: ${JSON.stringify(r.error)}`);
    return r.result.content.map((c) => c.text).join('');
  }

  // A request to the UI's HTTP API as curl would send it.
  // `body` is sent as JSON, `raw` as it is.
  async http(method, p, { bearer = true, headers = {}, body, raw } = {}) {
    const h = { ...headers };
    if (bearer) h.Authorization = `Bearer ${this.token}`;
    if (body !== undefined) h['Content-Type'] = 'application/json';
    const res = await withTimeout(fetch(this.origin + p, {
      method, headers: h, body: body === undefined ? raw : JSON.stringify(body), redirect: 'manual',
    }), 10000, `${method} ${p}`);
    const text = await res.text();
    return { status: res.status, headers: res.headers, text };
  }

  // The first `ms` of the event stream, as text.
  async eventStream(ms) {
    const ctl = new AbortController();
    const res = await fetch(this.origin + '/api/events', { headers: { Authorization: `Bearer ${this.token}` }, signal: ctl.signal });
    assert(res.status === 200, `/api/events answered ${res.status}`);
    let text = '';
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    const stop = setTimeout(() => ctl.abort(), ms);
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        text += dec.decode(value, { stream: true });
      }
    } catch (_) {
      // aborted: the window is over
    } finally {
      clearTimeout(stop);
    }
    return text;
  }

  async stop() {
    if (!this.proc || this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    this.proc.stdin.end();
    this.proc.kill('SIGTERM');
    const done = await Promise.race([this.exited, sleep(5000).then(() => null)]);
    if (!done) {
      this.proc.kill('SIGKILL');
      await this.exited;
    }
  }
}

// ---- the page ----------------------------------------------------------------

// Problems the page itself reports: script errors, CSP violations, failed
// requests for its own files.
function watchPage(page) {
  const problems = [];
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => {
    // Chromium logs every non-2xx answer to fetch as an error; the refusals
    // the scenarios provoke on purpose are checked where they happen.
    if (m.type() === 'error' && !m.text().startsWith('Failed to load resource: the server responded with a status of')) {
      problems.push(`console error: ${m.text()}`);
    }
  });
  return problems;
}

async function openUi(browser, gw, opts = {}) {
  const context = await browser.newContext({ viewport: opts.viewport || { width: 1280, height: 800 }, colorScheme: opts.colorScheme || 'light' });
  const page = await context.newPage();
  page.setDefaultTimeout(15000);
  const problems = watchPage(page);
  // Samples every row's state, so a short state between two samples of this
  // script is still seen.
  await page.addInitScript(() => {
    window.__seen = {};
    setInterval(() => {
      for (const tr of document.querySelectorAll('tr[data-server]')) {
        const list = (window.__seen[tr.dataset.server] ||= []);
        if (list[list.length - 1] !== tr.dataset.state) list.push(tr.dataset.state);
      }
    }, 20);
  });
  const res = await page.goto(gw.loginUrl);
  assert(res, 'no answer to the login link');
  assert(!page.url().includes('token='), `the token stays in the address bar: ${page.url()}`);
  await page.waitForSelector('#conn[data-conn="live"]');
  return { context, page, problems };
}

async function rowState(page, name) {
  return page.$eval(`tr[data-server="${name}"]`, (tr) => tr.dataset.state).catch(() => null);
}

async function waitRow(page, name, states, ms = 20000) {
  const want = [].concat(states);
  await until(`server ${name} to be ${want.join(' or ')} on the page`, async () => want.includes(await rowState(page, name)), ms, 50);
}

async function shot(page, name) {
  fs.mkdirSync(SHOTS, { recursive: true });
  await page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true });
}

// ---- the config ------------------------------------------------------------

const INITIAL_SECRET = `first-${randomBytes(6).toString('hex')}`;
// What the crash-looping server prints on stderr at every start.
const CRASHY_SECRET = `leaked-${randomBytes(8).toString('hex')}`;

function servers(dir) {
  fs.writeFileSync(path.join(dir, 'vault.env'), `# the vault's token\nOTHER=kept\nVAULT_TOKEN=${INITIAL_SECRET}\n`, { mode: 0o600 });
  return {
    echo: { command: FAKE, args: ['--initialize-delay', '2500'] },
    crashy: { command: FAKE, args: ['--exit-on-initialize', '3', '--leak-env', 'CRASHY_TOKEN'], crash_loop_exits: 3, env: { CRASHY_TOKEN: CRASHY_SECRET } },
    remote: { command: PYTHON, args: [MINI, '--auth-url', AUTH_URL, '--wait-file', path.join(dir, 'authorized')] },
    vault: { command: PYTHON, args: [MINI, '--env-digest', 'VAULT_TOKEN'], env_file: 'vault.env', env_keys: ['VAULT_TOKEN'] },
    perclient: { command: FAKE, sessions: 'per-client' },
  };
}

// ---- scenarios -------------------------------------------------------------

const scenarios = [];
const scenario = (name, ms, fn) => scenarios.push({ name, ms, fn });

scenario('a server goes from starting to ready, live', 60000, async ({ browser, gw }) => {
  const { page, problems, context } = await openUi(browser, gw);
  await waitRow(page, 'echo', 'ready', 30000);
  const row = page.locator('tr[data-server="echo"]');
  assert((await row.locator('.col-state').innerText()).includes('Ready'), 'the state is written as text');
  assert(await row.locator('.col-state svg.icon').count() === 1, 'the state has an icon');
  const up1 = await row.locator('.col-uptime').innerText();
  await sleep(2200);
  const up2 = await row.locator('.col-uptime').innerText();
  assert(up1 !== up2 && up2 !== '—', `the uptime ticks (${up1} then ${up2})`);
  const gen = Number(await row.locator('.col-generation').innerText());

  // A restart from its page: starting (initialize is held 2.5 s), then ready.
  await page.evaluate(() => { window.__seen = {}; });
  await row.locator('th a').click();
  await page.waitForSelector('.server-head[data-state]');
  await page.getByRole('button', { name: 'Restart' }).click();
  await until('the restart to show as starting', async () => (await page.$eval('.server-head', (el) => el.dataset.state)) === 'starting', 10000, 20);
  await shot(page, 'echo-starting');
  await until('the restarted server to be ready', async () => (await page.$eval('.server-head', (el) => el.dataset.state)) === 'ready', 20000, 50);
  await page.goto(gw.origin + '/#/');
  await waitRow(page, 'echo', 'ready');
  const gen2 = Number(await row.locator('.col-generation').innerText());
  assert(gen2 > gen, `the generation went up (${gen} then ${gen2})`);
  await shot(page, 'servers');
  assert(problems.length === 0, problems.join('\n'));
  await context.close();
});

scenario('a per-client server shows its client\'s own process', 60000, async ({ browser, gw }) => {
  const { page, problems, context } = await openUi(browser, gw);
  const answer = await gw.request('tools/call', { name: 'perclient__whoami', arguments: {} }, 30000);
  assert(answer.result, `the call failed: ${JSON.stringify(answer)}`);
  const pid = String(JSON.parse(answer.result.content[0].text).pid);
  const row = page.locator('tr[data-server="perclient"]');
  await until('the row to show the client\'s process', async () => (await row.locator('.col-pid').innerText()).trim() === pid, 15000, 50);
  await row.locator('th a').click();
  await page.waitForSelector('.server-head[data-state]');
  await until('the page to list the client\'s process', async () => {
    const items = await page.locator('.stat.instance dd').allInnerTexts();
    return items.length === 1 && items[0].startsWith(`pid ${pid} · ready`);
  }, 15000, 50);
  await shot(page, 'per-client');
  assert(problems.length === 0, problems.join('\n'));
  await context.close();
});

scenario('a crash shows with its reason', 60000, async ({ browser, gw }) => {
  const { page, problems, context } = await openUi(browser, gw);
  await waitRow(page, 'crashy', 'failed', 45000);
  const seen = await page.evaluate(() => window.__seen.crashy || []);
  const detail = await page.locator('tr[data-server="crashy"] .col-detail').innerText();
  assert(detail.trim().length > 0, 'a failed server says why in its row');
  assert((await page.locator('tr[data-server="crashy"] .col-state').innerText()).includes('Failed'), 'Failed as text');
  // Its last stderr lines are in the row, the secret it printed redacted.
  const rowStderr = await page.locator('tr[data-server="crashy"] .col-detail pre.row-stderr').innerText();
  assert(rowStderr.includes('CRASHY_TOKEN=[redacted:CRASHY_TOKEN]'), `the row shows the last stderr lines, redacted: ${rowStderr}`);
  assert(!(await page.content()).includes(CRASHY_SECRET), 'the servers page never shows the secret the server printed');
  await page.locator('tr[data-server="crashy"] th a').click();
  await page.waitForSelector('[data-crash]');
  const crash = await page.$$eval('[data-crash] dt', (dts) => Object.fromEntries(dts.map((dt) => [dt.textContent, dt.nextElementSibling.textContent])));
  assert(crash.Reason && crash.Reason.length > 0, `the crash report has a reason: ${JSON.stringify(crash)}`);
  assert(crash.Exit === 'code 3', `the crash report has the exit status: ${JSON.stringify(crash)}`);
  const events = await page.$$eval('.events .event', (lis) => lis.map((li) => li.dataset.kind));
  assert(events.includes('exited') || events.includes('failed'), `its events show the exits: ${events.join(',')}`);
  // The whole stderr tail on request, redacted too.
  assert(await page.locator('.stderr').isHidden(), 'the whole stderr is hidden until asked for');
  await page.getByRole('button', { name: 'Show stderr' }).click();
  await page.waitForSelector('.stderr .warning');
  const tail = await page.locator('.stderr pre.log').innerText();
  assert(tail.includes('[redacted:CRASHY_TOKEN]'), `the stderr tail has the secret redacted: ${tail}`);
  assert(!(await page.content()).includes(CRASHY_SECRET), 'the server\'s page never shows the secret the server printed');
  // Restarted, it crashes again: the first crash moves to the list of
  // earlier ones, each with its own stderr on request.
  await page.getByRole('button', { name: 'Restart', exact: true }).click();
  await page.waitForSelector('[data-earlier-crash]');
  await page.waitForSelector('.stderr', { state: 'hidden' });
  const earlier = await page.$$eval('[data-earlier-crash]', (lis) => lis.map((li) => li.dataset.earlierCrash));
  assert(earlier.length === 1, `the first crash is listed as an earlier one: ${earlier.join(',')}`);
  await page.locator('[data-earlier-crash]').first().getByRole('button', { name: 'Show its stderr' }).click();
  await page.waitForSelector('[data-earlier-crash] .earlier-stderr .warning');
  await shot(page, 'crashy');
  assert(problems.length === 0, problems.join('\n'));
  await context.close();
  return `states seen: ${seen.join(' → ')}`;
});

scenario('an authorization prompt shows an Authorize button until the handshake', 60000, async ({ browser, gw }) => {
  const { page, problems, context } = await openUi(browser, gw);
  await waitRow(page, 'remote', 'waiting_auth', 20000);
  const link = page.locator('tr[data-server="remote"] a[data-authorize]');
  assert(await link.getAttribute('href') === AUTH_URL, 'the button opens the printed link');
  assert(await link.getAttribute('target') === '_blank', 'in a new tab');
  assert((await link.getAttribute('rel')).includes('noopener'), 'without an opener');
  await page.locator('tr[data-server="remote"] th a').click();
  const big = page.locator('.auth-slot a[data-authorize]');
  await big.waitFor();
  assert(await big.isVisible(), 'the server page shows the Authorize button');
  await shot(page, 'remote-waiting-auth');
  fs.writeFileSync(path.join(gw.dir, 'authorized'), '');
  await until('the server to be ready after the handshake', async () => (await page.$eval('.server-head', (el) => el.dataset.state)) === 'ready', 20000, 50);
  await until('the Authorize button to go away', async () => (await page.locator('a[data-authorize]').count()) === 0, 5000);
  await page.goto(gw.origin + '/#/');
  await waitRow(page, 'remote', 'ready');
  assert(await page.locator('tr[data-server="remote"] a[data-authorize]').count() === 0, 'no Authorize button on the ready row');
  assert((await gw.callTool('remote__hello', { who: 'ui' })) === 'hello, ui', 'the authorized server answers');
  assert(problems.length === 0, problems.join('\n'));
  await context.close();
});

// ---- OAuth against a real authorization server --------------------------------

// A child process whose output is kept; stopped when the run is.
function child(cmd, args) {
  const proc = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  running.add(proc);
  proc.output = '';
  for (const s of [proc.stdout, proc.stderr]) {
    s.setEncoding('utf8');
    s.on('data', (d) => { proc.output += d; });
  }
  proc.on('exit', () => running.delete(proc));
  return proc;
}

async function freePort() {
  const srv = net.createServer();
  await new Promise((resolve) => srv.listen(0, '127.0.0.1', resolve));
  const { port } = srv.address();
  await new Promise((resolve) => srv.close(resolve));
  return port;
}

// The OAuth tier's authorization server (npm oidc-provider: consent approved
// by its interaction code) in front of its protected MCP server (the Python
// SDK's resource-server pieces).
async function protectedServer() {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}/mcp`;
  const as = child(env('OAUTH_NODE'), [env('OAUTH_AS'), url, '3600']);
  const issuer = (await until('the authorization server to listen', async () => /^issuer (\S+)/m.exec(as.output), 20000, 50))[1];
  const rs = child(env('OAUTH_PYTHON'), [env('OAUTH_RS'), String(port), issuer]);
  await until('the protected server to listen', async () => rs.output.includes('Uvicorn running'), 30000, 50);
  return { url, stop: () => { as.kill('SIGTERM'); rs.kill('SIGTERM'); } };
}

// The tokens a gateway's store holds, to look for in the page.
function storedTokens(state) {
  const dir = path.join(state, 'mcpvisor', 'oauth');
  const files = fs.existsSync(dir) ? fs.readdirSync(dir).filter((f) => f.endsWith('.json')) : [];
  const tokens = files.flatMap((f) => {
    const t = JSON.parse(fs.readFileSync(path.join(dir, f), 'utf8')).tokens || {};
    return [t.access_token, t.refresh_token];
  });
  return tokens.filter((t) => typeof t === 'string' && t.length >= 8);
}

async function whoami(gw) {
  const list = await gw.request('tools/list', {});
  const tool = ((list.result || {}).tools || []).find((t) => t.name.endsWith('whoami'));
  assert(tool, `no whoami tool listed: ${JSON.stringify(list).slice(0, 300)}`);
  return gw.callTool(tool.name, {}, 30000);
}

// What a person can see or a script can read: every page's HTML and text,
// and the UI's API answers.
async function assertNoToken(tokens, pages, gw) {
  assert(tokens.length >= 1, 'the store holds tokens to look for');
  const seen = [];
  for (const p of pages) seen.push(await p.content(), await p.evaluate(() => document.body.innerText));
  for (const p of ['/api/servers', '/api/servers/prot']) seen.push((await gw.http('GET', p)).text);
  for (const t of tokens) {
    assert(!seen.some((s) => s.includes(t)), 'a token appears in the page or an API answer');
  }
}

scenario('OAuth: Authorize in the browser, and the pasted address, against a real authorization server', 150000, async ({ browser }) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mcpvisor-browser-oauth-'));
  const rs = await protectedServer();
  const gateways = [];
  try {
    // 1. The Authorize button: the provider's pages in a new tab, which
    // ends on the UI's own /oauth/callback.
    const state1 = path.join(dir, 'state1');
    const gw = new Gateway(dir, { prot: { url: rs.url } }, { env: { XDG_STATE_HOME: state1 } });
    gateways.push(gw);
    await gw.start();
    const { page, problems, context } = await openUi(browser, gw);
    await waitRow(page, 'prot', 'waiting_auth', 30000);
    const row = page.locator('tr[data-server="prot"]');
    const detail = await row.locator('.col-detail').innerText();
    assert(detail.includes('not authorized yet'), `the row says why it waits: ${detail}`);
    const link = row.locator('a[data-authorize]');
    const href = await link.getAttribute('href');
    const redirect = new URL(href).searchParams.get('redirect_uri');
    assert(redirect === `${gw.origin}/oauth/callback`, `the redirect is the UI's callback: ${redirect}`);
    await shot(page, 'oauth-waiting');
    const [tab] = await Promise.all([context.waitForEvent('page'), link.click()]);
    await tab.waitForURL((u) => u.pathname === '/oauth/callback', { timeout: 30000 });
    await until('the callback page to say authorized', async () => (await tab.content()).includes('mcpvisor is authorized'), 15000);
    await waitRow(page, 'prot', 'ready', 30000);
    assert((await whoami(gw)).includes('authorized'), 'the authorized server answers');
    await assertNoToken(storedTokens(state1), [page, tab], gw);
    assert(problems.length === 0, problems.join('\n'));
    await context.close();
    await gw.stop();

    // 2. The pasted address: the redirect goes to an address the browser
    // cannot reach (--public-url on a closed port), so the provider's last
    // redirect fails; its address, pasted into the server page's field,
    // finishes the flow.
    const state2 = path.join(dir, 'state2');
    const dir2 = path.join(dir, 'paste');
    fs.mkdirSync(dir2);
    const closed = `http://127.0.0.1:${await freePort()}`;
    const gw2 = new Gateway(dir2, { prot: { url: rs.url } }, { args: ['--public-url', closed], env: { XDG_STATE_HOME: state2 } });
    gateways.push(gw2);
    await gw2.start();
    const ui = await openUi(browser, gw2);
    await waitRow(ui.page, 'prot', 'waiting_auth', 30000);
    await ui.page.locator('tr[data-server="prot"] th a').click();
    const big = ui.page.locator('.auth-slot a[data-authorize]');
    await big.waitFor();
    const headDetail = await ui.page.locator('.head-detail').innerText();
    assert(headDetail.includes('not authorized yet'), `the server page says why it waits: ${headDetail}`);
    let landed = null;
    const [tab2] = await Promise.all([ui.context.waitForEvent('page'), big.click()]);
    tab2.on('requestfailed', (r) => { if (r.url().startsWith(`${closed}/oauth/callback?`)) landed = r.url(); });
    tab2.on('request', (r) => { if (r.url().startsWith(`${closed}/oauth/callback?`)) landed = r.url(); });
    await until('the browser to end on the unreachable callback', async () => landed, 30000);
    assert(ui.problems.length === 0, ui.problems.join('\n'));
    // A forged answer is refused, and the flow goes on.
    await ui.page.fill('#oauth-paste', landed.replace('state=', 'state=forged'));
    await ui.page.locator('form[data-oauth-paste] button[type="submit"]').click();
    await until('the forged paste to be refused', async () => (await ui.page.locator('[data-paste-status]').innerText()).startsWith('Not authorized'), 15000);
    await ui.page.fill('#oauth-paste', landed);
    await ui.page.locator('form[data-oauth-paste] button[type="submit"]').click();
    await until('the server to be ready after the paste', async () => (await ui.page.$eval('.server-head', (el) => el.dataset.state)) === 'ready', 30000, 50);
    assert((await whoami(gw2)).includes('authorized'), 'the server authorized by the paste answers');
    await shot(ui.page, 'oauth-pasted');
    await assertNoToken(storedTokens(state2), [ui.page], gw2);
    await ui.context.close();
    return 'Authorize and paste both authorized the server';
  } finally {
    for (const g of gateways) await g.stop();
    rs.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

scenario('a server added through the wizard is called through the gateway', 90000, async ({ browser, gw }) => {
  const { page, problems, context } = await openUi(browser, gw);
  await page.getByRole('link', { name: 'Add server', exact: true }).first().click();
  await page.getByLabel('Command line, or a JSON or TOML server entry').fill(`${FAKE} --all-capabilities`);
  await page.getByRole('button', { name: 'Inspect' }).click();
  await page.waitForSelector('#add-name', { timeout: 30000 });
  const progress = await page.$$eval('.progress li', (lis) => lis.map((li) => li.textContent));
  assert(progress.length > 0, 'the inspection showed its progress');
  assert(await page.locator('[data-tool-filter="echo"]').count() === 1, 'the tools are listed for the filter');
  await page.getByLabel('Name').fill('added');
  await page.locator('[data-tool-filter="hang"]').uncheck();
  await shot(page, 'wizard-done');
  await page.getByRole('button', { name: 'Save' }).click();
  await until('the page of the new server', async () => page.url().endsWith('#/server/added'), 15000);
  await until('the new server to be ready', async () => (await page.$eval('.server-head', (el) => el.dataset.state).catch(() => null)) === 'ready', 30000, 50);
  const saved = JSON.parse(fs.readFileSync(gw.config, 'utf8'));
  assert(saved.mcpServers.added, 'the entry is in the config file');
  assert(saved.mcpServers.echo && saved.mcpServers.vault.env_file === 'vault.env', 'the other entries are kept');
  const listed = await until('added__echo in the gateway\'s list', async () => {
    const r = await gw.request('tools/list', {});
    const names = r.result.tools.map((t) => t.name);
    return names.includes('added__echo') ? names : null;
  }, 15000, 250);
  assert(!listed.includes('added__hang'), 'an unchecked tool is filtered out');
  const text = await gw.callTool('added__echo', { via: 'wizard' });
  assert(text.includes('"via":"wizard"'), `the tool answered: ${text}`);

  // A command that fails: its report, and a save only after a confirmation.
  await page.goto(gw.origin + '/#/add');
  await page.getByLabel('Command line, or a JSON or TOML server entry').fill(`${FAKE} --exit-on-initialize 7`);
  await page.getByRole('button', { name: 'Inspect' }).click();
  await page.waitForSelector('[data-report]', { timeout: 30000 });
  await shot(page, 'wizard-failed');
  await page.getByLabel('Name').fill('broken');
  await page.getByRole('button', { name: 'Save anyway…' }).click();
  assert(!JSON.parse(fs.readFileSync(gw.config, 'utf8')).mcpServers.broken, 'nothing is saved before the confirmation');
  await page.getByRole('button', { name: 'Yes, save anyway' }).click();
  await until('the page of the saved server', async () => page.url().endsWith('#/server/broken'), 15000);
  assert(JSON.parse(fs.readFileSync(gw.config, 'utf8')).mcpServers.broken, 'the failed server is saved on confirmation');
  assert(problems.length === 0, problems.join('\n'));
  await context.close();
});

scenario('a secret set on the page is used at the next start and never shown', 90000, async ({ browser, gw }) => {
  const secret = `s3cret-${randomBytes(12).toString('hex')}`;
  const bodies = [];
  const { page, problems, context } = await openUi(browser, gw);
  page.on('response', async (res) => {
    if ((res.headers()['content-type'] || '').includes('text/event-stream')) return;
    try { bodies.push(`${res.url()}\n${await res.text()}`); } catch (_) { /* a redirect has no body */ }
  });
  // The page's own view of the event stream, kept for the check below.
  await page.evaluate(() => {
    window.__stream = '';
    const es = new EventSource('/api/events');
    for (const k of ['snapshot', 'server', 'event', 'removed', 'sessions', 'inspect']) es.addEventListener(k, (e) => { window.__stream += e.data + '\n'; });
  });
  await waitRow(page, 'vault', 'ready', 20000);
  assert(await gw.callTool('vault__env_digest') === sha256(INITIAL_SECRET), 'the first start saw the first value');
  await page.locator('tr[data-server="vault"] th a').click();
  const form = page.locator('form[data-secret="VAULT_TOKEN"]');
  await form.waitFor();
  assert((await form.locator('[data-secret-status]').innerText()).includes('set'), 'the key shows as set');
  await form.getByLabel('New value for VAULT_TOKEN').fill(secret);
  await form.getByRole('button', { name: 'Save' }).click();
  const restart = page.getByRole('button', { name: 'Restart now' });
  await restart.waitFor();
  assert(await form.getByLabel('New value for VAULT_TOKEN').inputValue() === '', 'the field is cleared after saving');
  const file = path.join(gw.dir, 'vault.env');
  const text = fs.readFileSync(file, 'utf8');
  assert(text.includes(`VAULT_TOKEN=${secret}`) && text.includes('OTHER=kept'), 'the env file has the new value and keeps its other lines');
  assert((fs.statSync(file).mode & 0o777) === 0o600, `the env file is 0600 (${(fs.statSync(file).mode & 0o777).toString(8)})`);
  await restart.click();
  await until('the vault to run the new value', async () => (await gw.callTool('vault__env_digest', {}, 10000)) === sha256(secret), 30000, 300);
  await until('the page to say the restart is done', async () => (await page.locator('[data-restart-note]').innerText()).startsWith('Restarted: generation'), 10000);
  await shot(page, 'vault-secret-set');

  // Nowhere: not in the page, not in any answer the page got, not in any API
  // answer, nor in the event stream, nor in mcpvisor's own stderr.
  const leaks = [];
  const check = (where, s) => {
    for (const v of [secret, INITIAL_SECRET, CRASHY_SECRET]) if (s.includes(v)) leaks.push(where);
  };
  check('the page', await page.content());
  const stream = await gw.eventStream(1500);
  check('the event stream', stream);
  check('the page\'s event stream', await page.evaluate(() => window.__stream));
  for (const b of bodies) check(`an answer to the page: ${b.split('\n')[0]}`, b);
  const list = JSON.parse((await gw.http('GET', '/api/servers')).text);
  for (const p of ['/', '/api/servers', '/metrics']) check(p, (await gw.http('GET', p)).text);
  for (const s of list.servers) {
    for (const p of [`/api/servers/${s.name}`, `/api/servers/${s.name}/stderr`]) check(p, (await gw.http('GET', p)).text);
  }
  check('mcpvisor\'s stderr', gw.stderr);
  assert(leaks.length === 0, `a secret value leaked into: ${leaks.join('; ')}`);
  assert(bodies.length > 3, 'the page\'s answers were seen');
  assert(problems.length === 0, problems.join('\n'));
  await context.close();
});

// Servers that start in milliseconds: the new process is ready before the
// answer to "Restart now" (or to the save that restarts it) reaches the
// page, which must still say the restart is done. A first secret on an
// entry with no env file creates one, and the config then names it: the
// server restarts by itself, and the page says so, and keeps saying it.
scenario('a fast server\'s restart after a secret is followed to its end', 60000, async ({ browser }) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mcpvisor-fast-'));
  fs.writeFileSync(path.join(dir, 'fast.env'), 'FAST_TOKEN=one\n', { mode: 0o600 });
  const gw = new Gateway(dir, {
    fast: { command: FAKE, env_file: 'fast.env', env_keys: ['FAST_TOKEN'] },
    fresh: { command: FAKE },
  });
  try {
    await gw.start();
    const { page, problems, context } = await openUi(browser, gw);
    await waitRow(page, 'fast', 'ready', 20000);
    await waitRow(page, 'fresh', 'ready', 20000);

    // "Restart now" on a server that restarts faster than the answer comes.
    await page.locator('tr[data-server="fast"] th a').click();
    const form = page.locator('form[data-secret="FAST_TOKEN"]');
    await form.getByLabel('New value for FAST_TOKEN').fill('two');
    await form.getByRole('button', { name: 'Save' }).click();
    // The answer to the restart is held until the new process is ready and
    // the page has had time to hear of it: the order a fast server gives.
    const fast = async () => JSON.parse((await gw.http('GET', '/api/servers/fast')).text);
    const from = (await fast()).generation;
    await page.route('**/api/servers/fast/restart', async (route) => {
      const response = await route.fetch();
      await until('the fast server\'s next generation', async () => { const s = await fast(); return s.state === 'ready' && s.generation > from; }, 10000);
      await sleep(500);
      await route.fulfill({ response });
    });
    await page.getByRole('button', { name: 'Restart now' }).click();
    await until('the page to say the fast restart is done', async () => (await page.locator('[data-restart-note]').innerText()).startsWith('Restarted: generation'), 10000);

    // A first secret where there is no env file: the server restarts by
    // itself, and the message stays past the page's refresh of the server.
    await page.evaluate(() => { location.hash = '#/server/fresh'; });
    await page.locator('#secret-new-key').fill('FRESH_TOKEN');
    await page.locator('#secret-new-value').fill('three');
    await page.locator('form[data-secret=""]').getByRole('button', { name: 'Save' }).click();
    const after = page.locator('.secret-after');
    await until('the message after the first secret', async () => (await after.innerText()).includes('FRESH_TOKEN saved'), 10000);
    await until('the page to say the server restarted by itself', async () => (await page.locator('[data-restart-note]').innerText()).startsWith('Restarted: generation'), 10000);
    await sleep(1500);
    const text = await after.innerText();
    assert(text.includes('FRESH_TOKEN saved') && text.includes('restarts to read it'), `the message stays and says the server restarts: ${JSON.stringify(text)}`);
    assert(!text.includes('next start'), `the message does not say the value waits for the next start: ${JSON.stringify(text)}`);
    assert(await page.getByRole('button', { name: 'Restart now' }).count() === 0, 'no "Restart now" for a server that restarted by itself');
    assert(fs.readFileSync(path.join(dir, 'fresh.env'), 'utf8').includes('FRESH_TOKEN=three'), 'the new env file has the value');
    assert(problems.length === 0, problems.join('\n'));
    await context.close();
  } finally {
    await gw.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

scenario('requests without the token or from another origin are refused', 30000, async ({ browser, gw }) => {
  let r = await gw.http('GET', '/api/servers', { bearer: false });
  assert(r.status === 401, `/api/servers without the token: ${r.status}`);
  assert(JSON.parse(r.text).error, 'a 401 says why, as JSON');
  r = await gw.http('GET', '/', { bearer: false });
  assert(r.status === 401, `the page without the token: ${r.status}`);
  r = await gw.http('GET', '/?token=wrong', { bearer: false });
  assert(r.status === 401, `the page with a wrong token: ${r.status}`);
  r = await gw.http('GET', '/metrics', { bearer: false });
  assert(r.status === 401, `/metrics without the token: ${r.status}`);
  r = await gw.http('GET', '/api/servers');
  assert(r.status === 200, `/api/servers with the token: ${r.status}`);
  r = await gw.http('POST', '/api/servers/echo/restart', { headers: { Origin: 'http://evil.example' } });
  assert(r.status === 403, `a POST from another origin with the token: ${r.status}`);
  r = await gw.http('OPTIONS', '/api/servers');
  assert(r.status === 405, `OPTIONS: ${r.status}`);
  assert(!r.headers.get('access-control-allow-origin'), 'no CORS headers');

  const { page, problems, context } = await openUi(browser, gw);
  const cookies = await context.cookies();
  const cookie = cookies.find((c) => c.name === 'mcpvisor_ui');
  assert(cookie && cookie.httpOnly && cookie.sameSite === 'Strict', `the session cookie is HttpOnly and SameSite=Strict: ${JSON.stringify(cookie)}`);
  // The page's cookie alone, without the CSRF token, changes nothing.
  const noCsrf = await page.evaluate(async () => (await fetch('/api/servers/echo/restart', { method: 'POST', credentials: 'same-origin' })).status);
  assert(noCsrf === 403, `a cookie POST without the CSRF token: ${noCsrf}`);
  const withCsrf = await page.evaluate(async () => (await fetch('/api/servers/echo/restart', {
    method: 'POST', credentials: 'same-origin',
    headers: { 'X-CSRF-Token': document.querySelector('meta[name="csrf-token"]').content },
  })).status);
  assert(withCsrf === 202, `a cookie POST with the CSRF token: ${withCsrf}`);
  // The cookie and the CSRF token from another origin's page are refused.
  const csrf = await page.$eval('meta[name="csrf-token"]', (m) => m.content);
  r = await gw.http('POST', '/api/servers/echo/restart', {
    bearer: false,
    headers: { Cookie: `mcpvisor_ui=${cookie.value}`, 'X-CSRF-Token': csrf, Origin: 'http://evil.example' },
  });
  assert(r.status === 403, `a cookie POST from another origin: ${r.status}`);
  const main = await page.goto(gw.origin + '/');
  const headers = main.headers();
  assert(headers['content-security-policy'] === CSP, `the page's CSP: ${headers['content-security-policy']}`);
  assert(headers['x-content-type-options'] === 'nosniff', 'nosniff');
  assert(problems.length === 0, problems.join('\n'));
  await context.close();
});

scenario('the page works from 360 px wide and by keyboard', 30000, async ({ browser, gw }) => {
  const { page, problems, context } = await openUi(browser, gw, { viewport: { width: 360, height: 740 }, colorScheme: 'dark' });
  await page.waitForSelector('tr[data-server="echo"]');
  assert(await page.$eval('table.servers thead', (el) => getComputedStyle(el).display) === 'none', 'the table turns into cards');
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert(overflow <= 0, `nothing sticks out sideways (${overflow} px)`);
  await shot(page, 'servers-360-dark');
  // The first stops of Tab: the skip link, then the navigation.
  await page.keyboard.press('Tab');
  assert(await page.evaluate(() => document.activeElement.className) === 'skip', 'Tab reaches the skip link first');
  const outline = await page.evaluate(() => getComputedStyle(document.activeElement).outlineStyle);
  assert(outline !== 'none', 'the focused element has a visible outline');
  // Every field on the server page and the wizard has a label.
  for (const hash of ['#/server/vault', '#/add']) {
    await page.goto(gw.origin + '/' + hash);
    await page.waitForSelector('input, textarea');
    const unlabelled = await page.$$eval('input, textarea, select', (els) => els.filter((el) => el.type !== 'hidden' && el.labels.length === 0).map((el) => el.id || el.name));
    assert(unlabelled.length === 0, `unlabelled fields on ${hash}: ${unlabelled.join(', ')}`);
  }
  assert(await page.locator('[aria-live]').count() >= 1, 'an aria-live region announces state changes');
  assert(problems.length === 0, problems.join('\n'));
  await context.close();
});

// ---- pinned definitions --------------------------------------------------------

// A tool whose description changes while it is served goes through the real
// quarantine: the gateway approved what the server offered first (the
// default policy, tofu); the server's new description, read again at a
// reload, is held back from clients until the Approve button on its page.
scenario('a changed tool is held back with its diff until approved on the page', 60000, async ({ browser }) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mcpvisor-pin-'));
  const descFile = path.join(dir, 'description.txt');
  const OLD = 'Says hello, politely.';
  // Markup a server could put in a description: shown as text, never run.
  const NEW = 'Says hello <b>loudly</b><img src="x" onerror="window.__injected = 1">';
  fs.writeFileSync(descFile, OLD + '\n');
  const extraFile = path.join(dir, 'wave.txt');
  const gw = new Gateway(dir, {
    shifty: { command: PYTHON, args: [MINI, '--description-file', descFile, '--extra-tool-file', extraFile] },
  });
  const listed = async () => {
    const r = await gw.request('tools/list', {});
    assert(r.result, `tools/list failed: ${JSON.stringify(r.error)}`);
    return r.result.tools;
  };
  try {
    await gw.start();
    const first = await until('shifty__hello listed', async () => (await listed()).find((t) => t.name === 'shifty__hello'), 20000, 200);
    assert(first.description === OLD, `the first description: ${first.description}`);
    const { page, problems, context } = await openUi(browser, gw);
    await waitRow(page, 'shifty', 'ready', 20000);
    assert(await page.locator('tr[data-server="shifty"] .held').count() === 0, 'nothing is held back at first sight');

    // The server changes its description; a reload makes the gateway list it again.
    fs.writeFileSync(descFile, NEW + '\n');
    await page.locator('tr[data-server="shifty"] th a').click();
    await page.waitForSelector('.server-head[data-state="ready"]');
    await page.getByRole('button', { name: 'Reload', exact: true }).click();

    // Held back: out of the clients' list, a call refused with -32012.
    await until('shifty__hello to leave the gateway\'s list', async () => !(await listed()).some((t) => t.name === 'shifty__hello'), 20000, 200);
    const refused = await gw.request('tools/call', { name: 'shifty__hello', arguments: { who: 'x' } });
    assert(refused.error && refused.error.code === -32012, `a call to the held-back tool: ${JSON.stringify(refused)}`);

    // Its page lists it, with the diff of the old and new text.
    const item = page.locator('[data-held-item="hello"]');
    await item.waitFor({ timeout: 15000 });
    assert(await item.getAttribute('data-kind') === 'tool' && await item.getAttribute('data-change') === 'changed',
      `kind and change: ${await item.getAttribute('data-kind')} ${await item.getAttribute('data-change')}`);
    const removed = await item.locator('pre.diff del').allInnerTexts();
    const added = await item.locator('pre.diff ins').allInnerTexts();
    assert(removed.some((l) => l.startsWith('-') && l.includes(OLD)), `the diff's removed lines have the old text: ${JSON.stringify(removed)}`);
    assert(added.some((l) => l.startsWith('+') && l.includes(NEW.replace(/"/g, '\\"'))), `the diff's added lines have the new text, as text: ${JSON.stringify(added)}`);
    assert(await page.locator('.held-card b, .held-card img').count() === 0, 'the description\'s markup made no element');
    assert(await page.evaluate(() => window.__injected) === undefined, 'the description\'s markup ran nothing');
    const colours = await item.locator('pre.diff del').first().evaluate((el) => getComputedStyle(el).backgroundColor);
    assert(colours !== 'rgba(0, 0, 0, 0)', 'a removed line has a background of its own');
    assert((await page.locator('.held-card h2').innerText()).includes('Held back (1)'), 'the section counts it');
    assert(await page.locator('[data-section="tools"] [data-tool="hello"] [data-held-tag]').count() === 1, 'the Tools section marks it held back');
    await shot(page, 'held-back');

    // The servers table marks the server.
    await page.goto(gw.origin + '/#/');
    const badge = page.locator('tr[data-server="shifty"] .held');
    await badge.waitFor();
    assert((await badge.innerText()).includes('1 held back'), `the row's badge: ${await badge.innerText()}`);
    assert((await page.locator('.summary').innerText()).includes('1 definition held back'), 'the summary counts it');
    // At 360 px, the badge and the diff stay within the page.
    await page.setViewportSize({ width: 360, height: 740 });
    assert(await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth) <= 0, 'the held-back badge fits at 360 px');
    await page.goto(gw.origin + '/#/server/shifty');
    await item.waitFor();
    assert(await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth) <= 0, 'the held-back card fits at 360 px');
    await shot(page, 'held-back-360');
    await page.setViewportSize({ width: 1280, height: 800 });
    await page.goto(gw.origin + '/#/');

    // Approve: it leaves the page, and clients see it again, as offered now.
    await page.locator('tr[data-server="shifty"] th a').click();
    await item.waitFor();
    // The card shows the digest of the definition it shows; an approval
    // that gives another digest (it changed again since) is refused and
    // approves nothing.
    const held = JSON.parse((await gw.http('GET', '/api/servers/shifty')).text).quarantine;
    const digest = await item.locator('[data-digest]').getAttribute('data-digest');
    assert(held.length === 1 && held[0].digest === digest && /^[0-9a-f]{12}$/.test(digest), `the digest shown: ${digest} of ${JSON.stringify(held)}`);
    let stale = await gw.http('POST', '/api/servers/shifty/approve', { body: { names: ['hello'], digests: { hello: '000000000000' } } });
    assert(stale.status === 409 && JSON.parse(stale.text).error.includes('changed again'), `a digest that is not the one offered: ${stale.status} ${stale.text}`);
    assert(!(await listed()).some((t) => t.name === 'shifty__hello'), 'the refused approval approved nothing');
    const notesBefore = gw.notifications.length;
    const posted = page.waitForRequest((r) => r.method() === 'POST' && r.url().endsWith('/api/servers/shifty/approve'), { timeout: 10000 });
    await item.getByRole('button', { name: 'Approve tool hello' }).click();
    const sent = JSON.parse((await posted).postData() || '{}');
    assert(JSON.stringify(sent) === JSON.stringify({ names: ['hello'], digests: { hello: [digest] } }), `the page sends the digest it showed: ${JSON.stringify(sent)}`);
    await until('the approved tool to leave the page', async () => (await page.locator('[data-held-item]').count()) === 0, 10000, 50);
    await until('the page to say it was approved', async () => (await page.locator('[data-held-msg]').innerText()).startsWith('Approved hello'), 5000, 50);
    const back = await until('shifty__hello back in the list', async () => (await listed()).find((t) => t.name === 'shifty__hello'), 10000, 200);
    assert(back.description === NEW, `the approved description is the new one: ${back.description}`);
    await until('clients to be told the list changed', async () => gw.notifications.slice(notesBefore).some((n) => n.method === 'notifications/tools/list_changed'), 5000, 50);
    assert((await gw.callTool('shifty__hello', { who: 'pin' })) === 'hello, pin', 'the approved tool answers');
    await page.goto(gw.origin + '/#/');
    await waitRow(page, 'shifty', 'ready');
    await until('the row\'s badge to go', async () => (await page.locator('tr[data-server="shifty"] .held').count()) === 0, 10000, 50);

    // A tool that appears later is held back as new, every line of it
    // added; Approve all lets it through.
    fs.writeFileSync(extraFile, 'Waves.\n');
    await page.locator('tr[data-server="shifty"] th a').click();
    await page.waitForSelector('.server-head[data-state="ready"]');
    await page.getByRole('button', { name: 'Reload', exact: true }).click();
    const wave = page.locator('[data-held-item="wave"]');
    await wave.waitFor({ timeout: 20000 });
    assert(await wave.getAttribute('data-change') === 'new', `a tool that appeared is new: ${await wave.getAttribute('data-change')}`);
    assert(await wave.locator('pre.diff del').count() === 0 && await wave.locator('pre.diff ins').count() > 0, 'a new tool\'s diff only adds');
    assert(!(await listed()).some((t) => t.name === 'shifty__wave'), 'the new tool is not listed before it is approved');
    await page.getByRole('button', { name: 'Approve all' }).click();
    await until('the new tool to leave the page', async () => (await page.locator('[data-held-item]').count()) === 0, 10000, 50);
    await until('shifty__wave in the list', async () => (await listed()).some((t) => t.name === 'shifty__wave'), 10000, 200);
    assert((await gw.callTool('shifty__wave')) === 'o/', 'the approved new tool answers');

    // The API: the same checks as the other changes, and clear errors.
    let r = await gw.http('POST', '/api/servers/nope/approve', { body: { names: [] } });
    assert(r.status === 404 && JSON.parse(r.text).error, `an unknown server: ${r.status} ${r.text}`);
    r = await gw.http('POST', '/api/servers/shifty/approve', { headers: { 'Content-Type': 'application/json' }, body: undefined, raw: '{"names": [' });
    assert(r.status === 400 && JSON.parse(r.text).error, `bad JSON: ${r.status} ${r.text}`);
    r = await gw.http('POST', '/api/servers/shifty/approve', { body: { name: 'hello' } });
    assert(r.status === 400, `an unknown field is refused, not read as "all": ${r.status} ${r.text}`);
    r = await gw.http('POST', '/api/servers/shifty/approve', { body: { names: [] } });
    assert(r.status === 200 && JSON.stringify(JSON.parse(r.text).approved) === '[]', `nothing left to approve: ${r.status} ${r.text}`);
    r = await gw.http('POST', '/api/servers/shifty/approve', { body: { names: ['hello'] } });
    assert(r.status === 409 && JSON.parse(r.text).error, `a name not held back: ${r.status} ${r.text}`);
    r = await gw.http('POST', '/api/servers/shifty/approve', { headers: { Origin: 'http://evil.example' }, body: { names: [] } });
    assert(r.status === 403, `from another origin: ${r.status}`);
    const noCsrf = await page.evaluate(async () => (await fetch('/api/servers/shifty/approve', {
      method: 'POST', credentials: 'same-origin', headers: { 'Content-Type': 'application/json' }, body: '{"names":[]}',
    })).status);
    assert(noCsrf === 403, `a cookie POST without the CSRF token: ${noCsrf}`);
    const detail = JSON.parse((await gw.http('GET', '/api/servers/shifty')).text);
    assert(Array.isArray(detail.quarantine) && detail.quarantine.length === 0 && detail.quarantined === 0, `the detail after approving: ${JSON.stringify(detail.quarantine)} ${detail.quarantined}`);
    assert(problems.length === 0, problems.join('\n'));
    await context.close();
  } finally {
    await gw.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

// ---- the README's screenshot -------------------------------------------------

scenario('the Activity view lists each call live, with its outcome and never its arguments', 60000, async ({ browser, gw }) => {
  const marker = `argument-marker-${randomBytes(8).toString('hex')}`;
  const { page, problems, context } = await openUi(browser, gw);
  const rows = () => page.$$eval('table.activity tbody tr', (trs) => trs.map((tr) => ({
    seq: Number(tr.dataset.seq),
    outcome: tr.dataset.outcome,
    cells: Object.fromEntries([...tr.children].map((td) => [td.className.replace('act-', ''), td.textContent])),
  })));
  await page.getByRole('link', { name: 'Activity', exact: true }).click();
  await page.waitForSelector('table.activity', { state: 'attached' });
  assert(await page.locator('.empty', { hasText: 'No calls yet' }).count() === 1 || (await rows()).length > 0, 'an empty view says so');
  const before = (await rows()).length;
  const ok = await gw.request('tools/call', { name: 'echo__echo', arguments: { text: marker } }, 30000);
  assert(ok.result && JSON.stringify(ok.result).includes(marker), `echo answered: ${JSON.stringify(ok)}`);
  const failed = await gw.request('tools/call', { name: 'echo__sleep', arguments: { note: marker } }, 30000);
  assert(failed.result && failed.result.isError === true, `sleep without ms is a tool error: ${JSON.stringify(failed)}`);
  const lost = await gw.request('tools/call', { name: 'perclient__crash', arguments: { note: marker } }, 30000);
  assert(lost.error && lost.error.code === -32010, `a crash mid-call is -32010: ${JSON.stringify(lost)}`);
  const live = await until('three new rows, live', async () => {
    const r = await rows();
    return r.length >= before + 3 ? r : null;
  }, 15000, 50);
  const [crash, sleepRow, echoRow] = live;
  assert(crash.seq > sleepRow.seq && sleepRow.seq > echoRow.seq, 'newest first');
  assert(echoRow.cells.name === 'echo__echo' && echoRow.outcome === 'result' && echoRow.cells.outcome === 'Result', `the echo row: ${JSON.stringify(echoRow)}`);
  assert(echoRow.cells.client.startsWith('browser-tier'), `the client's name: ${echoRow.cells.client}`);
  assert(echoRow.cells.server === 'echo' && echoRow.cells.method === 'tools/call', JSON.stringify(echoRow));
  assert(/ B$/.test(echoRow.cells.request_bytes) && / B$/.test(echoRow.cells.answer_bytes), JSON.stringify(echoRow));
  assert(sleepRow.outcome === 'is_error' && sleepRow.cells.outcome === 'Tool error', `the sleep row: ${JSON.stringify(sleepRow)}`);
  assert(crash.outcome === 'error' && crash.cells.outcome === 'Error -32010', `the crash row: ${JSON.stringify(crash)}`);
  await shot(page, 'activity');
  // Opened afresh, the page is given the last records with the snapshot.
  await page.reload();
  await page.waitForSelector('#conn[data-conn="live"]');
  await until('the rows after a reload', async () => (await rows()).length === live.length, 15000, 50);
  const html = await page.content();
  assert(!html.includes(marker), 'no argument or result in the page');
  const api = await gw.http('GET', '/api/activity');
  assert(api.status === 200 && !api.text.includes(marker), `/api/activity: ${api.status}`);
  assert(JSON.parse(api.text).records.some((r) => r.name === 'echo__echo' && r.outcome === 'result'), api.text.slice(0, 400));
  assert(problems.length === 0, problems.join('\n'));
  await context.close();
});

async function readmeShot(browser, file) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mcpvisor-shot-'));
  const gw = new Gateway(dir, {
    github: { command: PYTHON, args: [MINI, '--auth-url', 'https://github.com/login/oauth/authorize?client_id=mcp', '--wait-file', path.join(dir, 'never')] },
    filesystem: { command: FAKE },
    fetch: { command: FAKE },
    memory: { command: FAKE, start: 'lazy', idle_timeout: '1s' },
    postgres: { command: FAKE, args: ['--exit-on-initialize', '1'], crash_loop_exits: 3 },
    search: { command: FAKE, disabled: true },
  });
  try {
    await gw.start();
    for (let i = 0; i < 40; i++) await gw.callTool(i % 3 ? 'filesystem__echo' : 'fetch__echo', { i });
    for (const ms of [12, 25, 40, 90]) await gw.callTool('fetch__sleep', { ms });
    const context = await browser.newContext({ viewport: { width: 1200, height: 700 }, colorScheme: 'light' });
    const page = await context.newPage();
    await page.goto(gw.loginUrl);
    await waitRow(page, 'postgres', 'failed', 45000);
    await waitRow(page, 'github', 'waiting_auth');
    await waitRow(page, 'memory', 'idle', 15000);
    await sleep(1200);
    // The page down to the table, not the empty space below it.
    const table = await page.locator('.table-wrap').boundingBox();
    await page.screenshot({ path: file, clip: { x: 0, y: 0, width: 1200, height: Math.min(700, Math.ceil(table.y + table.height + 24)) } });
    await context.close();
  } finally {
    await gw.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

// ---- main ------------------------------------------------------------------

async function main() {
  const args = process.argv.slice(2);
  const only = args.includes('--only') ? args[args.indexOf('--only') + 1].split(',') : null;
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
  try {
    if (args.includes('--readme-shot')) {
      await readmeShot(browser, args[args.indexOf('--readme-shot') + 1]);
      return 0;
    }
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mcpvisor-browser-'));
    const gw = new Gateway(dir, servers(dir));
    let passed = 0;
    let failed = 0;
    try {
      await gw.start();
      for (const [i, s] of scenarios.entries()) {
        if (only && !only.some((o) => s.name.includes(o))) continue;
        const t0 = Date.now();
        try {
          const note = await withTimeout(s.fn({ browser, gw }), s.ms, s.name);
          passed++;
          console.log(`ok ${i + 1} - ${s.name} (${Date.now() - t0} ms)${note ? ` — ${note}` : ''}`);
        } catch (e) {
          failed++;
          console.log(`not ok ${i + 1} - ${s.name} (${Date.now() - t0} ms)\n  ${String(e && e.stack || e).split('\n').join('\n  ')}`);
        }
      }
    } catch (e) {
      failed++;
      console.log(`not ok - the gateway did not start: ${e.message}`);
    } finally {
      await gw.stop();
      if (failed) {
        console.log(`mcpvisor's stderr (last 4000 bytes):\n${gw.stderr.slice(-4000)}`);
        console.log(`kept for a look: ${dir}`);
      } else {
        fs.rmSync(dir, { recursive: true, force: true });
      }
    }
    console.log(`browser: ${passed} passed, ${failed} failed`);
    return failed ? 1 : 0;
  } finally {
    await browser.close();
  }
}

main().then((code) => process.exit(code), (e) => {
  console.error(`browser: ${e.stack || e}`);
  process.exit(1);
});
