// cellgate.js — a small, dependency-free client for cellgate's /v1 agent API
// (docs/agent-api.md), for browsers and Node.js ≥ 20 (global fetch).
//
//   import { Cellgate } from '/static/cellgate.js';     // or from a file in Node
//   const cg = new Cellgate({ url: 'http://127.0.0.1:8888', token });
//   const session = await cg.createSession({ timeout: 60 });
//   const ex = await session.execute('print(6 * 7)');    // ex.stdout === '42\n'
//   await session.close();
//
// Everything a kernel sends back is data: this module never evaluates or
// renders it. Rendering kernel output safely is the caller's job (see
// clients/web/app.js for a page that does).

/** The client's version (matches the gateway it ships with). */
export const version = '1.0.0';

const JSON_TYPE = 'application/json';
const SSE_TYPE = 'text/event-stream';

/**
 * The gateway refused a request (or could not be reached).
 * `status` is the HTTP status (`null` when no response arrived), `reason` and
 * `message` come from the gateway's JSON error body `{"reason", "message"}`.
 */
export class CellgateError extends Error {
  /**
   * @param {number|null} status HTTP status, or null without a response
   * @param {string} reason short reason (e.g. "Not Found", "connection_failed")
   * @param {string} message the gateway's explanation
   */
  constructor(status, reason, message) {
    super(message);
    this.name = 'CellgateError';
    /** @type {number|null} */
    this.status = status;
    /** @type {string} */
    this.reason = reason;
  }

  /** "CellgateError: 404 Not Found: No such session" */
  toString() {
    return `${this.name}: ${this.status ? this.status + ' ' : ''}${this.reason}: ${this.message}`;
  }
}

/** 404: a file, or a session, that does not exist (or belongs to another tenant). */
export class NotFound extends CellgateError {
  constructor(status, reason, message) {
    super(status, reason, message);
    this.name = 'NotFound';
  }
}

/** 404 on a session: it was deleted, culled for idleness or reached its lifetime. */
export class SessionNotFound extends NotFound {
  constructor(status, reason, message) {
    super(status, reason, message);
    this.name = 'SessionNotFound';
  }
}

/** 429: the gateway's (or the tenant's) session quota is full. */
export class TooManySessions extends CellgateError {
  constructor(status, reason, message) {
    super(status, reason, message);
    this.name = 'TooManySessions';
  }
}

/**
 * A workspace path as URL path segments ('/workspace/' prefix tolerated).
 * @param {string} path
 * @returns {string}
 */
export function quotePath(path) {
  let p = String(path);
  if (p.startsWith('/workspace/')) p = p.slice('/workspace/'.length);
  return p.split('/').map(encodeURIComponent).join('/');
}

/** @param {unknown} v @returns {number|undefined} whole seconds as integers */
function seconds(v) {
  if (v === undefined || v === null) return undefined;
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0) throw new TypeError(`not a positive number of seconds: ${v}`);
  return n;
}

/** @returns {Record<string, string>|undefined} */
function nodeEnv() {
  const p = /** @type {any} */ (globalThis).process;
  return p && p.env && typeof p.env === 'object' ? p.env : undefined;
}

function hasLocation() {
  const loc = /** @type {any} */ (globalThis).location;
  return !!(loc && typeof loc.origin === 'string' && /^https?:/.test(loc.origin));
}

/**
 * Decodes standard base64 into bytes (browsers and Node alike).
 * @param {string} b64
 * @returns {Uint8Array}
 */
