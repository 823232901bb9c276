// The cellgate chat page: a transcript of code cells run in one sandboxed
// session, with their outputs (text, coloured tracebacks, plots, tables,
// Markdown, JSON), a workspace file panel, uploads by picker or drag and
// drop, interrupt / restart / new-session buttons, and the session's network:
// an allow list for new sessions (none by default) and its connection log.
//
// Security model (see README.md here): the token lives in sessionStorage and
// in this module only, and goes out as an Authorization header; kernel output
// is never turned into HTML in this page (render.js builds DOM nodes), HTML
// outputs live in sandboxed iframes with an opaque origin, and downloads are
// fetched with the header and handed to the browser as opaque blobs.

import { Cellgate, CellgateError, SessionNotFound } from './cellgate.js';
import { el, ansiToNodes, terminalText, renderBundle, listenForFrameHeights } from './render.js';

const TOKEN_KEY = 'cellgate.token';
const SESSION_KEY = 'cellgate.session';
const NETWORK_KEY = 'cellgate.network';
const NETWORK_ROWS = 100;

/** @param {string} id @returns {any} */
const $ = (id) => document.querySelector(`[data-testid="${id}"]`);

const ui = {
  status: $('status'),
  sessionId: $('session-id'),
  newSession: $('new-session'),
  template: /** @type {HTMLSelectElement} */ ($('template')),
  interrupt: $('interrupt'),
  restart: $('restart'),
  fork: $('fork'),
  toggleFiles: $('toggle-files'),
  forget: $('forget-token'),
  login: $('login'),
  tokenForm: $('token-form'),
  tokenInput: $('token-input'),
  loginError: $('login-error'),
  app: $('app'),
  transcript: $('transcript'),
  emptyHint: $('empty-hint'),
  composer: $('composer'),
  code: $('code-input'),
  run: $('run'),
  files: $('file-panel'),
  fileList: $('file-list'),
  crumbs: $('file-crumbs'),
  fileInput: $('file-input'),
  filesNote: $('files-note'),
  filesRefresh: $('files-refresh'),
  filesClose: $('files-close'),
  dropzone: $('dropzone'),
  network: $('network-panel'),
  networkSummary: $('network-summary'),
  networkState: $('network-state'),
  networkAllow: $('network-allow'),
  networkApply: $('network-apply'),
  networkRefresh: $('network-refresh'),
  networkNote: $('network-note'),
  networkLog: $('network-log'),
  actions: /** @type {HTMLElement} */ (document.querySelector('.actions')),
};

const state = {
  /** @type {Cellgate|null} */ client: null,
  /** @type {import('./cellgate.js').Session|null} */ session: null,
  outputScripts: false,
  running: 0,
  starting: false,
  restarting: false,
  forking: false,
  ended: false,
  /** @type {Set<AbortController>} */ controllers: new Set(),
  cwd: '',
  filesSeq: 0,
  /** @type {import('./cellgate.js').NetworkPolicy|null} the session's, once asked */ network: null,
  /** @type {import('./cellgate.js').NetworkConnection[]} newest last, at most NETWORK_ROWS */ connections: [],
  networkAfter: 0,
  networkSeq: 0,
};

// ---------------------------------------------------------------- status

function setStatus() {
  let s = 'offline';
  if (state.starting) s = 'starting';
  else if (state.restarting) s = 'restarting';
  else if (state.session) s = state.running > 0 ? 'busy' : 'idle';
  else if (state.client && state.ended) s = 'ended';
  ui.status.textContent = s;
  ui.status.dataset.state = s;
  const ready = !!state.session && !state.starting;
  ui.run.disabled = !ready;
  ui.newSession.disabled = !state.client || state.starting;
  ui.restart.disabled = !ready || state.restarting;
  ui.fork.disabled = !ready || state.restarting || state.forking;
  ui.interrupt.disabled = !ready || state.running === 0;
  ui.networkApply.disabled = !state.client || state.starting;
  ui.networkApply.textContent = state.network && state.network.enabled ? 'Apply to this session' : 'Start a new session with it';
  ui.sessionId.textContent = state.session ? state.session.id.slice(0, 8) : '';
  ui.sessionId.title = state.session ? `Session ${state.session.id}` : '';
  document.body.classList.toggle('busy', s === 'busy');
}

function showLogin(message = '') {
  ui.app.hidden = true;
  ui.login.hidden = false;
  ui.actions.hidden = true;
  ui.forget.hidden = true;
  ui.loginError.textContent = message;
  ui.tokenInput.value = '';
  ui.tokenInput.focus();
  state.client = null;
  state.session = null;
  setStatus();
}

