// mcpvisor's web UI: plain DOM, no framework, no build step.
//
// One EventSource on /api/events keeps a map of server rows current; the
// views (#/ servers, #/server/NAME, #/add) render from that map and from the
// JSON API. Nothing is ever written with innerHTML: every value reaches the
// page as text, so a server's name, tool description or crash reason cannot
// inject markup. Mutations carry the CSRF token from the page's <meta>.
'use strict';

(() => {
  const CSRF = (document.querySelector('meta[name="csrf-token"]') || {}).content || '';

  const STATES = {
    starting: { label: 'Starting', icon: 'spinner' },
    ready: { label: 'Ready', icon: 'check' },
    reloading: { label: 'Reloading', icon: 'spinner' },
    restarting: { label: 'Restarting', icon: 'loop' },
    failed: { label: 'Failed', icon: 'cross' },
    waiting_auth: { label: 'Waiting for auth', icon: 'key' },
    idle: { label: 'Idle', icon: 'moon' },
    stopped: { label: 'Stopped', icon: 'square' },
    disabled: { label: 'Disabled', icon: 'slash' },
  };

  // Event kinds after which a server's lists, crash report or keys may have
  // changed: its page fetches its detail again.
  const REFRESH_KINDS = new Set([
    'ready', 'exited', 'failed', 'recovered', 'authorized', 'list_changed',
    'stopped', 'started', 'added', 'enabled', 'disabled', 'secret_set',
    'quarantined', 'approved',
  ]);

  // The audit trail's last records (oldest first), as the server keeps
  // them: at most ACTIVITY_KEPT.
  const ACTIVITY_KEPT = 200;

  const store = {
    servers: new Map(),
    sessions: 0,
    connected: false,
    activity: [],
  };
  let view = null; // the current view: { kind, onServer?, onEvent?, onRemoved?, onInspect?, onSnapshot?, tick?, dispose? }

  // ---- DOM helpers ---------------------------------------------------------

  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    if (attrs) {
      for (const [k, v] of Object.entries(attrs)) {
        if (v === null || v === undefined || v === false) continue;
        if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
        else if (k === 'class') el.className = v;
        else if (k === 'for') el.htmlFor = v;
        else if (k === 'text') el.textContent = v;
        else if (k in el && typeof v !== 'string') el[k] = v;
        else el.setAttribute(k, v === true ? '' : v);
      }
    }
    append(el, children);
    return el;
  }

  function append(el, ...children) {
    for (const c of children.flat(Infinity)) {
      if (c === null || c === undefined || c === false) continue;
      el.append(c instanceof Node ? c : String(c));
    }
    return el;
  }

  function clear(el) {
    while (el.firstChild) el.removeChild(el.firstChild);
    return el;
  }

  const SVG_NS = 'http://www.w3.org/2000/svg';
  const ICONS = {
    check: [['path', { d: 'M3 8.5l3.2 3.2L13 4.8' }]],
    cross: [['path', { d: 'M4.5 4.5l7 7M11.5 4.5l-7 7' }]],
    spinner: [['path', { d: 'M8 2a6 6 0 1 1-6 6' }]],
    loop: [['path', { d: 'M13 8a5 5 0 1 1-1.6-3.7' }], ['path', { d: 'M12 1.8v3h-3' }]],
    key: [['circle', { cx: '5', cy: '8', r: '2.6' }], ['path', { d: 'M7.6 8H14M12 8v2.6M14 8v2' }]],
    moon: [['path', { d: 'M12.8 10.2A5.2 5.2 0 0 1 5.8 3.2a5.2 5.2 0 1 0 7 7z' }]],
    square: [['rect', { x: '4', y: '4', width: '8', height: '8', rx: '1' }]],
    slash: [['circle', { cx: '8', cy: '8', r: '5.6' }], ['path', { d: 'M4 12l8-8' }]],
    link: [['path', { d: 'M9 3h4v4M13 3L7.5 8.5M11 9.5V13H3V5h3.5' }]],
    hold: [['path', { d: 'M8 1.8l5.2 2v4c0 3-2.2 5.2-5.2 6.4C5 13 2.8 10.8 2.8 7.8v-4z' }], ['path', { d: 'M6.6 6v4M9.4 6v4' }]],
  };

  function icon(name, cls) {
    const svg = document.createElementNS(SVG_NS, 'svg');
    svg.setAttribute('viewBox', '0 0 16 16');
    svg.setAttribute('class', 'icon' + (cls ? ' ' + cls : ''));
    svg.setAttribute('aria-hidden', 'true');
    svg.setAttribute('focusable', 'false');
    for (const [tag, attrs] of ICONS[name] || []) {
      const el = document.createElementNS(SVG_NS, tag);
      for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
      svg.appendChild(el);
    }
    return svg;
  }

  function stateInfo(state) {
    return STATES[state] || { label: String(state || 'unknown'), icon: 'cross' };
  }

  function badge(state) {
    const info = stateInfo(state);
    return h('span', { class: 'badge', 'data-badge': state }, icon(info.icon), h('span', { text: info.label }));
  }

  function authLink(url, big) {
    return h('a', {
      class: 'button authorize' + (big ? ' big' : ''),
      href: url, target: '_blank', rel: 'noopener noreferrer',
      'data-authorize': '',
    }, icon('key'), h('span', { text: 'Authorize' }), h('span', { class: 'sr-only', text: ' (opens in a new tab)' }));
  }

  // The address the browser ended on after signing in, when the redirect
  // could not reach mcpvisor (a loopback address on another machine):
  // pasted here, it finishes the authorization.
  function pasteForm() {
    const input = h('input', { type: 'url', id: 'oauth-paste', name: 'url', autocomplete: 'off', spellcheck: 'false', placeholder: 'http://127.0.0.1:…/callback?code=…&state=…', required: true });
    const status = h('p', { class: 'paste-status', role: 'status', 'data-paste-status': '' });
    const form = h('form', { class: 'oauth-paste', 'data-oauth-paste': '', novalidate: true },
      h('label', { for: 'oauth-paste', text: 'Browser on another machine? If the page after signing in did not load, paste its address here:' }),
      h('div', { class: 'inline' }, input, h('button', { type: 'submit', text: 'Finish' })),
      status);
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      const url = input.value.trim();
      if (!url) { status.textContent = 'Paste the address first.'; return; }
      status.textContent = 'Finishing…';
      try {
        await api('POST', '/api/oauth/paste', { url });
        input.value = '';
        status.textContent = 'Authorized.';
      } catch (err) {
        status.textContent = 'Not authorized: ' + err.message;
      }
    });
    return form;
  }

  // ---- formatting ----------------------------------------------------------

  function fmtDuration(ms) {
    if (ms === null || ms === undefined || !isFinite(ms)) return '—';
    const s = Math.max(0, Math.floor(ms / 1000));
    if (s < 60) return `${s}s`;
    const m = Math.floor(s / 60);
    if (m < 60) return `${m}m ${String(s % 60).padStart(2, '0')}s`;
    const hr = Math.floor(m / 60);
    if (hr < 24) return `${hr}h ${String(m % 60).padStart(2, '0')}m`;
    return `${Math.floor(hr / 24)}d ${hr % 24}h`;
  }

  function fmtLatency(v) {
    if (v === null || v === undefined || !isFinite(v)) return '—';
    if (v < 10) return `${v.toFixed(1)} ms`;
    if (v < 10000) return `${Math.round(v)} ms`;
    return `${(v / 1000).toFixed(1)} s`;
  }

  function fmtNum(v) {
    return v === null || v === undefined ? '—' : String(v);
  }

  function fmtTime(ms) {
    if (!ms) return '';
    const d = new Date(ms);
    const now = new Date();
    const sameDay = d.toDateString() === now.toDateString();
    return sameDay ? d.toLocaleTimeString() : d.toLocaleString();
  }

  function uptimeOf(s) {
    if (!s.started_at_ms || !['ready', 'reloading'].includes(s.state)) return null;
    return Date.now() - s.started_at_ms;
  }

  function countdownOf(s) {
    if (s.state !== 'restarting' || !s.next_try_at_ms) return null;
    const left = s.next_try_at_ms - Date.now();
    return left > 0 ? `next try in ${fmtDuration(left + 999)}` : 'trying now';
  }

  // ---- the API -------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, message, data) {
      super(message);
      this.status = status;
      this.data = data;
    }
  }

  async function api(method, path, body) {
    const opts = { method, credentials: 'same-origin', headers: { Accept: 'application/json' }, cache: 'no-store' };
    if (method !== 'GET') opts.headers['X-CSRF-Token'] = CSRF;
    if (body !== undefined) {
      opts.headers['Content-Type'] = 'application/json';
      opts.body = JSON.stringify(body);
    }
    let res;
    try {
      res = await fetch(path, opts);
    } catch (e) {
      throw new ApiError(0, 'cannot reach mcpvisor (is it still running?)');
    }
    const text = await res.text();
    let data = null;
    if (text) {
      try { data = JSON.parse(text); } catch (_) { data = null; }
    }
    if (!res.ok) {
      if (res.status === 401) showBanner('Not signed in: open the link mcpvisor printed when it started (it carries the token).');
      const msg = data && typeof data.error === 'string' ? data.error : `${res.status} ${res.statusText}`;
      throw new ApiError(res.status, msg, data);
    }
    return data;
  }

  const enc = encodeURIComponent;

  // ---- live events ---------------------------------------------------------

  let source = null;
  let retryTimer = null;
  let retryDelay = 1000;

  function setConn(state, text) {
    const el = document.getElementById('conn');
    el.dataset.conn = state;
    document.getElementById('conn-text').textContent = text;
  }

  function connect() {
    if (source) source.close();
    clearTimeout(retryTimer);
    setConn('connecting', 'Connecting…');
    source = new EventSource('/api/events', { withCredentials: true });
    source.addEventListener('open', () => {
      retryDelay = 1000;
      store.connected = true;
      setConn('live', 'Live');
    });
    source.addEventListener('error', () => {
      store.connected = false;
      if (source.readyState === EventSource.CLOSED) {
        // The browser gave up (an HTTP error such as 401): try again later,
        // and find out why with a plain request.
        setConn('down', 'Disconnected');
        api('GET', '/api/servers').catch(() => {});
        retryTimer = setTimeout(connect, retryDelay);
        retryDelay = Math.min(retryDelay * 2, 15000);
      } else {
        setConn('connecting', 'Reconnecting…');
      }
    });
    source.addEventListener('snapshot', (e) => onSnapshot(parse(e)));
    source.addEventListener('server', (e) => onServer(parse(e)));
    source.addEventListener('event', (e) => {
      const d = parse(e);
      if (d && view && view.onEvent) view.onEvent(d.server, d.event);
    });
    source.addEventListener('removed', (e) => {
      const d = parse(e);
      if (!d) return;
      store.servers.delete(d.server);
      announce(`${d.server} removed`);
      if (view && view.onRemoved) view.onRemoved(d.server);
    });
    source.addEventListener('sessions', (e) => {
      const d = parse(e);
      if (!d) return;
      store.sessions = d.sessions;
      if (view && view.onSessions) view.onSessions();
    });
    source.addEventListener('activity', (e) => {
      const d = parse(e);
      if (!Array.isArray(d)) return;
      store.activity = d.slice(-ACTIVITY_KEPT);
      if (view && view.onActivity) view.onActivity(null);
    });
    source.addEventListener('call', (e) => {
      const d = parse(e);
      if (!d || typeof d.seq !== 'number') return;
      const last = store.activity[store.activity.length - 1];
      if (last && last.seq >= d.seq) return; // already in the last snapshot
      store.activity.push(d);
      if (store.activity.length > ACTIVITY_KEPT) store.activity.shift();
      if (view && view.onActivity) view.onActivity(d);
    });
    source.addEventListener('inspect', (e) => {
      const d = parse(e);
      if (d && view && view.onInspect) view.onInspect(d);
    });
  }

  function parse(e) {
    try { return JSON.parse(e.data); } catch (_) { return null; }
  }

  function onSnapshot(snap) {
    if (!snap || !Array.isArray(snap.servers)) return;
    hideBanner();
    const before = store.servers;
    store.servers = new Map(snap.servers.map((s) => [s.name, s]));
    store.sessions = snap.sessions || 0;
    for (const s of snap.servers) {
      const old = before.get(s.name);
      if (old && old.state !== s.state) announceState(s);
    }
    if (view && view.onSnapshot) view.onSnapshot();
  }

  function onServer(s) {
    if (!s || !s.name) return;
    const old = store.servers.get(s.name);
    store.servers.set(s.name, s);
    if (!old || old.state !== s.state) announceState(s);
    if (view && view.onServer) view.onServer(s, old);
  }

  function announceState(s) {
    const info = stateInfo(s.state);
    announce(`${s.name}: ${info.label}${s.detail ? ` (${s.detail})` : ''}`);
  }

  function announce(text) {
    const el = document.getElementById('announcer');
    el.textContent = text;
  }

  function showBanner(text) {
    const el = document.getElementById('banner');
    el.textContent = text;
    el.hidden = false;
  }

  function hideBanner() {
    document.getElementById('banner').hidden = true;
  }

  // ---- routing -------------------------------------------------------------

  function route() {
    if (view && view.dispose) view.dispose();
    view = null;
    const hash = location.hash || '#/';
    const main = clear(document.getElementById('main'));
    let m;
    if ((m = /^#\/server\/(.+)$/.exec(hash))) {
      let name;
      try { name = decodeURIComponent(m[1]); } catch (_) { name = m[1]; }
      view = serverView(main, name);
      setNav('servers');
    } else if (hash === '#/add') {
      view = addView(main);
      setNav('add');
    } else if (hash === '#/activity') {
      view = activityView(main);
      setNav('activity');
    } else {
      view = serversView(main);
      setNav('servers');
    }
  }

  function setNav(which) {
    for (const a of document.querySelectorAll('[data-nav]')) {
      if (a.dataset.nav === which) a.setAttribute('aria-current', 'page');
      else a.removeAttribute('aria-current');
    }
  }

  // The heading of a view takes the focus when the route changes, so a
  // screen reader announces it; not on the first load, where the focus
  // starts at the top (the skip link).
  let routed = false;

  function focusHeading(main) {
    if (!routed) return;
    const h1 = main.querySelector('h1');
    if (h1) {
      h1.tabIndex = -1;
      h1.focus({ preventScroll: true });
    }
  }

  // ---- the activity table --------------------------------------------------

  const ACTIVITY_COLUMNS = [
    ['time', 'Time'], ['client', 'Client'], ['server', 'Server'], ['method', 'Method'],
    ['name', 'Name'], ['duration', 'Duration'], ['outcome', 'Outcome'],
    ['request_bytes', 'Request'], ['answer_bytes', 'Answer'],
  ];

  const OUTCOMES = {
    result: { label: 'Result', tone: 'good' },
    is_error: { label: 'Tool error', tone: 'warn' },
    error: { label: 'Error', tone: 'bad' },
  };

  function fmtBytes(n) {
    if (typeof n !== 'number') return '—';
    if (n < 1024) return `${n} B`;
    if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
    return `${(n / 1024 / 1024).toFixed(1)} MiB`;
  }

  // Each call, prompt get and resource read of the gateway's clients,
  // newest first: who, what, how long, how it ended, and sizes. Never
  // arguments or results: the gateway does not keep them.
  function activityView(main) {
    const summary = h('p', { class: 'summary' });
    const tbody = h('tbody');
    const empty = h('p', { class: 'empty', text: 'No calls yet. Each tool call, prompt get and resource read of a client shows here as it is answered.' });
    const table = h('table', { class: 'activity' },
      h('caption', { class: 'sr-only', text: 'Calls, prompt gets and resource reads, newest first' }),
      h('thead', null, h('tr', null, ACTIVITY_COLUMNS.map(([k, label]) => h('th', { scope: 'col', class: 'act-' + k, text: label })))),
      tbody);
    append(main,
      h('div', { class: 'page-head' }, h('h1', { text: 'Activity' }), summary),
      h('div', { class: 'table-wrap' }, table), empty);
    focusHeading(main);

    function row(r, fresh) {
      const outcome = OUTCOMES[r.outcome] || { label: String(r.outcome), tone: 'neutral' };
      const outcomeText = r.outcome === 'error' && r.error_code !== null && r.error_code !== undefined
        ? `${outcome.label} ${r.error_code}` : outcome.label;
      const client = [r.client || 'unnamed client', `#${r.session}`].join(' ');
      const cells = {
        time: h('time', { datetime: new Date(r.at_ms).toISOString(), text: fmtTime(r.at_ms) }),
        client,
        server: h('a', { href: '#/server/' + enc(r.server), text: r.server }),
        method: r.method,
        name: r.name,
        duration: fmtLatency(r.duration_ms),
        outcome: h('span', { class: 'outcome kind-' + outcome.tone, text: outcomeText }),
        request_bytes: fmtBytes(r.request_bytes),
        answer_bytes: fmtBytes(r.answer_bytes),
      };
      const tr = h('tr', { class: fresh ? 'fresh' : null, 'data-seq': String(r.seq), 'data-outcome': r.outcome });
      for (const [k, label] of ACTIVITY_COLUMNS) {
        tr.appendChild(h('td', { class: 'act-' + k, 'data-label': label }, cells[k]));
      }
      return tr;
    }

    function renderSummary() {
      const n = store.activity.length;
      const failed = store.activity.filter((r) => r.outcome !== 'result').length;
      summary.textContent = `the last ${n} request${n === 1 ? '' : 's'}` + (failed ? ` · ${failed} failed` : '');
      empty.hidden = n > 0;
      table.hidden = n === 0;
    }

    function renderAll() {
      clear(tbody);
      for (let i = store.activity.length - 1; i >= 0; i--) tbody.appendChild(row(store.activity[i], false));
      renderSummary();
    }

    renderAll();
    return {
      kind: 'activity',
      onActivity(r) {
        if (!r) { renderAll(); return; }
        tbody.insertBefore(row(r, true), tbody.firstChild);
        while (tbody.children.length > ACTIVITY_KEPT) tbody.lastChild.remove();
        renderSummary();
      },
    };
  }

  // ---- the servers table ---------------------------------------------------

  const COLUMNS = [
    ['name', 'Server'], ['state', 'State'], ['detail', 'Detail'], ['generation', 'Gen.'],
    ['pid', 'PID'], ['uptime', 'Uptime'], ['restarts', 'Restarts'], ['calls', 'Calls'],
    ['errors', 'Errors'], ['in_flight', 'In flight'], ['p50', 'p50'], ['p99', 'p99'],
  ];

  function serversView(main) {
    const summary = h('p', { class: 'summary' });
    const tbody = h('tbody');
    const empty = h('div', { class: 'empty', hidden: true },
      h('p', { text: 'No servers are configured yet.' }),
      h('a', { class: 'button primary', href: '#/add', text: 'Add a server' }));
    const table = h('table', { class: 'servers' },
      h('caption', { class: 'sr-only', text: 'Configured servers and their state' }),
      h('thead', null, h('tr', null, COLUMNS.map(([k, label]) => h('th', { scope: 'col', class: 'col-' + k, text: label })))),
      tbody);
    append(main,
      h('div', { class: 'page-head' },
        h('h1', { text: 'Servers' }), summary,
        h('a', { class: 'button primary', href: '#/add' }, h('span', { 'aria-hidden': 'true', text: '+ ' }), 'Add server')),
      h('div', { class: 'table-wrap' }, table), empty);

    const rows = new Map();

    function renderAll() {
      const names = [...store.servers.keys()].sort((a, b) => a.localeCompare(b));
      for (const [name, tr] of rows) {
        if (!store.servers.has(name)) { tr.remove(); rows.delete(name); }
      }
      for (const name of names) {
        let tr = rows.get(name);
        if (!tr) { tr = newRow(name); rows.set(name, tr); }
        updateRow(tr, store.servers.get(name));
        tbody.appendChild(tr); // keeps sorted order; moving a row keeps its focus
      }
      renderSummary();
    }

    function renderSummary() {
      const all = [...store.servers.values()];
      const n = all.length;
      const ready = all.filter((s) => s.state === 'ready').length;
      const trouble = all.filter((s) => ['failed', 'waiting_auth', 'restarting'].includes(s.state)).length;
      const held = all.reduce((sum, s) => sum + (s.quarantined || 0), 0);
      summary.textContent = `${n} server${n === 1 ? '' : 's'} · ${ready} ready` +
        (trouble ? ` · ${trouble} need${trouble === 1 ? 's' : ''} attention` : '') +
        (held ? ` · ${held} definition${held === 1 ? '' : 's'} held back` : '') +
        ` · ${store.sessions} client session${store.sessions === 1 ? '' : 's'}`;
      empty.hidden = !(loaded && n === 0);
      table.hidden = loaded && n === 0;
    }

    function newRow(name) {
      const tr = h('tr', { 'data-server': name });
      for (const [k, label] of COLUMNS) {
        const td = h(k === 'name' ? 'th' : 'td', { class: 'col-' + k, 'data-label': label });
        if (k === 'name') {
          td.setAttribute('scope', 'row');
          td.appendChild(h('a', { href: '#/server/' + enc(name), text: name }));
        }
        tr.appendChild(td);
      }
      return tr;
    }

    function cell(tr, k) {
      return tr.querySelector('.col-' + k);
    }

    function updateRow(tr, s) {
      tr.dataset.state = s.state;
      setHeld(tr, s.quarantined || 0);
      const st = cell(tr, 'state');
      if (st.dataset.value !== s.state) {
        clear(st).appendChild(badge(s.state));
        st.dataset.value = s.state;
      }
      const det = cell(tr, 'detail');
      const authKey = s.state === 'waiting_auth' ? s.auth_url || '' : '';
      // A crashed server's last stderr lines, known secrets redacted by the
      // gateway, shown in the row: why it died is most often there.
      const stderr = (s.stderr || []).join('\n');
      if (det.dataset.auth !== authKey || det.dataset.detail !== (s.detail || '') || det.dataset.stderr !== stderr) {
        clear(det);
        det.dataset.auth = authKey;
        det.dataset.detail = s.detail || '';
        det.dataset.stderr = stderr;
        if (s.state === 'waiting_auth' && s.auth_url) det.appendChild(authLink(s.auth_url, false));
        if (s.detail) det.appendChild(h('span', { class: 'detail-text', text: s.detail }));
        det.appendChild(h('span', { class: 'countdown' }));
        if (stderr) det.appendChild(h('pre', { class: 'row-stderr', 'aria-label': 'its last stderr lines', text: stderr }));
      }
      cell(tr, 'generation').textContent = fmtNum(s.generation);
      cell(tr, 'pid').textContent = pidsOf(s);
      cell(tr, 'restarts').textContent = fmtNum(s.restarts);
      cell(tr, 'calls').textContent = fmtNum(s.calls);
      const errs = cell(tr, 'errors');
      errs.textContent = fmtNum(s.errors);
      errs.classList.toggle('has-errors', s.errors > 0);
      cell(tr, 'in_flight').textContent = fmtNum(s.in_flight);
      cell(tr, 'p50').textContent = fmtLatency(s.latency && s.latency.p50_ms);
      cell(tr, 'p99').textContent = fmtLatency(s.latency && s.latency.p99_ms);
      tickRow(tr, s);
    }

    // Definitions the server offers that changed since they were approved
    // (or appeared after): held back from clients until a person approves
    // them on the server's page (the name links there).
    function setHeld(tr, n) {
      const th = cell(tr, 'name');
      let el = th.querySelector('.held');
      if (!n) {
        if (el) el.remove();
        delete tr.dataset.held;
        return;
      }
      tr.dataset.held = String(n);
      if (el && el.dataset.held === String(n)) return;
      if (el) el.remove();
      el = h('span', { class: 'held', 'data-held': String(n), title: 'Changed or new definitions, held back from clients until you approve them on the server\'s page' },
        icon('hold'), h('span', { text: `${n} held back` }));
      th.appendChild(el);
    }

    // A per-client server runs no process of its own: its clients' pids.
    function pidsOf(s) {
      const own = s.instances || [];
      if (!own.length) return fmtNum(s.pid);
      const pids = own.map((i) => fmtNum(i.pid));
      return pids.length > 3 ? `${pids.slice(0, 3).join(', ')} +${pids.length - 3}` : pids.join(', ');
    }

    function tickRow(tr, s) {
      cell(tr, 'uptime').textContent = fmtDuration(uptimeOf(s));
      const cd = tr.querySelector('.col-detail .countdown');
      if (cd) cd.textContent = countdownOf(s) || '';
    }

    let loaded = store.servers.size > 0;
    renderAll();
    focusHeading(main);
    document.title = 'Servers · mcpvisor';

    return {
      kind: 'servers',
      onSnapshot() { loaded = true; renderAll(); },
      onServer() { loaded = true; renderAll(); },
      onRemoved() { renderAll(); },
      onSessions() { renderSummary(); },
      tick() {
        for (const [name, tr] of rows) {
          const s = store.servers.get(name);
          if (s) tickRow(tr, s);
        }
      },
    };
  }

  // ---- one server's page ---------------------------------------------------

  function serverView(main, name) {
    document.title = `${name} · mcpvisor`;
    let detail = null;
    let disposed = false;
    let refreshTimer = null;
    let stderrShown = false;

    const title = h('h1', { text: name });
    const headBadge = h('span', { class: 'head-badge' });
    const headDetail = h('p', { class: 'head-detail' });
    const authSlot = h('div', { class: 'auth-slot' });
    const actionMsg = h('p', { class: 'action-msg', role: 'status' });

    const btnRestart = h('button', { type: 'button', text: 'Restart', onclick: () => act('restart') });
    const btnReload = h('button', { type: 'button', text: 'Reload', onclick: () => act('reload') });
    const btnStopStart = h('button', { type: 'button', text: 'Stop', onclick: () => act(btnStopStart.dataset.action) });
    const btnEnable = h('button', { type: 'button', text: 'Disable', onclick: () => act(btnEnable.dataset.action) });

    const stats = h('dl', { class: 'stats' });
    const heldSec = section('Held back', 'held');
    heldSec.el.hidden = true;
    heldSec.el.classList.add('held-card');
    const toolsSec = section('Tools', 'tools');
    const promptsSec = section('Prompts', 'prompts');
    const resourcesSec = section('Resources', 'resources');
    const secretsSec = section('Secrets', 'secrets');
    const crashSec = section('Last crash', 'crash');
    const eventsSec = section('Recent events', 'events');
    const eventsList = h('ol', { class: 'events', reversed: true });
    append(eventsSec.body, eventsList);

    const stderrBtn = h('button', { type: 'button', class: 'warn', 'aria-expanded': 'false', onclick: toggleStderr },
      'Show stderr');
    const stderrBox = h('div', { class: 'stderr', hidden: true });

    append(main,
      h('nav', { class: 'crumbs', 'aria-label': 'Breadcrumb' }, h('a', { href: '#/', text: 'Servers' }), h('span', { 'aria-hidden': 'true', text: ' / ' }), h('span', { text: name })),
      h('div', { class: 'server-head', 'data-server': name },
        h('div', { class: 'title-row' }, title, headBadge),
        headDetail, authSlot,
        h('div', { class: 'actions', role: 'group', 'aria-label': 'Actions' }, btnRestart, btnReload, btnStopStart, btnEnable),
        actionMsg),
      heldSec.el,
      h('section', { class: 'card', 'aria-label': 'Figures' }, stats),
      h('div', { class: 'grid' },
        h('div', { class: 'col' }, toolsSec.el, promptsSec.el, resourcesSec.el),
        h('div', { class: 'col' }, secretsSec.el, crashSec.el, eventsSec.el)));
    // The crashes before the last one, each with its own stderr on request.
    const earlierBox = h('div', { class: 'earlier-crashes' });
    let earlierKey = '';
    append(crashSec.el, h('div', { class: 'stderr-wrap' }, stderrBtn, stderrBox), earlierBox);
    focusHeading(main);

    function section(label, key) {
      const count = h('span', { class: 'count' });
      const heading = h('h2', { id: 'sec-' + key }, label, count);
      const body = h('div', { class: 'section-body' });
      const el = h('section', { class: 'card', 'aria-labelledby': 'sec-' + key, 'data-section': key }, heading, body);
      return { el, body, count };
    }

    function renderHead(s) {
      const root = main.querySelector('.server-head');
      root.dataset.state = s.state;
      if (headBadge.dataset.value !== s.state) {
        clear(headBadge).appendChild(badge(s.state));
        headBadge.dataset.value = s.state;
      }
      const cd = countdownOf(s);
      headDetail.textContent = [s.detail, cd].filter(Boolean).join(' · ');
      const authKey = s.state === 'waiting_auth' ? s.auth_url || '' : '';
      if (authSlot.dataset.auth !== authKey) {
        clear(authSlot);
        authSlot.dataset.auth = authKey;
        if (authKey) {
          append(authSlot, h('div', { class: 'auth-box' },
            h('p', null, h('strong', { text: 'This server waits for you to authorize it. ' }),
              'Open the link, finish signing in, and it continues by itself.'),
            authLink(authKey, true),
            h('p', { class: 'auth-url' }, h('code', { text: authKey })),
            pasteForm()));
        }
      }
      const stopped = s.state === 'stopped';
      const disabled = s.state === 'disabled';
      btnStopStart.dataset.action = stopped || disabled || s.state === 'idle' ? 'start' : 'stop';
      btnStopStart.textContent = btnStopStart.dataset.action === 'start' ? 'Start' : 'Stop';
      btnStopStart.disabled = disabled;
      btnEnable.dataset.action = disabled ? 'enable' : 'disable';
      btnEnable.textContent = disabled ? 'Enable' : 'Disable';
      btnRestart.disabled = disabled;
      btnReload.disabled = disabled || stopped;
      renderStats(s);
    }

    function renderStats(s) {
      const p = s.latency || {};
      const rows = [
        ['Transport', s.transport || '—'],
        ['Command', s.command || '—', 'mono'],
        ['Generation', fmtNum(s.generation)],
        ['PID', (s.instances || []).length ? 'one per client (below)' : fmtNum(s.pid)],
        ['Uptime', fmtDuration(uptimeOf(s)), null, 'uptime'],
        ['Restarts', fmtNum(s.restarts)],
        ['Calls', fmtNum(s.calls)],
        ['Errors', fmtNum(s.errors)],
        ['In flight', fmtNum(s.in_flight)],
        ['Latency p50 / p99', `${fmtLatency(p.p50_ms)} / ${fmtLatency(p.p99_ms)}`],
        ['Start', s.lazy ? 'lazy' : 'eager'],
      ];
      for (const i of s.instances || []) {
        const parts = [`pid ${fmtNum(i.pid)}`, i.state.replace('_', ' '), `generation ${fmtNum(i.generation)}`];
        if (i.in_flight) parts.push(`${i.in_flight} in flight`);
        rows.push([`Client ${i.client}`, parts.join(' · '), 'mono instance']);
      }
      // A server of both eras: its process for the clients of 2025-11-25.
      if (s.twin) {
        rows.push(['2025-11-25 process', `pid ${fmtNum(s.twin.pid)} · ${s.twin.state.replace('_', ' ')}`, 'mono instance']);
      }
      if (detail) {
        const codes = Object.entries(detail.errors_by_code || {});
        if (codes.length) rows.push(['Errors by code', codes.map(([c, n]) => `${c}: ${n}`).join(', '), 'mono']);
        if (detail.config_file) rows.push(['Config file', detail.config_file, 'mono']);
        if (detail.env_file) rows.push(['Env file', detail.env_file, 'mono']);
      }
      clear(stats);
      for (const [k, v, cls, key] of rows) {
        stats.appendChild(h('div', { class: 'stat' + (cls ? ' ' + cls : '') },
          h('dt', { text: k }), h('dd', { text: v, 'data-stat': key || null })));
      }
    }

    // The names of one kind of its definitions that are held back, to mark
    // them where the server's lists show them as it offers them.
    function heldNames(d, kind) {
      return new Set((Array.isArray(d.quarantine) ? d.quarantine : []).filter((q) => q.kind === kind).map((q) => q.name));
    }

    function heldTag(held, n) {
      return held.has(n) ? h('span', { class: 'tag change-changed', 'data-held-tag': '', text: 'held back' }) : null;
    }

    function renderTools(tools, held) {
      toolsSec.count.textContent = ` (${tools.length})`;
      clear(toolsSec.body);
      if (!tools.length) {
        toolsSec.body.appendChild(h('p', { class: 'muted', text: 'No tools listed.' }));
        return;
      }
      toolsSec.body.appendChild(h('ul', { class: 'items' }, tools.map((t) => {
        const li = toolItem(t);
        const tag = heldTag(held, t.name);
        if (tag) li.querySelector('.item-name').appendChild(tag);
        return li;
      })));
    }

    function renderPrompts(prompts, held) {
      promptsSec.count.textContent = ` (${prompts.length})`;
      clear(promptsSec.body);
      if (!prompts.length) {
        promptsSec.body.appendChild(h('p', { class: 'muted', text: 'No prompts listed.' }));
        return;
      }
      promptsSec.body.appendChild(h('ul', { class: 'items' }, prompts.map((p) => h('li', { class: 'item' },
        h('div', { class: 'item-name' }, h('code', { text: p.name || '' }), heldTag(held, p.name)),
        p.description ? h('p', { class: 'item-desc', text: p.description }) : null,
        (p.arguments && p.arguments.length) ? argTable(p.arguments.map((a) => ({
          name: a.name, type: '', required: !!a.required, description: a.description || '',
        }))) : null))));
    }

    function renderResources(resources) {
      resourcesSec.count.textContent = ` (${resources.length})`;
      clear(resourcesSec.body);
      if (!resources.length) {
        resourcesSec.body.appendChild(h('p', { class: 'muted', text: 'No resources listed.' }));
        return;
      }
      resourcesSec.body.appendChild(h('ul', { class: 'items' }, resources.map((r) => h('li', { class: 'item' },
        h('div', { class: 'item-name' }, h('code', { text: r.uri || '' }),
          r.mimeType ? h('span', { class: 'tag', text: r.mimeType }) : null),
        r.name && r.name !== r.uri ? h('p', { class: 'item-sub', text: r.name }) : null,
        r.description ? h('p', { class: 'item-desc', text: r.description }) : null))));
    }

    // ---- held-back definitions
    // Announced through the page's live region: this one moves as the list
    // is re-drawn.
    const heldMsg = h('p', { class: 'action-msg', 'data-held-msg': '' });
    let heldKey = null;

    function heldLabel(q) {
      return { tool: 'tool', prompt: 'prompt', resourceTemplate: 'resource template' }[q.kind] || String(q.kind || 'definition');
    }

    // The definitions the gateway holds back, each with the diff of the
    // approved definition against the one offered now. Re-drawn only when
    // they change, so a refresh does not move what the person is reading.
    function renderHeld(list) {
      const key = JSON.stringify(list.map((q) => [q.kind, q.name, q.change, q.diff, q.digest]));
      if (key === heldKey) return;
      heldKey = key;
      heldSec.count.textContent = ` (${list.length})`;
      const msg = heldMsg.textContent ? heldMsg : null;
      clear(heldSec.body);
      heldSec.el.hidden = list.length === 0 && !msg;
      if (!list.length) {
        if (msg) append(heldSec.body, h('p', { class: 'muted', text: 'Nothing is held back.' }), heldMsg);
        return;
      }
      const all = h('button', { type: 'button', class: 'primary', 'data-approve-all': '', text: 'Approve all' });
      // What this page shows, each with its digest: never one that came
      // after it was drawn, nor one that changed again since.
      all.onclick = () => approve(list, all);
      append(heldSec.body,
        h('p', { class: 'held-help' },
          'These definitions changed since they were approved, or appeared after. Clients do not see them, and a call to one is refused (error ',
          h('code', { text: '-32012' }), '), until you approve them as offered now.'),
        h('div', { class: 'held-actions' }, all),
        heldMsg,
        h('ul', { class: 'items' }, list.map(heldItem)));
    }

    function heldItem(q) {
      const what = heldLabel(q);
      const btn = h('button', { type: 'button', 'data-approve': q.name, 'aria-label': `Approve ${what} ${q.name}`, text: 'Approve' });
      btn.onclick = () => approve([q], btn);
      return h('li', { class: 'item held-item', 'data-held-item': q.name, 'data-kind': q.kind, 'data-change': q.change },
        h('div', { class: 'item-name' },
          h('code', { text: q.name || '' }),
          h('span', { class: 'tag', text: what }),
          h('span', { class: 'tag change-' + (q.change === 'new' ? 'new' : 'changed'), text: q.change === 'new' ? 'new' : 'changed' }),
          q.digest ? h('code', { class: 'muted held-digest', 'data-digest': q.digest, title: 'Digest of the definition shown: Approve approves this one only', text: q.digest }) : null,
          h('span', { class: 'held-approve' }, btn)),
        diffBox(q.diff || ''));
    }

    // Approves the definitions shown (`shown`: entries of the quarantine),
    // by name and by the digest of what was shown, so that one that
    // changed again since is refused (409) instead of approved unseen.
    async function approve(shown, btn) {
      const names = [...new Set(shown.map((q) => q.name))];
      const digests = {};
      for (const q of shown) if (q.digest) (digests[q.name] = digests[q.name] || []).push(q.digest);
      const buttons = [...heldSec.body.querySelectorAll('button')];
      for (const b of buttons) b.disabled = true;
      heldMsg.className = 'action-msg';
      heldMsg.textContent = 'Approving…';
      try {
        const r = await api('POST', `/api/servers/${enc(name)}/approve`, { names, digests });
        const done = (r && r.approved) || [];
        heldMsg.textContent = done.length
          ? `Approved ${done.join(', ')}: clients see ${done.length === 1 ? 'it' : 'them'} now.`
          : 'Nothing was left to approve.';
      } catch (e) {
        // Approved or changed meanwhile (by the CLI, another page)? The
        // list is read again below either way.
        heldMsg.className = 'action-msg error';
        heldMsg.textContent = `Approve refused: ${e.message}`;
      }
      announce(heldMsg.textContent);
      heldKey = null; // re-drawn with the message even if the list is unchanged
      await load(false);
      for (const b of buttons) b.disabled = false;
      // The focus stays in the section: on the button, or once it is gone
      // on the next one, else on the heading.
      const next = btn && btn.isConnected ? btn : heldSec.body.querySelector('button:not([disabled])');
      if (next) next.focus();
      else {
        const heading = heldSec.el.querySelector('h2');
        heading.tabIndex = -1;
        heading.focus();
      }
    }

    let crashShown = null;
    function renderCrash(c) {
      // A new crash: the stderr open below is the previous one's.
      const generation = c ? c.generation : null;
      if (generation !== crashShown) {
        crashShown = generation;
        if (stderrShown) hideStderr();
      }
      clear(crashSec.body);
      if (!c) {
        crashSec.body.appendChild(h('p', { class: 'muted', text: 'No crash since the gateway started.' }));
        return;
      }
      const rows = [];
      if (c.reason) rows.push(['Reason', c.reason]);
      if (c.phase) rows.push(['Phase', c.phase]);
      if (c.exit) rows.push(['Exit', fmtExit(c.exit)]);
      if (c.generation !== undefined) rows.push(['Generation', String(c.generation)]);
      if (c.uptime_ms !== undefined) rows.push(['Uptime', fmtDuration(c.uptime_ms)]);
      if (c.at_ms) rows.push(['When', fmtTime(c.at_ms)]);
      if (c.stray_stdout) rows.push(['Stray stdout', `${c.stray_stdout.lines} lines, ${c.stray_stdout.bytes} bytes`]);
      append(crashSec.body,
        h('dl', { class: 'kv', 'data-crash': '' }, rows.map(([k, v]) => [h('dt', { text: k }), h('dd', { text: v })])),
        h('details', null, h('summary', { text: 'Full report (JSON)' }), h('pre', { class: 'json', text: JSON.stringify(c, null, 2) })));
    }

    function renderEarlier(crashes) {
      const older = (crashes || []).slice(1);
      // Re-drawn only when the kept crashes change, so that a stderr the
      // person opened stays open across refreshes.
      const key = older.map((c) => c.generation).join(',');
      if (key === earlierKey) return;
      earlierKey = key;
      clear(earlierBox);
      if (!older.length) return;
      const list = h('ol', { class: 'crashes' });
      for (const c of older) {
        const box = h('div', { class: 'earlier-stderr', hidden: true });
        const btn = h('button', { type: 'button', class: 'warn', 'aria-expanded': 'false' },
          'Show its stderr');
        btn.onclick = () => toggleEarlier(c.generation, btn, box);
        const what = [c.reason, c.exit ? fmtExit(c.exit) : null].filter(Boolean).join(' · ');
        list.appendChild(h('li', { class: 'event', 'data-earlier-crash': String(c.generation) },
          h('time', { datetime: new Date(c.at_ms || Date.now()).toISOString(), text: fmtTime(c.at_ms) }),
          h('span', { class: 'event-gen', text: `gen ${c.generation}` }),
          h('span', { class: 'event-msg', text: what }),
          h('div', { class: 'earlier-actions' }, btn, box)));
      }
      append(earlierBox, h('h3', { text: `Earlier crashes (${older.length})` }), list);
    }

    async function toggleEarlier(generation, btn, box) {
      if (!box.hidden) {
        box.hidden = true;
        clear(box);
        btn.textContent = 'Show its stderr';
        btn.setAttribute('aria-expanded', 'false');
        return;
      }
      btn.disabled = true;
      try {
        const d = await api('GET', `/api/servers/${enc(name)}/stderr?generation=${enc(String(generation))}`);
        const lines = (d && d.lines) || [];
        clear(box);
        box.appendChild(h('p', { class: 'warning', text: `${d && d.warning ? d.warning[0].toUpperCase() + d.warning.slice(1) : 'Known secrets are redacted'}.` }));
        box.appendChild(lines.length ? h('pre', { class: 'log', tabindex: '0', text: lines.join('\n') }) : h('p', { class: 'muted', text: 'No stderr lines.' }));
        box.hidden = false;
        btn.textContent = 'Hide its stderr';
        btn.setAttribute('aria-expanded', 'true');
      } catch (e) {
        clear(box).appendChild(h('p', { class: 'error', text: `Could not read stderr: ${e.message}` }));
        box.hidden = false;
      } finally {
        btn.disabled = false;
      }
    }

    function fmtExit(e) {
      if (typeof e !== 'object' || e === null) return String(e);
      if (e.code !== undefined) return `code ${e.code}`;
      if (e.signal !== undefined) return `signal ${e.signal}`;
      return JSON.stringify(e);
    }

    function addEvent(ev, fresh) {
      const info = eventKind(ev.kind);
      const li = h('li', { class: 'event', 'data-kind': ev.kind },
        h('time', { datetime: new Date(ev.at_ms || Date.now()).toISOString(), text: fmtTime(ev.at_ms) }),
        h('span', { class: 'event-kind kind-' + info.tone, text: info.label }),
        h('span', { class: 'event-msg', text: ev.message || '' }),
        ev.generation !== null && ev.generation !== undefined ? h('span', { class: 'event-gen', text: `gen ${ev.generation}` }) : null);
      eventsList.insertBefore(li, eventsList.firstChild);
      while (eventsList.children.length > 100) eventsList.removeChild(eventsList.lastChild);
      eventsSec.count.textContent = ` (${eventsList.children.length})`;
      if (fresh) li.classList.add('fresh');
    }

    function renderEvents(events) {
      clear(eventsList);
      for (const ev of events || []) addEvent(ev, false);
      eventsSec.count.textContent = ` (${eventsList.children.length})`;
      if (!eventsList.children.length) eventsSec.count.textContent = ' (0)';
    }

    // ---- secrets
    let secretKeys = null; // the keys the form was built for
    let envFile = null; // the server's env file, when it has one

    function renderSecrets(d) {
      const keys = (d.env_keys || []).map((k) => k.key);
      const sig = keys.join('\n');
      if (secretKeys === sig) {
        for (const k of d.env_keys || []) {
          const st = secretsSec.body.querySelector(`[data-secret-status="${cssEscape(k.key)}"]`);
          if (st) setSecretStatus(st, k.set);
        }
        return;
      }
      secretKeys = sig;
      envFile = d.env_file || null;
      // The message after a save (and its restart's note) stays through the
      // rebuild: saving a first key changes the keys, and the page then
      // refreshes the server.
      const after = secretsSec.body.querySelector('.secret-after');
      clear(secretsSec.body);
      secretsSec.body.appendChild(h('p', { class: 'muted' },
        'Values are written to ', d.env_file ? h('code', { text: d.env_file }) : 'an env file next to the config',
        ' (mode 0600) and read at the next start. They are never shown again.'));
      const list = h('div', { class: 'secrets' });
      for (const k of d.env_keys || []) list.appendChild(secretRow(k.key, k.set));
      if (!(d.env_keys || []).length) list.appendChild(newSecretForm());
      secretsSec.body.appendChild(list);
      secretsSec.body.appendChild(after || h('div', { class: 'secret-after', hidden: true }));
    }

    function setSecretStatus(el, set) {
      clear(el).append(icon(set ? 'check' : 'cross'), set ? 'set' : 'not set');
      el.dataset.set = set ? 'true' : 'false';
    }

    function secretRow(key, set) {
      const id = 'secret-' + key;
      const status = h('span', { class: 'secret-status', 'data-secret-status': key });
      setSecretStatus(status, set);
      const input = h('input', { type: 'password', id, name: key, autocomplete: 'new-password', spellcheck: 'false', required: true });
      const form = h('form', { class: 'secret', 'data-secret': key, novalidate: true },
        h('div', { class: 'secret-key' }, h('code', { text: key }), status),
        h('div', { class: 'inline' },
          h('label', { for: id, class: 'sr-only', text: `New value for ${key}` }),
          input,
          h('button', { type: 'submit', text: 'Save' })));
      form.addEventListener('submit', (e) => {
        e.preventDefault();
        saveSecret(key, input, form);
      });
      input.setAttribute('placeholder', set ? 'replace value' : 'value');
      return form;
    }

    function newSecretForm() {
      const keyIn = h('input', { type: 'text', id: 'secret-new-key', autocomplete: 'off', spellcheck: 'false', placeholder: 'API_KEY', pattern: '[A-Za-z_][A-Za-z0-9_]*' });
      const valIn = h('input', { type: 'password', id: 'secret-new-value', autocomplete: 'new-password' });
      const form = h('form', { class: 'secret', 'data-secret': '', novalidate: true },
        h('div', { class: 'field' }, h('label', { for: 'secret-new-key', text: 'Variable name' }), keyIn),
        h('div', { class: 'field' }, h('label', { for: 'secret-new-value', text: 'Value' }), valIn),
        h('button', { type: 'submit', text: 'Save' }));
      form.addEventListener('submit', (e) => {
        e.preventDefault();
        const key = keyIn.value.trim();
        if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(key)) {
          secretMessage(`"${key}" is not a valid variable name (letters, digits and _, not starting with a digit).`, true);
          keyIn.focus();
          return;
        }
        saveSecret(key, valIn, form);
      });
      return form;
    }

    async function saveSecret(key, input, form) {
      const value = input.value;
      if (!value) {
        secretMessage(`Type a value for ${key} first.`, true);
        input.focus();
        return;
      }
      const btn = form.querySelector('button[type=submit]');
      btn.disabled = true;
      // Without an env file, the save creates one and names it in the
      // config: a running server then restarts by itself to read it.
      const createsFile = !envFile;
      const before = processOf(store.servers.get(name));
      try {
        await api('PUT', `/api/servers/${enc(name)}/secrets/${enc(key)}`, { value });
        input.value = '';
        const st = form.querySelector('[data-secret-status]');
        if (st) setSecretStatus(st, true);
        if (!createsFile) {
          secretMessage(`${key} saved. The server reads it at its next start.`, false, true);
        } else if (before.pid === null) {
          secretMessage(`${key} saved in a new env file, which the config now names. The server reads it at its next start.`, false);
        } else {
          restartFrom = before;
          secretMessage(`${key} saved in a new env file, which the config now names: the server restarts to read it.`, false);
          restartNote(secretsSec.body.querySelector('.secret-after'));
        }
      } catch (e) {
        secretMessage(`Could not save ${key}: ${e.message}`, true);
      } finally {
        btn.disabled = false;
      }
    }

    function secretMessage(text, isError, offerRestart) {
      const box = secretsSec.body.querySelector('.secret-after');
      if (!box) return;
      clear(box);
      box.hidden = false;
      box.className = 'secret-after' + (isError ? ' error' : ' ok');
      box.setAttribute('role', isError ? 'alert' : 'status');
      box.appendChild(h('p', { text }));
      if (offerRestart) {
        box.appendChild(h('button', { type: 'button', class: 'primary', 'data-restart-now': '', text: 'Restart now', onclick: async (e) => {
          e.target.disabled = true;
          // The process to be replaced, and the note, before the request:
          // the new process may be ready before its answer arrives.
          restartFrom = processOf(store.servers.get(name));
          restartNote(clear(box));
          try {
            await api('POST', `/api/servers/${enc(name)}/restart`);
          } catch (err) {
            restartFrom = null;
            clear(box).appendChild(h('p', { text: `Restart refused: ${err.message}` }));
            box.className = 'secret-after error';
          }
        } }));
      }
    }

    // After "Restart now", or a save that restarts the server: the process
    // it restarts from, until another one is ready (then the note says so).
    let restartFrom = null;

    function processOf(s) {
      return { generation: s ? s.generation ?? null : null, pid: s ? s.pid ?? null : null };
    }

    // Adds the note a restart is followed in, and follows it from the
    // server's state now (it may have restarted already).
    function restartNote(box) {
      box.appendChild(h('p', { 'data-restart-note': '', text: 'Restarting with the new value…' }));
      const now = store.servers.get(name);
      if (now) followRestart(now);
    }

    function followRestart(s) {
      if (restartFrom === null || s.state !== 'ready') return;
      if (s.generation === restartFrom.generation && s.pid === restartFrom.pid) return;
      const note = secretsSec.body.querySelector('[data-restart-note]');
      if (!note) return;
      restartFrom = null;
      note.textContent = `Restarted: generation ${s.generation} runs with the new value.`;
    }

    // ---- actions
    async function act(action) {
      const label = { restart: 'Restart', reload: 'Reload', stop: 'Stop', start: 'Start', enable: 'Enable', disable: 'Disable' }[action] || action;
      actionMsg.className = 'action-msg';
      actionMsg.textContent = `${label}: sent…`;
      try {
        await api('POST', `/api/servers/${enc(name)}/${action}`);
        actionMsg.textContent = `${label}: accepted.`;
      } catch (e) {
        actionMsg.className = 'action-msg error';
        actionMsg.textContent = `${label} refused: ${e.message}`;
      }
    }

    function hideStderr() {
      stderrShown = false;
      stderrBox.hidden = true;
      clear(stderrBox);
      stderrBtn.textContent = 'Show stderr';
      stderrBtn.setAttribute('aria-expanded', 'false');
    }

    async function toggleStderr() {
      if (stderrShown) {
        hideStderr();
        return;
      }
      stderrBtn.disabled = true;
      try {
        const d = await api('GET', `/api/servers/${enc(name)}/stderr`);
        const lines = (d && d.lines) || [];
        clear(stderrBox);
        stderrBox.appendChild(h('p', { class: 'warning', text: `${d && d.warning ? d.warning[0].toUpperCase() + d.warning.slice(1) : 'Known secrets are redacted'}.` }));
        stderrBox.appendChild(lines.length ? h('pre', { class: 'log', tabindex: '0', text: lines.join('\n') }) : h('p', { class: 'muted', text: 'No stderr lines.' }));
        stderrBox.hidden = false;
        stderrShown = true;
        stderrBtn.textContent = 'Hide stderr';
        stderrBtn.setAttribute('aria-expanded', 'true');
      } catch (e) {
        clear(stderrBox).appendChild(h('p', { class: 'error', text: `Could not read stderr: ${e.message}` }));
        stderrBox.hidden = false;
      } finally {
        stderrBtn.disabled = false;
      }
    }

    // ---- loading
    async function load(first) {
      try {
        const d = await api('GET', `/api/servers/${enc(name)}`);
        if (disposed) return;
        detail = d;
        const live = store.servers.get(name);
        renderHead(live || d);
        renderHeld(Array.isArray(d.quarantine) ? d.quarantine : []);
        renderTools(d.tools || [], heldNames(d, 'tool'));
        renderPrompts(d.prompts || [], heldNames(d, 'prompt'));
        renderResources(d.resources || []);
        renderCrash(d.last_crash);
        renderEarlier(d.crashes);
        renderSecrets(d);
        if (first) renderEvents(d.events);
      } catch (e) {
        if (disposed) return;
        if (e.status === 404) {
          clear(main);
          append(main, h('div', { class: 'page-head' }, h('h1', { text: name })),
            h('p', { class: 'empty', text: `There is no server named "${name}".` }),
            h('p', null, h('a', { href: '#/', text: 'Back to the servers' })));
          focusHeading(main);
          view = { kind: 'missing' };
        } else {
          actionMsg.className = 'action-msg error';
          actionMsg.textContent = `Could not load this server: ${e.message}`;
        }
      }
    }

    // Coalesces the refetches a burst of events asks for; `withEvents` also
    // replaces the events list (after a fresh snapshot, events may have
    // been missed).
    let refreshEvents = false;
    function scheduleRefresh(withEvents) {
      refreshEvents = refreshEvents || !!withEvents;
      clearTimeout(refreshTimer);
      refreshTimer = setTimeout(() => {
        const all = refreshEvents;
        refreshEvents = false;
        load(all);
      }, 250);
    }

    const live = store.servers.get(name);
    if (live) renderHead(live);
    load(true);

    return {
      kind: 'server',
      onSnapshot() {
        const s = store.servers.get(name);
        if (s) { renderHead(s); scheduleRefresh(true); }
      },
      onServer(s, old) {
        if (s.name !== name) return;
        renderHead(s);
        followRestart(s);
        if (!old || old.state !== s.state || old.generation !== s.generation ||
            (old.quarantined || 0) !== (s.quarantined || 0)) scheduleRefresh();
      },
      onEvent(server, ev) {
        if (server !== name || !ev) return;
        addEvent(ev, true);
        if (REFRESH_KINDS.has(ev.kind)) scheduleRefresh();
      },
      onRemoved(server) {
        if (server !== name) return;
        actionMsg.className = 'action-msg error';
        actionMsg.textContent = 'This server was removed from the configuration.';
      },
      tick() {
        const s = store.servers.get(name);
        if (!s) return;
        const up = stats.querySelector('[data-stat="uptime"]');
        if (up) up.textContent = fmtDuration(uptimeOf(s));
        const cd = countdownOf(s);
        if (cd) headDetail.textContent = [s.detail, cd].filter(Boolean).join(' · ');
      },
      dispose() { disposed = true; clearTimeout(refreshTimer); },
    };
  }

  function eventKind(kind) {
    const tones = {
      ready: 'good', recovered: 'good', authorized: 'good', started: 'good', enabled: 'good', added: 'good', approved: 'good',
      exited: 'bad', failed: 'bad',
      restarting: 'warn', auth_pending: 'warn', reloading: 'warn', warning: 'warn', quarantined: 'warn',
    };
    return { label: String(kind || '').replace(/_/g, ' '), tone: tones[kind] || 'neutral' };
  }

  // A definition's diff, as `tools diff` prints it: a line starting with
  // "-" is the approved definition's, "+" the offered one's, " " both's.
  // Every line is text (a description may hold markup), in <del>/<ins> so
  // that it reads as removed or added without its colour too.
  function diffBox(text) {
    const lines = String(text).split('\n');
    if (lines.length && lines[lines.length - 1] === '') lines.pop();
    const pre = h('pre', { class: 'diff', tabindex: '0', 'aria-label': 'approved (−) against offered (+)' });
    for (const line of lines) {
      const tag = line.startsWith('+') ? 'ins' : line.startsWith('-') ? 'del' : 'span';
      pre.appendChild(h(tag, { class: 'diff-line', text: line }));
    }
    return pre;
  }

  function cssEscape(s) {
    return window.CSS && CSS.escape ? CSS.escape(s) : String(s).replace(/["\\]/g, '\\$&');
  }

  function argTable(args) {
    const typed = args.some((a) => a.type);
    const heads = typed ? ['Argument', 'Type', 'Description'] : ['Argument', 'Description'];
    return h('table', { class: 'args' + (typed ? ' typed' : '') },
      h('thead', null, h('tr', null, heads.map((t) => h('th', { scope: 'col', text: t })))),
      h('tbody', null, args.map((a) => h('tr', null,
        h('td', null, h('code', { text: a.name }), a.required ? h('span', { class: 'req', text: ' required' }) : null),
        typed ? h('td', { class: 'arg-type', text: a.type || '' }) : null,
        h('td', { text: a.description || '' })))));
  }

  function schemaArgs(schema) {
    const props = (schema && schema.properties) || {};
    const required = new Set((schema && schema.required) || []);
    return Object.entries(props).map(([n, p]) => ({
      name: n,
      type: typeOf(p),
      required: required.has(n),
      description: (p && p.description) || '',
    }));
  }

  function typeOf(p) {
    if (!p || typeof p !== 'object') return '';
    if (Array.isArray(p.type)) return p.type.join(' | ');
    if (p.type === 'array' && p.items && p.items.type) return `${p.items.type}[]`;
    if (p.enum) return p.enum.map((v) => JSON.stringify(v)).join(' | ');
    return p.type || (p.anyOf ? 'any of ' + p.anyOf.length : '');
  }

  function toolItem(t) {
    const args = schemaArgs(t.inputSchema);
    return h('li', { class: 'item', 'data-tool': t.name || '' },
      h('div', { class: 'item-name' }, h('code', { text: t.name || '' }), t.title ? h('span', { class: 'item-sub', text: t.title }) : null),
      t.description ? h('p', { class: 'item-desc', text: t.description }) : null,
      args.length ? argTable(args) : h('p', { class: 'muted small', text: 'No arguments.' }));
  }

  // ---- the add-server wizard -----------------------------------------------

  function addView(main) {
    document.title = 'Add a server · mcpvisor';
    let job = null; // the last inspect job object
    let jobId = null;
    let pollTimer = null;
    let disposed = false;
    let started = 0;

    const source = h('textarea', {
      id: 'add-source', rows: 5, spellcheck: 'false', autocomplete: 'off', required: true,
      placeholder: 'npx -y @modelcontextprotocol/server-everything',
      'aria-describedby': 'add-source-help',
    });
    const inspectBtn = h('button', { type: 'submit', class: 'primary', text: 'Inspect' });
    const formMsg = h('p', { class: 'form-msg', role: 'alert' });
    const progress = h('ol', { class: 'progress', 'aria-live': 'polite' });
    const progressState = h('p', { class: 'progress-state', role: 'status' });
    const progressCard = h('section', { class: 'card', hidden: true, 'aria-labelledby': 'add-progress-h' },
      h('h2', { id: 'add-progress-h', text: 'Inspecting' }), progressState, progress);
    const result = h('div', { class: 'result' });

    const form = h('form', { class: 'card add-form', novalidate: true },
      h('div', { class: 'field' },
        h('label', { for: 'add-source', text: 'Command line, or a JSON or TOML server entry' }),
        source,
        h('p', { id: 'add-source-help', class: 'help' },
          'For example ', h('code', { text: 'uvx mcp-server-fetch' }), ', ',
          h('code', { text: '{"command":"node","args":["server.js"]}' }), ', a ',
          h('code', { text: '{"mcpServers":{…}}' }), ' snippet, or a ',
          h('code', { text: '[mcp_servers.name]' }), ' TOML table. ',
          'mcpvisor starts it once, lists its tools and stops it; nothing is saved until you press Save.')),
      h('div', { class: 'form-actions' }, inspectBtn),
      formMsg);
    form.addEventListener('submit', (e) => { e.preventDefault(); startInspect(); });

    append(main,
      h('div', { class: 'page-head' }, h('h1', { text: 'Add a server' })),
      form, progressCard, result);
    focusHeading(main);
    if (routed) source.focus();

    async function startInspect() {
      const text = source.value.trim();
      formMsg.textContent = '';
      if (!text) {
        formMsg.textContent = 'Paste a command line or a server entry first.';
        source.focus();
        return;
      }
      inspectBtn.disabled = true;
      clear(result);
      clear(progress);
      job = null;
      try {
        const r = await api('POST', '/api/inspect', { source: text });
        jobId = r.job;
        started = Date.now();
        progressCard.hidden = false;
        progressState.textContent = 'Starting it…';
        poll();
      } catch (e) {
        formMsg.textContent = e.message;
        inspectBtn.disabled = false;
        source.focus();
      }
    }

    async function poll() {
      clearTimeout(pollTimer);
      if (disposed || !jobId) return;
      try {
        const j = await api('GET', `/api/inspect/${enc(jobId)}`);
        onJob(j);
      } catch (e) {
        if (e.status === 404) {
          progressState.textContent = 'This inspection is gone (mcpvisor restarted?). Inspect again.';
          inspectBtn.disabled = false;
          jobId = null;
          return;
        }
        progressState.textContent = `Waiting for mcpvisor: ${e.message}`;
      }
      if (!disposed && jobId && (!job || job.state === 'running')) {
        // Events carry progress as it happens; polling covers a lost stream.
        pollTimer = setTimeout(poll, Date.now() - started < 5000 ? 400 : 1000);
      }
    }

    function onJob(j) {
      if (!j || j.job !== jobId) return;
      if (job && job.state !== 'running' && j.state === 'running') return;
      const wasDone = job && job.state !== 'running';
      job = j;
      clear(progress);
      for (const line of j.progress || []) progress.appendChild(h('li', { text: line }));
      const secs = ((j.elapsed_ms || 0) / 1000).toFixed(1);
      if (j.state === 'running') {
        progressState.textContent = `Running… ${secs}s`;
        return;
      }
      clearTimeout(pollTimer);
      inspectBtn.disabled = false;
      if (wasDone) return;
      progressState.textContent = j.state === 'done' ? `Done in ${secs}s.` : `Failed after ${secs}s.`;
      renderResult(j);
    }

    function renderResult(j) {
      clear(result);
      const failed = j.state !== 'done';
      const tools = j.tools || [];
      const entry = j.entry || {};

      const nameIn = h('input', { type: 'text', id: 'add-name', required: true, autocomplete: 'off', spellcheck: 'false', value: j.suggested_name || '' });
      const keysBox = h('div', { class: 'keys' });
      const addKey = (k) => {
        const n = keysBox.children.length;
        const id = `add-key-${n}-${Math.random().toString(36).slice(2, 7)}`;
        const input = h('input', { type: 'text', id, class: 'env-key', autocomplete: 'off', spellcheck: 'false', value: k || '', placeholder: 'API_KEY' });
        const row = h('div', { class: 'inline key-row' },
          h('label', { for: id, class: 'sr-only', text: `Environment key ${n + 1}` }), input,
          h('button', { type: 'button', class: 'ghost', 'aria-label': `Remove key ${n + 1}`, text: 'Remove', onclick: () => { row.remove(); } }));
        keysBox.appendChild(row);
        return input;
      };
      for (const k of entry.env_keys || []) addKey(k);

      const toolBoxes = tools.map((t, i) => {
        const id = `add-tool-${i}`;
        const cb = h('input', { type: 'checkbox', id, checked: true, value: t.name, 'data-tool-filter': t.name });
        return h('li', { class: 'check-item' }, cb,
          h('label', { for: id }, h('code', { text: t.name }), t.description ? h('span', { class: 'item-desc', text: ' ' + firstLine(t.description) }) : null));
      });

      const saveMsg = h('p', { class: 'form-msg', role: 'alert' });
      const saveBtn = h('button', { type: 'submit', class: 'primary', text: failed ? 'Save anyway…' : 'Save' });
      const confirmBox = h('div', { class: 'confirm', hidden: true, role: 'group', 'aria-label': 'Confirm saving a server that failed' },
        h('p', { text: 'It did not start cleanly. Save it to the config anyway? The gateway will keep trying to start it.' }),
        h('button', { type: 'button', class: 'danger', 'data-confirm': '', text: 'Yes, save anyway', onclick: () => save(true) }),
        h('button', { type: 'button', class: 'ghost', text: 'Cancel', onclick: () => { confirmBox.hidden = true; saveBtn.focus(); } }));

      const saveForm = h('form', { class: 'card save-form', novalidate: true },
        h('h2', { text: failed ? 'It did not start' : 'Save it' }),
        failed ? reportBox(j.report) : null,
        !failed ? h('p', { class: 'muted', text: `Answered with ${tools.length} tool${tools.length === 1 ? '' : 's'}.` }) : null,
        Array.isArray(entry.env) && entry.env.length ? h('p', { class: 'help' },
          'Environment given in the source (saved in the config entry as written): ',
          entry.env.map((k, i) => [i ? ', ' : '', h('code', { text: String(k) })]), '.') : null,
        h('div', { class: 'field' }, h('label', { for: 'add-name', text: 'Name' }), nameIn,
          h('p', { class: 'help', text: 'Its tools appear to clients with this name as prefix.' })),
        h('fieldset', null, h('legend', { text: 'Secret environment keys' }),
          h('p', { class: 'help', text: 'Names only; set their values on the server\'s page after saving.' }),
          keysBox,
          h('button', { type: 'button', class: 'ghost', text: '+ Add key', onclick: () => addKey('').focus() })),
        tools.length ? h('fieldset', { class: 'tool-filter' }, h('legend', { text: 'Tools to offer' }),
          h('div', { class: 'inline' },
            h('button', { type: 'button', class: 'ghost', text: 'All', onclick: () => toolBoxes.forEach((li) => { li.querySelector('input').checked = true; }) }),
            h('button', { type: 'button', class: 'ghost', text: 'None', onclick: () => toolBoxes.forEach((li) => { li.querySelector('input').checked = false; }) })),
          h('ul', { class: 'checks' }, toolBoxes)) : null,
        h('div', { class: 'form-actions' }, saveBtn),
        confirmBox,
        saveMsg);
      saveForm.addEventListener('submit', (e) => {
        e.preventDefault();
        if (failed) {
          confirmBox.hidden = false;
          confirmBox.querySelector('[data-confirm]').focus();
        } else {
          save(false);
        }
      });
      result.appendChild(saveForm);
      if (tools.length) {
        result.appendChild(h('section', { class: 'card', 'aria-labelledby': 'add-tools-h' },
          h('h2', { id: 'add-tools-h' }, 'Tools', h('span', { class: 'count', text: ` (${tools.length})` })),
          h('ul', { class: 'items' }, tools.map(toolItem))));
      }
      nameIn.focus();

      async function save(force) {
        formMsgClear();
        const name = nameIn.value.trim();
        if (!name) {
          saveMsg.textContent = 'Give it a name.';
          nameIn.focus();
          return;
        }
        const keys = [...keysBox.querySelectorAll('input.env-key')].map((i) => i.value.trim()).filter(Boolean);
        const bad = keys.find((k) => !/^[A-Za-z_][A-Za-z0-9_]*$/.test(k));
        if (bad) {
          saveMsg.textContent = `"${bad}" is not a valid variable name.`;
          return;
        }
        let filter = null;
        if (toolBoxes.length) {
          const allow = toolBoxes.map((li) => li.querySelector('input')).filter((cb) => cb.checked).map((cb) => cb.value);
          if (allow.length === 0) {
            saveMsg.textContent = 'Choose at least one tool, or all of them.';
            return;
          }
          if (allow.length < toolBoxes.length) filter = { allow };
        }
        saveBtn.disabled = true;
        try {
          const r = await api('POST', '/api/servers', { job: jobId, name, env_keys: keys, tools: filter, force: !!force });
          announce(`${r.name || name} added`);
          location.hash = '#/server/' + enc(r.name || name);
        } catch (e) {
          saveMsg.textContent = e.message;
          saveBtn.disabled = false;
          if (e.status === 409 || e.status === 400) nameIn.focus();
        }
      }

      function formMsgClear() { saveMsg.textContent = ''; }
    }

    function reportBox(report) {
      if (!report) return h('p', { class: 'error', text: 'It failed without a report.' });
      const rows = [];
      if (report.reason) rows.push(['Reason', report.reason]);
      if (report.phase) rows.push(['Phase', report.phase]);
      if (report.exit) rows.push(['Exit', report.exit.code !== undefined ? `code ${report.exit.code}` : report.exit.signal !== undefined ? `signal ${report.exit.signal}` : JSON.stringify(report.exit)]);
      return h('div', { class: 'report', 'data-report': '' },
        h('dl', { class: 'kv' }, rows.map(([k, v]) => [h('dt', { text: k }), h('dd', { text: v })])),
        h('details', null, h('summary', { text: 'Full report (with stderr)' }), h('pre', { class: 'json', text: JSON.stringify(report, null, 2) })));
    }

    return {
      kind: 'add',
      onInspect(j) { if (jobId && j.job === jobId) onJob(j); },
      dispose() { disposed = true; clearTimeout(pollTimer); },
    };
  }

  function firstLine(s) {
    const line = String(s).split('\n')[0];
    return line.length > 120 ? line.slice(0, 117) + '…' : line;
  }

  // ---- start ---------------------------------------------------------------

  window.addEventListener('hashchange', () => { routed = true; route(); });
  setInterval(() => { if (view && view.tick) view.tick(); }, 1000);
  route();
  connect();
})();