export function base64ToBytes(b64) {
  const clean = String(b64).replace(/[^A-Za-z0-9+/]/g, '');
  const bin = atob(clean);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/**
 * Encodes bytes as standard base64.
 * @param {Uint8Array} bytes
 * @returns {string}
 */
export function bytesToBase64(bytes) {
  let bin = '';
  const CHUNK = 0x8000;
  for (let i = 0; i < bytes.length; i += CHUNK) {
    bin += String.fromCharCode.apply(null, /** @type {any} */ (bytes.subarray(i, i + CHUNK)));
  }
  return btoa(bin);
}

/**
 * Bytes of an upload source.
 * @param {Blob|ArrayBuffer|ArrayBufferView|string} data
 * @returns {Promise<Uint8Array>}
 */
async function toBytes(data) {
  if (typeof data === 'string') return new TextEncoder().encode(data);
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  if (typeof Blob !== 'undefined' && data instanceof Blob) return new Uint8Array(await data.arrayBuffer());
  throw new TypeError('upload data must be a Blob, ArrayBuffer, typed array or string');
}

/**
 * A request body fetch accepts as is.
 * @param {Blob|ArrayBuffer|ArrayBufferView|string} data
 * @returns {BodyInit}
 */
function toBody(data) {
  if (typeof data === 'string') return new TextEncoder().encode(data);
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (ArrayBuffer.isView(data)) {
    return /** @type {BodyInit} */ (/** @type {unknown} */ (new Uint8Array(data.buffer, data.byteOffset, data.byteLength)));
  }
  if (typeof Blob !== 'undefined' && data instanceof Blob) return data;
  throw new TypeError('upload data must be a Blob, ArrayBuffer, typed array or string');
}

/**
 * Turns an error response into a CellgateError.
 * @param {Response} res
 * @param {typeof CellgateError} [notFound]
 * @returns {Promise<CellgateError>}
 */
async function errorFrom(res, notFound = NotFound) {
  let reason = res.statusText || 'error';
  let message = '';
  const text = await res.text().catch(() => '');
  try {
    const body = JSON.parse(text);
    if (body && typeof body === 'object') {
      reason = body.reason || reason;
      message = body.message || '';
    }
  } catch {
    message = text.slice(0, 500);
  }
  let cls = CellgateError;
  if (res.status === 404) cls = notFound;
  else if (res.status === 429) cls = TooManySessions;
  return new cls(res.status, reason, message);
}

/**
 * The execution result with `text` (the cell's value as text/plain) added.
 * @param {any} raw
 * @returns {import('./cellgate').Execution}
 */
function execution(raw) {
  const ex = raw && typeof raw === 'object' ? raw : {};
  const main = Array.isArray(ex.results) ? ex.results.find((r) => r && r.is_main_result) : undefined;
  const text = main && main.data && typeof main.data['text/plain'] === 'string' ? main.data['text/plain'] : null;
  if (Array.isArray(ex.files)) {
    for (const f of ex.files) {
      if (f && typeof f.content_base64 === 'string') {
        Object.defineProperty(f, 'content', {
          enumerable: false,
          configurable: true,
          get() { return base64ToBytes(f.content_base64); },
        });
      }
    }
  }
  Object.defineProperty(ex, 'text', { value: text, enumerable: false, configurable: true, writable: true });
  return ex;
}

/**
 * Parses a text/event-stream body by hand (WHATWG rules that matter here:
 * "field: value" with one optional space, several data lines joined by "\n",
 * a blank line dispatches, comments start with ":", CR, LF or CRLF ends a line).
 * @param {ReadableStream<Uint8Array>} body
 * @param {(event: string, data: string) => void} onEvent
 * @returns {Promise<void>}
 */
export async function readEventStream(body, onEvent) {
  const reader = body.getReader();
  const decoder = new TextDecoder('utf-8');
  let buffer = '';
  let event = '';
  /** @type {string[]} */
  let data = [];
  let sawCR = false;
  const line = (l) => {
    if (l === '') {
      if (data.length) onEvent(event || 'message', data.join('\n'));
      event = '';
      data = [];
      return;
    }
    if (l.startsWith(':')) return;
    const colon = l.indexOf(':');
    const field = colon < 0 ? l : l.slice(0, colon);
    let value = colon < 0 ? '' : l.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'event') event = value;
    else if (field === 'data') data.push(value);
    // 'id' and 'retry' mean nothing for a one-shot stream.
  };
  const feed = (text) => {
    buffer += text;
    let start = 0;
    for (let i = 0; i < buffer.length; i++) {
      const c = buffer.charCodeAt(i);
      if (c === 10 /* \n */) {
        if (sawCR && i === start) { sawCR = false; start = i + 1; continue; }  // the LF of a CRLF
        sawCR = false;
        line(buffer.slice(start, i));
        start = i + 1;
      } else if (c === 13 /* \r */) {
        line(buffer.slice(start, i));
        sawCR = true;
        start = i + 1;
      } else {
        sawCR = false;
      }
    }
    buffer = buffer.slice(start);
  };
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      feed(decoder.decode(value, { stream: true }));
    }
    feed(decoder.decode());
    if (buffer) line(buffer);  // a last line without its newline
    if (data.length) onEvent(event || 'message', data.join('\n'));  // lenient: no trailing blank line
  } finally {
    try { reader.releaseLock(); } catch { /* already released */ }
  }
}

/**
 * A client for one gateway.
 */