function showApp() {
  ui.login.hidden = true;
  ui.app.hidden = false;
  ui.actions.hidden = false;
  ui.forget.hidden = false;
  setStatus();
  ui.code.focus();
}

/** Describes an error for the user (text only). @param {unknown} e */
function describe(e) {
  if (e instanceof CellgateError) return `${e.status ? e.status + ' ' : ''}${e.reason}: ${e.message}`;
  if (e && typeof e === 'object' && 'message' in e) return String(/** @type {any} */ (e).message);
  return String(e);
}

/** A 401/403 means the token is wrong or was revoked: ask again. @param {unknown} e */
function authFailed(e) {
  if (e instanceof CellgateError && (e.status === 401 || e.status === 403) && /token|auth/i.test(`${e.reason} ${e.message}`)) {
    sessionStorage.removeItem(TOKEN_KEY);
    abortAll();
    showLogin('The token was refused. Enter it again.');
    return true;
  }
  return false;
}

/** The session was deleted, culled for idleness or reached its lifetime. */
function sessionEnded() {
  if (!state.session) return;
  abortAll();
  state.session = null;
  state.running = 0;
  state.ended = true;
  sessionStorage.removeItem(SESSION_KEY);
  note('This session has ended (deleted, idle for too long, or past its lifetime). Start a new session to go on.', 'warn');
  setStatus();
  refreshFiles();
  refreshNetwork();
}

/** Handles the errors every action shares; false if it is not one of them. @param {unknown} e */
function commonFailure(e) {
  if (authFailed(e)) return true;
  if (e instanceof SessionNotFound) { sessionEnded(); return true; }
  return false;
}

function abortAll() {
  for (const c of state.controllers) c.abort();
  state.controllers.clear();
}

// ---------------------------------------------------------------- sessions

/** Checks a token and opens (or re-attaches to) a session. @param {string} token */
async function connect(token) {
  const client = new Cellgate({ url: '', token });
  state.starting = true;
  setStatus();
  try {
    await client.listSessions();  // 401/403 here: a bad token
  } catch (e) {
    state.starting = false;
    if (e instanceof CellgateError && (e.status === 401 || e.status === 403)) {
      sessionStorage.removeItem(TOKEN_KEY);
      showLogin('That token was refused by the gateway.');
    } else {
      showLogin(`Cannot reach the gateway: ${describe(e)}`);
    }
    return;
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  state.client = client;
  showApp();
  await refreshTemplates();
  // A tab the Fork button opened names its session in the URL's fragment
  // (never sent to the server); the fragment is dropped once read.
  const named = new URLSearchParams(location.hash.slice(1)).get('session');
  if (named) {
    sessionStorage.setItem(SESSION_KEY, named);
    history.replaceState(null, '', location.pathname + location.search);
  }
  const previous = sessionStorage.getItem(SESSION_KEY);
  if (previous) {
    try {
      state.session = await client.connect(previous);
      state.starting = false;
      note(`Re-attached to session ${state.session.id}. Variables and files are as you left them; earlier output is not kept across page loads.`);
      setStatus();
      refreshFiles();
      refreshNetwork();
      return;
    } catch (e) {
      if (!(e instanceof SessionNotFound)) note(`Could not re-attach to the previous session: ${describe(e)}`, 'warn');
      sessionStorage.removeItem(SESSION_KEY);
    }
  }
  await startSession();
}

/** Fills the environment picker with the caller's templates (ready ones), keeping the choice. */
async function refreshTemplates() {
  if (!state.client) return;
  let templates = [];
  try {
    templates = (await state.client.listTemplates()).filter((t) => t.reference);
  } catch (e) {
    if (!authFailed(e)) note(`Could not list your templates: ${describe(e)}`, 'warn');
    return;
  }
  const chosen = ui.template.value;
  ui.template.replaceChildren(new Option('Python (built-in)', ''));
  for (const t of templates.sort((a, b) => String(a.reference).localeCompare(String(b.reference)))) {
    ui.template.appendChild(new Option(String(t.reference), String(t.reference)));
  }
  ui.template.value = templates.some((t) => t.reference === chosen) ? chosen : '';
}

async function startSession() {
  if (!state.client) return;
  state.starting = true;
  state.ended = false;
  setStatus();
  const allow = allowEntries();
  /** @type {Record<string, any>} */
  const opts = allow.length ? { network: { allow } } : {};
  if (ui.template.value) opts.template = ui.template.value;
  try {
    state.session = await state.client.createSession(opts);
    sessionStorage.setItem(SESSION_KEY, state.session.id);
  } catch (e) {
    if (!authFailed(e)) {
      const fix = allow.length && e instanceof CellgateError && e.status === 400 ? ' Correct the Network list and start a new session.' : '';
      note(`Could not start a session: ${describe(e)}${fix}`, 'error');
      if (fix) ui.network.open = true;
    }
    state.session = null;
  } finally {
    state.starting = false;
    setStatus();
  }
  state.cwd = '';
  refreshFiles();
  refreshNetwork();
}

async function newSession() {
  const old = state.session;
  abortAll();
  state.session = null;
  state.running = 0;
  sessionStorage.removeItem(SESSION_KEY);
  clearTranscript();
  if (old) old.close().catch(() => {});  // in the background; the new one starts now
  await startSession();
  if (state.session) note(`New session ${state.session.id}${ui.template.value ? ` on ${ui.template.value}` : ''}.`);
  refreshTemplates();
}

async function restartKernel() {
  const s = state.session;
  if (!s) return;
  state.restarting = true;
  setStatus();
  try {
    await s.restart();
    note('Kernel restarted: variables are cleared, files stay.');
  } catch (e) {
    if (!commonFailure(e)) note(`Restart failed: ${describe(e)}`, 'error');
  } finally {
    state.restarting = false;
    setStatus();
  }
}

/** Copies the session's files into a new session and opens it in a new tab. */
async function forkSession() {
  const s = state.session;
  if (!s || !state.client) return;
  state.forking = true;
  setStatus();
  // Opened now, while the click still counts as the user's: a popup opened
  // after the fork's await would be blocked.
  const tab = window.open('', '_blank');
  try {
    const { snapshot, sessions } = await s.fork({ count: 1 });
    const child = sessions[0];
    // The page keeps no snapshots: the child has its own copy already.
    state.client.deleteSnapshot(snapshot).catch(() => {});
    const where = `${location.pathname}#session=${encodeURIComponent(child.id)}`;
    if (tab) tab.location.href = where;
    else window.open(where, '_blank');
    note(`Forked into session ${child.id}, opened in a new tab: its files are a copy of this session's; its variables start empty.`);
  } catch (e) {
    if (tab) tab.close();
    if (!commonFailure(e)) note(`Fork failed: ${describe(e)}`, 'error');
  } finally {
    state.forking = false;
    setStatus();
  }
}

async function interruptKernel() {
  const s = state.session;
  if (!s) return;
  ui.interrupt.disabled = true;
  try {
    await s.interrupt();
  } catch (e) {
    if (!commonFailure(e)) note(`Interrupt failed: ${describe(e)}`, 'error');
  } finally {
    setStatus();
  }
}

// ---------------------------------------------------------------- transcript

function nearBottom() {
  const t = ui.transcript;
  return t.scrollHeight - t.scrollTop - t.clientHeight < 80;
}

function scrollDown(force = false) {
  if (force || nearBottom()) ui.transcript.scrollTop = ui.transcript.scrollHeight;
}

function clearTranscript() {
  for (const n of [...ui.transcript.children]) if (n !== ui.emptyHint) n.remove();
  ui.emptyHint.hidden = false;
}

/** A line from the page itself (not the kernel). @param {string} text @param {'info'|'warn'|'error'} [kind] */
function note(text, kind = 'info') {
  const stick = nearBottom();
  const n = el('div', `note note-${kind}`, text);
  n.dataset.testid = 'note';
  n.setAttribute('role', kind === 'error' ? 'alert' : 'status');
  ui.transcript.appendChild(n);
  scrollDown(stick);
}

/** A <button type="button">. @param {string} cls @param {string} text @returns {HTMLButtonElement} */
function button(cls, text) {
  const b = /** @type {HTMLButtonElement} */ (el('button', cls, text));
  b.type = 'button';
  return b;
}

/** @param {number} n */
function formatBytes(n) {
  if (n == null || !Number.isFinite(n)) return '';
  if (n < 1024) return `${n} B`;
  const units = ['KB', 'MB', 'GB', 'TB'];
  let v = n / 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return `${v < 10 ? v.toFixed(1) : Math.round(v)} ${units[i]}`;
}

/** @param {string} path */
function basename(path) {
  const parts = String(path).split('/');
  return parts[parts.length - 1] || 'download';
}

/** A turn: the code as sent, its outputs as they stream in, then a footer. */
class Turn {
  /** @param {string} code */
  constructor(code) {
    this.code = code;
    this.root = el('article', 'turn');
    this.root.dataset.testid = 'turn';
    this.root.dataset.status = 'running';
    const head = el('div', 'turn-head');
    this.prompt = el('span', 'prompt', 'In [*]');
    this.prompt.dataset.testid = 'turn-prompt';
    const edit = button('quiet small', 'Edit');
    edit.title = 'Copy this code into the editor';
    edit.dataset.testid = 'turn-edit';
    edit.addEventListener('click', () => {
      ui.code.value = this.code;
      ui.code.focus();
    });
    head.append(this.prompt, edit);
    const input = el('pre', 'turn-code', code);
    input.dataset.testid = 'turn-code';
    this.outputs = el('div', 'outputs');
    this.outputs.dataset.testid = 'outputs';
    this.footer = el('div', 'turn-footer');
    this.statusBadge = el('span', 'badge badge-running', 'running…');
    this.statusBadge.dataset.testid = 'turn-status';
    this.footer.appendChild(this.statusBadge);
    this.root.append(head, input, this.outputs, this.footer);
    /** @type {{kind: string, node: HTMLElement, raw: string, shown: number, plain: boolean, pending: boolean}|null} */
    this.stream = null;
    this.events = 0;
  }

  /** Appends stream text; consecutive chunks of one stream share a block. @param {'stdout'|'stderr'} kind @param {string} text */
  streamText(kind, text) {
    this.events++;
    if (!this.stream || this.stream.kind !== kind || this.outputs.lastChild !== this.stream.node) {
      this.flush();
      const node = el('pre', `out-stream out-${kind}`);
      node.dataset.testid = kind;
      this.outputs.appendChild(node);
      this.stream = { kind, node, raw: '', shown: 0, plain: true, pending: false };
    }
    const s = this.stream;
    s.raw += text;
    if (s.pending) return;
    s.pending = true;
    // Coalesce fast streams into one render per frame.
    requestAnimationFrame(() => this.flush(s));
  }

  /** Renders a stream block's pending text now. */
  flush(s = this.stream) {
    if (!s || !s.pending) return;
    s.pending = false;
    const stick = nearBottom();
    const fresh = s.raw.slice(s.shown);
    // Plain text (no escapes, carriage returns or backspaces so far) is
    // appended; anything else is rendered again as a whole.
    s.plain = s.plain && !/[\x1b\r\x08]/.test(fresh);
    if (s.plain) s.node.appendChild(document.createTextNode(fresh));
    else s.node.replaceChildren(ansiToNodes(terminalText(s.raw)));
    s.shown = s.raw.length;
    scrollDown(stick);
  }

  /** @param {any} payload @param {boolean} isResult */
  rich(payload, isResult) {
    this.events++;
    this.flush();
    const stick = nearBottom();
    const box = el('div', isResult ? 'out-rich out-result' : 'out-rich');
    box.dataset.testid = isResult ? 'result' : 'display';
    if (isResult && payload.execution_count != null) {
      const label = el('span', 'out-prompt', `Out [${Number(payload.execution_count) || ''}]`);
      box.appendChild(label);
    }
    box.appendChild(renderBundle(payload.data, payload.metadata, { scripts: state.outputScripts }));
    this.outputs.appendChild(box);
    this.stream = null;
    scrollDown(stick);
  }

  /** @param {any} err */
  error(err) {
    this.events++;
    this.flush();
    const stick = nearBottom();
    const box = el('div', 'out-error');
    box.dataset.testid = 'error';
    const title = el('div', 'error-title');
    title.append(el('strong', 'ename', String(err.ename ?? 'Error')), document.createTextNode(': '),
      el('span', 'evalue', String(err.evalue ?? '')));
    const tb = el('pre', 'traceback');
    tb.dataset.testid = 'traceback';
    const lines = Array.isArray(err.traceback) && err.traceback.length ? err.traceback.map(String).join('\n')
      : `${err.ename ?? 'Error'}: ${err.evalue ?? ''}`;
    tb.appendChild(ansiToNodes(lines));
    box.append(title, tb);
    this.outputs.appendChild(box);
    this.stream = null;
    scrollDown(stick);
  }

  /** Renders a whole result when no events streamed (a JSON answer). @param {any} ex */
  replay(ex) {
    if (ex.stdout) this.streamText('stdout', ex.stdout);
    if (ex.stderr) this.streamText('stderr', ex.stderr);
    for (const r of ex.results || []) this.rich({ ...r, execution_count: r.is_main_result ? ex.execution_count : null }, !!r.is_main_result);
    if (ex.error) this.error(ex.error);
  }

  /** The footer once the execution has finished. @param {any} ex */
  finish(ex) {
    this.flush();
    const status = String(ex.status || 'ok');
    this.root.dataset.status = status;
    if (ex.execution_count != null) this.prompt.textContent = `In [${Number(ex.execution_count)}]`;
    this.statusBadge.className = `badge badge-${status.replace(/[^a-z_]/g, '')}`;
    const labels = { ok: 'done', error: 'error', timeout: 'timed out', interrupted: 'interrupted', kernel_died: 'kernel died' };
    this.statusBadge.textContent = labels[status] || status;
    if (Number.isFinite(ex.duration_ms)) this.footer.appendChild(el('span', 'meta', `${(ex.duration_ms / 1000).toFixed(2)} s`));
    const t = ex.truncated || {};
    const cut = ['stdout', 'stderr', 'results', 'files'].filter((k) => t[k]);
    if (cut.length) this.footer.appendChild(el('span', 'meta warn', `output limit reached (${cut.join(', ')})`));
    if (ex.kernel_restarted) this.footer.appendChild(el('span', 'meta warn', 'the kernel was restarted: variables are lost'));
    const files = Array.isArray(ex.files) ? ex.files : [];
    if (files.length) {
      const list = el('div', 'turn-files');
      list.dataset.testid = 'turn-files';
      list.appendChild(el('span', 'meta', 'Files:'));
      for (const f of files.slice(0, 50)) {
        const b = button('chip', `${f.path} (${formatBytes(f.size)})`);
        b.title = `Download ${f.path} (${f.change || 'changed'})`;
        b.dataset.testid = 'turn-file';
        b.dataset.path = String(f.path);
        b.addEventListener('click', () => downloadFile(String(f.path)));
        list.appendChild(b);
      }
      if (files.length > 50) list.appendChild(el('span', 'meta', `and ${files.length - 50} more`));
      this.footer.appendChild(list);
    }
  }

  /** @param {string} status @param {string} text */
  fail(status, text) {
    this.flush();
    this.root.dataset.status = status;
    this.statusBadge.className = `badge badge-${status}`;
    this.statusBadge.textContent = status;
    const n = el('div', 'note note-error', text);
    n.dataset.testid = 'note';
    this.footer.appendChild(n);
  }
}

/** @param {string} code */
async function runCell(code) {
  const session = state.session;
  if (!session || !code.trim()) return;
  ui.emptyHint.hidden = true;
  const turn = new Turn(code);
  ui.transcript.appendChild(turn.root);
  scrollDown(true);
  const controller = new AbortController();
  state.controllers.add(controller);
  state.running++;
  setStatus();
  try {
    const ex = await session.execute(code, {
      signal: controller.signal,
      onStdout: (t) => turn.streamText('stdout', t),
      onStderr: (t) => turn.streamText('stderr', t),
      onDisplay: (d) => turn.rich(d, false),
      onResult: (r) => turn.rich(r, true),
      onError: (e) => turn.error(e),
    });
    if (turn.events === 0) turn.replay(ex);
    turn.finish(ex);
  } catch (e) {
    if (e && /** @type {any} */ (e).name === 'AbortError') turn.fail('cancelled', 'Cancelled: the cell was interrupted when its connection closed.');
    else {
      turn.fail('failed', `The request failed: ${describe(e)}`);
      commonFailure(e);
    }
  } finally {
    state.controllers.delete(controller);
    if (state.session === session) {
      state.running = Math.max(0, state.running - 1);
      setStatus();
      refreshFiles();
      // The proxy logs a connection when it closes, which may be just after the cell.
      refreshNetworkLog();
      setTimeout(() => { if (state.session === session) refreshNetworkLog(); }, 1500);
    }
    scrollDown();
  }
}

// ---------------------------------------------------------------- files

/** @param {string} text @param {boolean} [error] */
function filesNote(text, error = false) {
  ui.filesNote.textContent = text;
  ui.filesNote.classList.toggle('error', error);
}

function renderCrumbs() {
  ui.crumbs.replaceChildren();
  const parts = state.cwd ? state.cwd.split('/') : [];
  const crumb = (label, path) => {
    const b = button('crumb', label);
    b.dataset.testid = 'file-crumb';
    b.addEventListener('click', () => { state.cwd = path; refreshFiles(); });
    ui.crumbs.appendChild(b);
  };
  crumb('workspace', '');
  parts.forEach((p, i) => {
    ui.crumbs.appendChild(el('span', 'crumb-sep', '/'));
    crumb(p, parts.slice(0, i + 1).join('/'));
  });
}

async function refreshFiles() {
  const session = state.session;
  const seq = ++state.filesSeq;
  renderCrumbs();
  if (!session) { ui.fileList.replaceChildren(); return; }
  let entries;
  try {
    entries = await session.listFiles(state.cwd);
  } catch (e) {
    if (seq !== state.filesSeq) return;
    if (commonFailure(e)) return;
    if (state.cwd && e instanceof CellgateError && e.status === 404 && !(e instanceof SessionNotFound)) {
      state.cwd = '';
      refreshFiles();
      return;
    }
    filesNote(`Cannot list files: ${describe(e)}`, true);
    return;
  }
  if (seq !== state.filesSeq || session !== state.session) return;
  entries.sort((a, b) => (a.type === b.type ? String(a.name).localeCompare(String(b.name)) : a.type === 'directory' ? -1 : 1));
  const items = entries.map((f) => fileItem(f));
  if (!items.length) {
    const empty = el('li', 'file-empty', state.cwd ? 'This folder is empty.' : 'No files yet. Upload some, or write them from a cell.');
    items.push(empty);
  }
  ui.fileList.replaceChildren(...items);
}

/** @param {any} f */
function fileItem(f) {
  const li = el('li', `file file-${f.type === 'directory' ? 'dir' : 'file'}`);
  li.dataset.testid = 'file-entry';
  li.dataset.path = String(f.path);
  li.dataset.type = String(f.type);
  const name = String(f.name ?? basename(f.path));
  if (f.type === 'directory') {
    const open = button('file-name', `${name}/`);
    open.title = `Open ${f.path}`;
    open.dataset.testid = 'file-open';
    open.addEventListener('click', () => { state.cwd = String(f.path); refreshFiles(); });
    li.appendChild(open);
  } else {
    const n = el('span', 'file-name', name);
    n.title = String(f.path);
    li.appendChild(n);
    li.appendChild(el('span', 'file-size', formatBytes(f.size)));
    const dl = button('small', 'Download');
    dl.dataset.testid = 'file-download';
    dl.setAttribute('aria-label', `Download ${name}`);
    dl.addEventListener('click', () => downloadFile(String(f.path)));
    li.appendChild(dl);
  }
  const del = button('small quiet', 'Delete');
  del.dataset.testid = 'file-delete';
  del.setAttribute('aria-label', `Delete ${name}`);
  let armed = 0;
  del.addEventListener('click', async () => {
    // Two clicks (no native dialog): the first arms the button for 3 s.
    if (!armed) {
      del.textContent = 'Confirm';
      del.classList.add('armed');
      armed = window.setTimeout(() => { armed = 0; del.textContent = 'Delete'; del.classList.remove('armed'); }, 3000);
      return;
    }
    clearTimeout(armed);
    armed = 0;
    try {
      await state.session?.removeFile(String(f.path));
      filesNote(`Deleted ${f.path}`);
    } catch (e) {
      if (!commonFailure(e)) filesNote(`Delete failed: ${describe(e)}`, true);
    }
    refreshFiles();
  });
  li.appendChild(del);
  return li;
}

/**
 * Downloads a workspace file: fetched with the Authorization header, then
 * saved through an object URL of an opaque (application/octet-stream) blob, so
 * that even an HTML file the kernel wrote can never render in this origin.
 * @param {string} path
 */
async function downloadFile(path) {
  const session = state.session;
  if (!session) return;
  filesNote(`Downloading ${path}…`);
  try {
    const blob = await session.download(path, { as: 'blob' });
    const opaque = new Blob([blob], { type: 'application/octet-stream' });
    const url = URL.createObjectURL(opaque);
    const a = document.createElement('a');
    a.href = url;
    a.download = basename(path);
    a.rel = 'noopener';
    a.hidden = true;
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60_000);
    filesNote(`Downloaded ${path} (${formatBytes(blob.size)})`);
  } catch (e) {
    if (!commonFailure(e)) filesNote(`Download failed: ${describe(e)}`, true);
  }
}