export class Cellgate {
  /**
   * @param {{url?: string, token?: string|null, fetch?: typeof fetch}} [options]
   *   `url`: the gateway's base URL ('' = the page's own origin; in Node the
   *   default is $CELLGATE_URL). `token`: sent as `Authorization: Bearer …`
   *   (in Node the default is $CELLGATE_TOKEN). `fetch`: a fetch to use instead
   *   of the global one.
   */
  constructor(options = {}) {
    const env = nodeEnv();
    let url = options.url ?? (env && env.CELLGATE_URL) ?? '';
    url = String(url).replace(/\/+$/, '');
    if (!url && !hasLocation()) {
      throw new TypeError('no gateway URL: pass {url} (or set CELLGATE_URL) outside a browser');
    }
    if (url && !/^https?:\/\//i.test(url)) throw new TypeError(`not an http(s) URL: ${url}`);
    /** @type {string} the base URL ('' = same origin) */
    this.url = url;
    /** @type {string|null} */
    this.token = options.token ?? (env && env.CELLGATE_TOKEN) ?? null;
    const f = options.fetch ?? globalThis.fetch;
    if (typeof f !== 'function') throw new TypeError('no fetch available: Node.js ≥ 18 or a browser is needed');
    /** @private */
    this._fetch = f.bind(globalThis);
  }

  /**
   * An absolute (or, with url '', origin-relative) URL for an API path.
   * @param {string} path
   * @returns {string}
   */
  absolute(path) {
    if (/^https?:\/\//i.test(path)) return path;
    return this.url + (path.startsWith('/') ? path : '/' + path);
  }

  /**
   * Sends a request; throws CellgateError for statuses ≥ 400.
   * @param {string} method
   * @param {string} path
   * @param {{json?: any, body?: BodyInit, headers?: Record<string,string>, signal?: AbortSignal, notFound?: typeof CellgateError}} [opts]
   * @returns {Promise<Response>}
   */
  async request(method, path, opts = {}) {
    /** @type {Record<string,string>} */
    const headers = { Accept: JSON_TYPE };
    if (this.token) headers.Authorization = `Bearer ${this.token}`;
    let body = opts.body;
    if (opts.json !== undefined) {
      body = JSON.stringify(opts.json);
      headers['Content-Type'] = JSON_TYPE;
    }
    Object.assign(headers, opts.headers || {});
    let res;
    try {
      res = await this._fetch(this.absolute(path), {
        method,
        headers,
        body,
        signal: opts.signal,
        cache: 'no-store',
        credentials: 'omit',
        redirect: 'error',
        // Node's fetch needs this for a streamed request body; browsers ignore it here.
        ...(body && typeof body === 'object' && 'getReader' in body ? { duplex: 'half' } : {}),
      });
    } catch (e) {
      if (e && /** @type {any} */ (e).name === 'AbortError') throw e;
      throw new CellgateError(null, 'connection_failed', `${method} ${this.absolute(path)}: ${e && /** @type {any} */ (e).message || e}`);
    }
    if (res.status >= 400) throw await errorFrom(res, opts.notFound);
    return res;
  }

  /**
   * Sends a request and decodes its JSON body (null when empty).
   * @param {string} method
   * @param {string} path
   * @param {Parameters<Cellgate['request']>[2]} [opts]
   * @returns {Promise<any>}
   */
  async requestJson(method, path, opts) {
    const res = await this.request(method, path, opts);
    const text = await res.text();
    if (!text) return null;
    try {
      return JSON.parse(text);
    } catch {
      throw new CellgateError(res.status, 'bad_response', `not JSON: ${text.slice(0, 200)}`);
    }
  }

  /**
   * Starts a session: a sandboxed, stateful Python kernel with its own /workspace.
   * @param {import('./cellgate').SessionOptions} [opts]
   * @returns {Promise<Session>}
   */
  async createSession(opts = {}) {
    /** @type {Record<string, any>} */
    const body = {};
    const map = { kernel: 'kernel', timeout: 'timeout_s', idleTimeout: 'idle_timeout_s', lifetime: 'lifetime_s',
      outputLimit: 'output_limit_bytes', env: 'env' };
    for (const [key, value] of Object.entries(opts || {})) {
      if (value === undefined || value === null || key === 'signal') continue;
      const name = /** @type {Record<string,string>} */ (map)[key] || key;  // snake_case names pass through
      body[name] = name.endsWith('_s') ? seconds(value) : value;
    }
    const model = await this.requestJson('POST', '/v1/sessions', { json: body, signal: opts && opts.signal });
    return new Session(this, model);
  }

  /**
   * Attaches to an existing session (throws SessionNotFound if it has ended).
   * @param {string} id
   * @returns {Promise<Session>}
   */
  async connect(id) {
    const model = await this.requestJson('GET', `/v1/sessions/${encodeURIComponent(id)}`, { notFound: SessionNotFound });
    return new Session(this, model);
  }

  /**
   * A Session object for an id, without asking the gateway.
   * @param {string} id
   * @returns {Session}
   */
  session(id) {
    return new Session(this, { id });
  }

  /**
   * The caller's sessions (models).
   * @returns {Promise<import('./cellgate').SessionModel[]>}
   */
  async listSessions() {
    const body = await this.requestJson('GET', '/v1/sessions');
    return (body && body.sessions) || [];
  }

  /**
   * Runs code in a fresh sandbox that is destroyed afterwards. The produced
   * files come back inline (`files[i].content_base64`, and `files[i].content`
   * as bytes).
   * @param {string} code
   * @param {import('./cellgate').OneShotFiles} [files]
   * @param {{timeout?: number, signal?: AbortSignal}} [opts]
   * @returns {Promise<import('./cellgate').Execution>}
   */
  async runOnce(code, files, opts = {}) {
    /** @type {{path: string, content_base64: string}[]} */
    const inline = [];
    /** @type {[string, any][]} */
    let entries = [];
    if (Array.isArray(files)) {
      entries = files.map((f) => {
        if (f && typeof f === 'object' && 'path' in f && 'data' in f) return [String(f.path), f.data];
        if (typeof File !== 'undefined' && f instanceof File) return [f.name, f];
        throw new TypeError('runOnce files: pass {path: data}, [{path, data}] or File objects');
      });
    } else if (files) {
      entries = Object.entries(files);
    }
    for (const [path, data] of entries) inline.push({ path, content_base64: bytesToBase64(await toBytes(data)) });
    /** @type {Record<string, any>} */
    const body = { code };
    if (inline.length) body.files = inline;
    if (opts.timeout !== undefined) body.timeout_s = seconds(opts.timeout);
    return execution(await this.requestJson('POST', '/v1/execute', { json: body, signal: opts.signal }));
  }

  /**
   * One-shot execution without building a client first:
   * `Cellgate.runOnce(code, files, {url, token, timeout})`.
   * @param {string} code
   * @param {import('./cellgate').OneShotFiles} [files]
   * @param {{url?: string, token?: string|null, fetch?: typeof fetch, timeout?: number, signal?: AbortSignal}} [opts]
   * @returns {Promise<import('./cellgate').Execution>}
   */
  static runOnce(code, files, opts = {}) {
    const { url, token, fetch: f, ...rest } = opts;
    return new Cellgate({ url, token, fetch: f }).runOnce(code, files, rest);
  }
}

/**
 * One session: a sandboxed, stateful Python kernel with its own workspace.
 */
export class Session {
  /**
   * @param {Cellgate} client
   * @param {import('./cellgate').SessionModel|{id: string}} model
   */
  constructor(client, model) {
    /** @type {Cellgate} */
    this.client = client;
    /** @type {string} */
    this.id = model.id;
    /** @type {any} the last session model seen */
    this.model = model;
    /** @private */
    this._closed = false;
  }

  /** @returns {Record<string, number>|undefined} the limits that apply */
  get limits() {
    return this.model && this.model.limits;
  }

  /** @private @param {string} [suffix] */
  _path(suffix = '') {
    return `/v1/sessions/${encodeURIComponent(this.id)}${suffix}`;
  }

  /**
   * Runs a file request; a 404 is SessionNotFound when the session is gone,
   * NotFound (the file) while it lives.
   * @private
   * @template T
   * @param {() => Promise<T>} call
   * @returns {Promise<T>}
   */
  async _fileCall(call) {
    try {
      return await call();
    } catch (e) {
      if (e instanceof NotFound && !(e instanceof SessionNotFound)) {
        let alive = true;
        try {
          await this.client.request('GET', this._path(), { notFound: SessionNotFound });
        } catch (e2) {
          if (e2 instanceof SessionNotFound) alive = false;
        }
        if (!alive) throw new SessionNotFound(e.status, e.reason, e.message);
      }
      throw e;
    }
  }

  /**
   * Refreshes and returns the session model.
   * @returns {Promise<import('./cellgate').SessionModel>}
   */
  async info() {
    this.model = await this.client.requestJson('GET', this._path(), { notFound: SessionNotFound });
    return this.model;
  }

  /**
   * Runs a cell. Without callbacks (and without `signal`/`stream`) it is one
   * JSON request; with any of them the output streams as Server-Sent Events
   * and the callbacks are called, in order, as it arrives. Either way the
   * complete result is returned.
   *
   * Aborting `signal` disconnects the stream, which makes the gateway
   * interrupt the running cell; the promise then rejects with the abort reason
   * (an AbortError).
   *
   * @param {string} code
   * @param {import('./cellgate').ExecuteOptions} [opts]
   * @returns {Promise<import('./cellgate').Execution>}
   */
  async execute(code, opts = {}) {
    /** @type {Record<string, any>} */
    const body = { code: String(code) };
    if (opts.timeout !== undefined) body.timeout_s = seconds(opts.timeout);
    const cbs = [opts.onStdout, opts.onStderr, opts.onDisplay, opts.onResult, opts.onError, opts.onFiles, opts.onEvent];
    const stream = opts.stream ?? (cbs.some((c) => typeof c === 'function') || !!opts.signal);
    if (!stream) {
      return execution(await this.client.requestJson('POST', this._path('/execute'), { json: body, notFound: SessionNotFound }));
    }
    if (opts.signal && opts.signal.aborted) throw opts.signal.reason ?? abortError();
    const res = await this.client.request('POST', this._path('/execute'), {
      json: body, headers: { Accept: SSE_TYPE }, signal: opts.signal, notFound: SessionNotFound,
    });
    const ctype = res.headers.get('Content-Type') || '';
    if (!ctype.startsWith(SSE_TYPE) || !res.body) {
      // A gateway may answer JSON anyway; honour it rather than hang.
      return execution(JSON.parse(await res.text()));
    }
    /** @type {any} */
    let end = null;
    try {
      await readEventStream(res.body, (event, data) => {
        let payload;
        try {
          payload = JSON.parse(data);
        } catch {
          throw new CellgateError(res.status, 'bad_event', `event '${event}' is not JSON: ${data.slice(0, 200)}`);
        }
        if (opts.onEvent) opts.onEvent(event, payload);
        switch (event) {
          case 'stdout': if (opts.onStdout) opts.onStdout(payload.text ?? ''); break;
          case 'stderr': if (opts.onStderr) opts.onStderr(payload.text ?? ''); break;
          case 'display': if (opts.onDisplay) opts.onDisplay(payload); break;
          case 'result': if (opts.onResult) opts.onResult(payload); break;
          case 'error': if (opts.onError) opts.onError(payload); break;
          case 'files': if (opts.onFiles) opts.onFiles(payload.files || []); break;
          case 'end': end = payload; break;
          case 'stream_error':  // the gateway ended the stream (the client fell too far behind)
            throw new CellgateError(res.status, payload.reason || 'stream_error', payload.message || 'the stream was ended');
          default: break;  // anything newer is in the end event's result too
        }
      });
    } catch (e) {
      // A callback threw, the stream broke or the caller aborted: drop the
      // connection (the gateway interrupts the cell) and report why.
      try { await res.body.cancel(); } catch { /* already closed */ }
      if (opts.signal && opts.signal.aborted) throw opts.signal.reason ?? abortError();
      if (e instanceof CellgateError || (e && /** @type {any} */ (e).name === 'AbortError')) throw e;
      if (e instanceof TypeError && /terminated|network|fetch/i.test(String(e.message))) {
        throw new CellgateError(null, 'connection_failed', `the event stream broke: ${e.message}`);
      }
      throw e;
    }
    if (end === null) {
      if (opts.signal && opts.signal.aborted) throw opts.signal.reason ?? abortError();
      throw new CellgateError(res.status, 'stream_incomplete', "the event stream ended without its 'end' event");
    }
    return execution(end);
  }

  /**
   * Interrupts the running cell (it gets KeyboardInterrupt; its result has
   * status "interrupted").
   * @returns {Promise<void>}
   */
  async interrupt() {
    await this.client.request('POST', this._path('/interrupt'), { notFound: SessionNotFound });
  }

  /**
   * Restarts the kernel: variables are lost, files stay.
   * @returns {Promise<import('./cellgate').SessionModel>}
   */
  async restart() {
    this.model = await this.client.requestJson('POST', this._path('/restart'), { notFound: SessionNotFound });
    return this.model;
  }

  /**
   * Writes data to `path` in the workspace (parents are created).
   * @param {string} path
   * @param {Blob|ArrayBuffer|ArrayBufferView|string} data strings are sent as UTF-8
   * @param {{signal?: AbortSignal}} [opts]
   * @returns {Promise<import('./cellgate').FileInfo>}
   */
  async upload(path, data, opts = {}) {
    const body = toBody(data);
    return this._fileCall(() => this.client.requestJson('PUT', this._path(`/files/${quotePath(path)}`), {
      body, headers: { 'Content-Type': 'application/octet-stream' }, signal: opts.signal,
    }));
  }

  /**
   * Uploads several files in one multipart request into directory `path`
   * (default: the workspace root).
   * @param {Record<string, Blob|ArrayBuffer|ArrayBufferView|string>|File[]} files name → data, or File objects
   * @param {{path?: string, signal?: AbortSignal}} [opts]
   * @returns {Promise<import('./cellgate').FileInfo[]>}
   */
  async uploadMany(files, opts = {}) {
    const form = new FormData();
    if (opts.path) form.append('path', opts.path);
    /** @type {[string, any][]} */
    const entries = Array.isArray(files) ? files.map((f) => [f.name, f]) : Object.entries(files);
    for (const [name, data] of entries) {
      const blob = typeof Blob !== 'undefined' && data instanceof Blob ? data : new Blob([/** @type {BlobPart} */ (/** @type {unknown} */ (await toBytes(data)))]);
      form.append('file', blob, name);
    }
    const body = await this._fileCall(() => this.client.requestJson('POST', this._path('/files'), { body: form, signal: opts.signal }));
    return (body && body.files) || [];
  }

  /**
   * A workspace file's bytes: an ArrayBuffer by default; `{as: 'blob'}` (handy
   * in browsers for URL.createObjectURL), `{as: 'text'}` (UTF-8) or
   * `{as: 'response'}` (the streaming Response).
   * @param {string} path
   * @param {{as?: 'arraybuffer'|'blob'|'text'|'response', signal?: AbortSignal}} [opts]
   * @returns {Promise<any>}
   */
  async download(path, opts = {}) {
    const res = await this._fileCall(() => this.client.request('GET', this._path(`/files/${quotePath(path)}`), {
      headers: { Accept: '*/*' }, signal: opts.signal,
    }));
    switch (opts.as || 'arraybuffer') {
      case 'arraybuffer': return res.arrayBuffer();
      case 'blob': return res.blob();
      case 'text': return res.text();
      case 'response': return res;
      default: throw new TypeError(`download: unknown 'as': ${opts.as}`);
    }
  }

  /**
   * The entries of a workspace directory ('' is /workspace).
   * @param {string} [path]
   * @returns {Promise<import('./cellgate').FileInfo[]>}
   */
  async listFiles(path = '') {
    const q = path ? `?path=${encodeURIComponent(path)}` : '';
    const body = await this._fileCall(() => this.client.requestJson('GET', this._path(`/files${q}`)));
    return (body && body.entries) || [];
  }

  /**
   * Deletes a file, or a directory recursively.
   * @param {string} path
   * @returns {Promise<void>}
   */
  async removeFile(path) {
    await this._fileCall(() => this.client.request('DELETE', this._path(`/files/${quotePath(path)}`)));
  }

  /**
   * The URL of a workspace file. It needs the Authorization header, so a page
   * cannot use it in <img src> or a plain link: fetch it with download().
   * @param {string} path
   * @param {{download?: boolean}} [opts] `download: true` adds ?download=1 (Content-Disposition: attachment)
   * @returns {string}
   */
  fileUrl(path, opts = {}) {
    return this.client.absolute(this._path(`/files/${quotePath(path)}`)) + (opts.download ? '?download=1' : '');
  }

  /**
   * Deletes the session and its sandbox; closing twice is harmless.
   * @returns {Promise<void>}
   */
  async close() {
    if (this._closed) return;
    try {
      await this.client.request('DELETE', this._path(), { notFound: SessionNotFound });
    } catch (e) {
      if (!(e instanceof SessionNotFound)) throw e;
    }
    this._closed = true;
  }
}

function abortError() {
  if (typeof DOMException === 'function') return new DOMException('The operation was aborted.', 'AbortError');
  const e = new Error('The operation was aborted.');
  e.name = 'AbortError';
  return e;
}

export default Cellgate;