/** @param {FileList|File[]} list */
async function uploadFiles(list) {
  const session = state.session;
  const files = [...list];
  if (!session || !files.length) return;
  let done = 0;
  for (const file of files) {
    const name = basename(file.name.replace(/\\/g, '/'));
    const path = state.cwd ? `${state.cwd}/${name}` : name;
    filesNote(`Uploading ${name} (${formatBytes(file.size)})…`);
    try {
      await session.upload(path, file);
      done++;
    } catch (e) {
      if (commonFailure(e)) return;
      filesNote(`Upload of ${name} failed: ${describe(e)}`, true);
      refreshFiles();
      return;
    }
  }
  filesNote(done === 1 ? `Uploaded ${files[0].name}` : `Uploaded ${done} files`);
  refreshFiles();
}

// ---------------------------------------------------------------- network

/** The allow list in the Network panel: one entry a line, blank lines and # comments dropped. */
function allowEntries() {
  return ui.networkAllow.value.split('\n').map((l) => l.replace(/#.*/, '').trim()).filter(Boolean);
}

/** @param {string} text @param {boolean} [error] */
function networkNote(text, error = false) {
  ui.networkNote.textContent = text;
  ui.networkNote.classList.toggle('error', error);
}

function renderNetworkState() {
  const n = state.network;
  let text = '';
  let summary = '';
  if (!state.session) {
    text = 'No session.';
  } else if (!n) {
    text = '';
  } else if (!n.enabled) {
    text = 'No network: this session reaches nothing outside its sandbox. To open it, list hosts below and start a new session with them.';
    summary = 'off';
  } else {
    const parts = [`Allowed: ${(n.allow || []).join(', ') || 'nothing'}`];
    if (n.deny && n.deny.length) parts.push(`denied: ${n.deny.join(', ')}`);
    if (n.presets && n.presets.length) parts.push(`presets: ${n.presets.join(', ')}`);
    text = parts.join('; ') + '.';
    summary = 'on';
  }
  ui.networkState.textContent = text;
  ui.networkSummary.textContent = summary;
  ui.network.dataset.enabled = String(!!(n && n.enabled));
  setStatus();
}

/** Reads the session's network policy, then its connection log from the start. */
async function refreshNetwork() {
  const session = state.session;
  const seq = ++state.networkSeq;
  state.network = null;
  state.connections = [];
  state.networkAfter = 0;
  renderConnections();
  renderNetworkState();
  if (!session) return;
  let policy;
  try {
    policy = await session.network();
  } catch (e) {
    if (seq !== state.networkSeq) return;
    if (!commonFailure(e)) networkNote(`Cannot read the network policy: ${describe(e)}`, true);
    return;
  }
  if (seq !== state.networkSeq || session !== state.session) return;
  state.network = policy;
  // A session with a network shows its own list, so Apply edits what it has.
  if (policy.enabled) ui.networkAllow.value = (policy.allow || []).join('\n');
  renderNetworkState();
  await refreshNetworkLog();
}

/** Fetches the connections logged since the last look. */
async function refreshNetworkLog() {
  const session = state.session;
  if (!session || !state.network || !state.network.enabled) return;
  const seq = state.networkSeq;
  try {
    for (let page = 0; page < 10; page++) {
      const { connections, nextAfter } = await session.networkLog({ after: state.networkAfter, limit: 200 });
      if (seq !== state.networkSeq || session !== state.session) return;
      for (const c of connections) {
        if (Number(c.seq) <= state.networkAfter) continue;  // a concurrent refresh took it
        state.connections.push(c);
        state.networkAfter = Math.max(state.networkAfter, Number(c.seq) || 0);
      }
      if (nextAfter === null || !connections.length) break;
    }
  } catch (e) {
    if (!commonFailure(e)) networkNote(`Cannot read the connection log: ${describe(e)}`, true);
    return;
  }
  state.connections = state.connections.slice(-NETWORK_ROWS);
  renderConnections();
}

/** @param {number} ms */
function clock(ms) {
  const d = new Date(ms);
  return Number.isFinite(d.getTime()) ? d.toLocaleTimeString([], { hour12: false }) : '';
}

function renderConnections() {
  const rows = [...state.connections].reverse().map((c) => {
    const allowed = c.verdict === 'allowed';
    const li = el('li', `net-row net-${allowed ? 'allowed' : 'refused'}`);
    li.dataset.testid = 'network-entry';
    li.dataset.verdict = String(c.verdict);
    li.dataset.host = String(c.host);
    li.dataset.port = String(c.port);
    const target = `${c.host}:${c.port}`;
    const name = el('span', 'net-target', target);
    name.title = `${c.method || ''} ${target}${c.address ? ' → ' + c.address : ''}`.trim();
    const verdict = el('span', `badge badge-${allowed ? 'ok' : 'error'}`, allowed ? 'allowed' : 'refused');
    verdict.dataset.testid = 'network-verdict';
    li.append(el('span', 'net-time', clock(Number(c.time_ms))), name, verdict);
    const detail = allowed ? `↑ ${formatBytes(Number(c.bytes_up) || 0)} ↓ ${formatBytes(Number(c.bytes_down) || 0)}`
      : String(c.reason || c.rule || 'not allowed');
    const d = el('span', 'net-detail', detail);
    d.dataset.testid = 'network-detail';
    li.appendChild(d);
    return li;
  });
  if (!rows.length && state.network && state.network.enabled) {
    rows.push(el('li', 'file-empty', 'No connections yet.'));
  }
  ui.networkLog.replaceChildren(...rows);
}

/** Applies the allow list: to this session if it has a network, else to a new one. */
async function applyNetwork() {
  const allow = allowEntries();
  const session = state.session;
  if (session && state.network && state.network.enabled) {
    networkNote('Applying…');
    try {
      state.network = await session.setNetwork({ allow });
      networkNote('Applied: new connections follow it.');
    } catch (e) {
      if (!commonFailure(e)) networkNote(`Not applied: ${describe(e)}`, true);
    }
    renderNetworkState();
    return;
  }
  networkNote('');
  await newSession();
}

// ---------------------------------------------------------------- wiring

function submitCode() {
  const code = ui.code.value;
  if (!code.trim() || !state.session) return;
  ui.code.value = '';
  runCell(code);
}

ui.tokenForm.addEventListener('submit', (e) => {
  e.preventDefault();
  const token = ui.tokenInput.value.trim();
  ui.tokenInput.value = '';
  if (!token) return;
  ui.loginError.textContent = '';
  connect(token);
});

ui.composer.addEventListener('submit', (e) => {
  e.preventDefault();
  submitCode();
});

ui.code.addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) {
    e.preventDefault();
    submitCode();
  }
});

ui.newSession.addEventListener('click', () => newSession());
ui.template.addEventListener('change', () => {
  if (state.session) note(`New sessions start from ${ui.template.value || 'the built-in Python image'}: press New session.`);
});
ui.interrupt.addEventListener('click', () => interruptKernel());
ui.restart.addEventListener('click', () => restartKernel());
ui.fork.addEventListener('click', () => forkSession());
ui.filesRefresh.addEventListener('click', () => refreshFiles());
ui.networkAllow.value = sessionStorage.getItem(NETWORK_KEY) || '';
ui.networkAllow.addEventListener('input', () => sessionStorage.setItem(NETWORK_KEY, ui.networkAllow.value));
ui.networkApply.addEventListener('click', () => applyNetwork());
ui.networkRefresh.addEventListener('click', () => refreshNetworkLog());
ui.network.addEventListener('toggle', () => { if (ui.network.open) refreshNetworkLog(); });
ui.forget.addEventListener('click', () => {
  abortAll();
  sessionStorage.removeItem(TOKEN_KEY);
  sessionStorage.removeItem(SESSION_KEY);
  sessionStorage.removeItem(NETWORK_KEY);
  ui.networkAllow.value = '';
  clearTranscript();
  showLogin('Signed out. The session keeps running until it is idle for too long.');
});
/** @param {boolean} open */
function toggleFiles(open) {
  document.body.classList.toggle('files-open', open);
  ui.toggleFiles.setAttribute('aria-expanded', String(open));
  if (open) refreshFiles();
}
ui.toggleFiles.addEventListener('click', () => toggleFiles(!document.body.classList.contains('files-open')));
ui.filesClose.addEventListener('click', () => toggleFiles(false));

ui.fileInput.addEventListener('change', () => {
  const files = [...(ui.fileInput.files || [])];
  ui.fileInput.value = '';
  uploadFiles(files);
});

// Drag and drop anywhere on the page.
let dragDepth = 0;
const hasFiles = (e) => !!e.dataTransfer && [...e.dataTransfer.types].includes('Files');
document.addEventListener('dragenter', (e) => {
  if (!hasFiles(e) || !state.session) return;
  e.preventDefault();
  dragDepth++;
  ui.dropzone.hidden = false;
});
document.addEventListener('dragover', (e) => {
  if (!hasFiles(e)) return;
  e.preventDefault();
  if (e.dataTransfer) e.dataTransfer.dropEffect = state.session ? 'copy' : 'none';
});
document.addEventListener('dragleave', (e) => {
  if (!hasFiles(e)) return;
  dragDepth = Math.max(0, dragDepth - 1);
  if (!dragDepth) ui.dropzone.hidden = true;
});
document.addEventListener('drop', (e) => {
  if (!hasFiles(e)) return;
  e.preventDefault();
  dragDepth = 0;
  ui.dropzone.hidden = true;
  if (e.dataTransfer && state.session) uploadFiles(e.dataTransfer.files);
});

// Resizing an HTML output by hand stops automatic sizing of that frame.
document.addEventListener('pointerup', (e) => {
  const t = /** @type {HTMLElement} */ (e.target);
  if (t && t.classList && t.classList.contains('out-html')) t.dataset.userSized = '1';
});

async function loadConfig() {
  try {
    const res = await fetch('/static-config.json', { cache: 'no-store', credentials: 'omit' });
    if (res.ok) {
      const cfg = await res.json();
      state.outputScripts = cfg && cfg.output_scripts === true;
    }
  } catch {
    state.outputScripts = false;
  }
  document.body.dataset.outputScripts = String(state.outputScripts);
}

async function main() {
  listenForFrameHeights();
  await loadConfig();
  setStatus();
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) await connect(token);
  else showLogin();
  document.body.dataset.ready = '1';
}

main();
