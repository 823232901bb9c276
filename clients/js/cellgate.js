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

/** 404 on a snapshot: it was deleted (or belongs to another tenant). */
export class SnapshotNotFound extends NotFound {
  constructor(status, reason, message) {
    super(status, reason, message);
    this.name = 'SnapshotNotFound';
  }
}

/** 404 on a named volume: there is none of that name (or it belongs to another tenant). */
export class VolumeNotFound extends NotFound {
  constructor(status, reason, message) {
    super(status, reason, message);
    this.name = 'VolumeNotFound';
  }
}

/** 429: the gateway's (or the tenant's) session quota is full. */
export class TemplateNotFound extends NotFound {
  constructor(status, reason, message) {
    super(status, reason, message);
    this.name = 'TemplateNotFound';
  }
}

/**
 * A template's build ended in an error: `build` is the gateway's build model
 * (`failure`: the step, its exit code, the message and the log's tail).
 */
export class TemplateBuildError extends CellgateError {
  /** @param {any} build */
  constructor(build) {
    const f = (build && build.failure) || {};
    super(null, 'build_failed', f.message || `the build of ${build && build.template} failed`);
    this.name = 'TemplateBuildError';
    /** the build model */
    this.build = build;
    /** its failure: {step?, exit_code?, message, log_tail?} */
    this.failure = f;
  }
}

export class TooManySessions extends CellgateError {
  constructor(status, reason, message) {
    super(status, reason, message);
    this.name = 'TooManySessions';
  }
}

/** 429 on a snapshot: the tenant keeps as many as it may; delete one first. */
export class TooManySnapshots extends CellgateError {
  constructor(status, reason, message) {
    super(status, reason, message);
    this.name = 'TooManySnapshots';
  }
}

/** 429 on a volume: the token's volume quota (count or total bytes) is full. */
export class TooManyVolumes extends CellgateError {
  constructor(status, reason, message) {
    super(status, reason, message);
    this.name = 'TooManyVolumes';
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
 * A snapshot's id, from its model or the id itself.
 * @param {string|{id: string}} snapshot
 * @returns {string}
 */
function snapshotId(snapshot) {
  const id = snapshot && typeof snapshot === 'object' ? snapshot.id : snapshot;
  if (typeof id !== 'string' || !id) throw new TypeError(`not a snapshot or a snapshot id: ${snapshot}`);
  return id;
}

/**
 * A volume's API path, from its model or its name.
 * @param {string|{name: string}} volume
 * @returns {string}
 */
function volumePath(volume) {
  const name = volume && typeof volume === 'object' ? volume.name : volume;
  if (typeof name !== 'string' || !name) throw new TypeError(`not a volume or a volume name: ${volume}`);
  return `/v1/volumes/${encodeURIComponent(name)}`;
}

/**
 * One entry of `createSession({volumes})` as the API takes it: a name, or
 * {name, path?, readOnly?} (readOnly sent as read_only).
 * @param {any} v
 * @returns {{name: string, path?: string, read_only?: boolean}}
 */
function volumeMount(v) {
  if (typeof v === 'string') return { name: v };
  if (!v || typeof v !== 'object' || typeof v.name !== 'string') {
    throw new TypeError(`not a volume mount: ${JSON.stringify(v)} (pass a name or {name, path?, readOnly?})`);
  }
  /** @type {{name: string, path?: string, read_only?: boolean}} */
  const out = { name: v.name };
  if (v.path !== undefined && v.path !== null) out.path = v.path;
  const ro = v.readOnly ?? v.read_only;
  if (ro !== undefined && ro !== null) out.read_only = ro;
  return out;
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
 * @param {typeof CellgateError} [notFound] the class for a 404
 * @param {typeof CellgateError} [tooMany] the class for a 429
 * @returns {Promise<CellgateError>}
 */
async function errorFrom(res, notFound = NotFound, tooMany = TooManySessions) {
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
  else if (res.status === 429) cls = tooMany;
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

/** @param {AbortSignal|undefined} signal */
function throwIfAborted(signal) {
  if (signal && signal.aborted) throw signal.reason ?? abortError();
}

/** @param {Response} res @returns {boolean} whether it streams Server-Sent Events */
function isEventStream(res) {
  return (res.headers.get('Content-Type') || '').startsWith(SSE_TYPE) && !!res.body;
}

/**
 * Follows a response's event stream: every event's JSON payload goes to
 * `onEvent(event, payload)` until the `last` event, whose payload is returned.
 * A `stream_error` event (the gateway ended the stream) rejects. If a callback
 * throws, the stream breaks or `signal` is aborted, the connection is dropped
 * (which is what makes the gateway interrupt a cell, or kill a foreground
 * command) and the reason is thrown.
 * @param {Response} res
 * @param {string} last
 * @param {AbortSignal|undefined} signal
 * @param {(event: string, payload: any) => void} onEvent
 * @returns {Promise<any>}
 */
async function followEvents(res, last, signal, onEvent) {
  const body = /** @type {ReadableStream<Uint8Array>} */ (res.body);
  /** @type {any} */
  let end = null;
  try {
    await readEventStream(body, (event, data) => {
      let payload;
      try {
        payload = JSON.parse(data);
      } catch {
        throw new CellgateError(res.status, 'bad_event', `event '${event}' is not JSON: ${data.slice(0, 200)}`);
      }
      onEvent(event, payload);
      if (event === last) end = payload;
      else if (event === 'stream_error') {  // the gateway ended the stream (the client fell too far behind)
        throw new CellgateError(res.status, payload.reason || 'stream_error', payload.message || 'the stream was ended');
      }
    });
  } catch (e) {
    try { await body.cancel(); } catch { /* already closed */ }
    throwIfAborted(signal);
    if (e instanceof CellgateError || (e && /** @type {any} */ (e).name === 'AbortError')) throw e;
    if (e instanceof TypeError && /terminated|network|fetch/i.test(String(e.message))) {
      throw new CellgateError(null, 'connection_failed', `the event stream broke: ${e.message}`);
    }
    throw e;
  }
  if (end === null) {
    throwIfAborted(signal);
    throw new CellgateError(res.status, 'stream_incomplete', `the event stream ended without its '${last}' event`);
  }
  return end;
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
   * @param {{json?: any, body?: BodyInit, headers?: Record<string,string>, signal?: AbortSignal, notFound?: typeof CellgateError, tooMany?: typeof CellgateError}} [opts]
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
    if (res.status >= 400) throw await errorFrom(res, opts.notFound, opts.tooMany);
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
   * `fromSnapshot` (a snapshot model or its id) starts it on a copy of that
   * snapshot's files with a new kernel of the snapshot's kernelspec,
   * environment and network (`kernel`, `env` and `network` cannot be given
   * with it: a 400); an unknown snapshot rejects with SnapshotNotFound.
   * `volumes` mounts named volumes: names or `{name, path?, readOnly?}` (at
   * most 8), at /volumes/<name> by default. A volume has one writer at a
   * time: a second read-write mount rejects with a 409 CellgateError (mount
   * it readOnly); an unknown volume rejects with VolumeNotFound.
   * `workspace` (a tar archive: Blob, ArrayBuffer or typed array, e.g. what
   * exportWorkspace gave) is unpacked into the new session's workspace
   * before it is handed over (`session.model.imported` is the report); a
   * malformed archive rejects with a 400 CellgateError and leaves no session.
   * @param {import('./cellgate').SessionOptions} [opts]
   * @returns {Promise<Session>}
   */
  async createSession(opts = {}) {
    /** @type {Record<string, any>} */
    const body = {};
    const map = { kernel: 'kernel', timeout: 'timeout_s', idleTimeout: 'idle_timeout_s', lifetime: 'lifetime_s',
      outputLimit: 'output_limit_bytes', env: 'env', network: 'network', fromSnapshot: 'from_snapshot' };
    for (const [key, value] of Object.entries(opts || {})) {
      if (value === undefined || value === null || key === 'signal' || key === 'workspace') continue;
      const name = /** @type {Record<string,string>} */ (map)[key] || key;  // snake_case names pass through
      body[name] = name.endsWith('_s') ? seconds(value) : name === 'from_snapshot' ? snapshotId(value)
        : name === 'volumes' ? Array.from(/** @type {any[]} */ (value), volumeMount) : value;
    }
    // With an archive: a form of the request's JSON and the archive.
    const archive = opts && opts.workspace;
    let sent = { json: body };
    if (archive !== undefined && archive !== null) {
      const form = new FormData();
      form.append('session', new Blob([JSON.stringify(body)], { type: JSON_TYPE }), 'session.json');
      const data = toBody(/** @type {any} */ (archive));
      form.append('workspace', data instanceof Blob ? data : new Blob([data], { type: 'application/x-tar' }), 'workspace.tar');
      sent = /** @type {any} */ ({ body: form });
    }
    let model;
    try {
      model = await this.requestJson('POST', '/v1/sessions', {
        ...sent, signal: opts && opts.signal, notFound: SnapshotNotFound,
      });
    } catch (e) {
      // A 404 is an unknown volume or an unknown snapshot.
      const volumes = Array.isArray(body.volumes) && body.volumes.length > 0;
      if (e instanceof SnapshotNotFound && volumes && (!body.from_snapshot || /^No such volume/.test(e.message))) {
        throw new VolumeNotFound(e.status, e.reason, e.message);
      }
      throw e;
    }
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
   * The caller's snapshots (of every session, ended ones too), oldest first.
   * @returns {Promise<import('./cellgate').SnapshotModel[]>}
   */
  async listSnapshots() {
    const body = await this.requestJson('GET', '/v1/snapshots');
    return (body && body.snapshots) || [];
  }

  /**
   * One snapshot (a model or its id), refreshed; SnapshotNotFound if it is gone.
   * @param {string|{id: string}} snapshot
   * @returns {Promise<import('./cellgate').SnapshotModel>}
   */
  async getSnapshot(snapshot) {
    return this.requestJson('GET', `/v1/snapshots/${encodeURIComponent(snapshotId(snapshot))}`,
      { notFound: SnapshotNotFound });
  }

  /**
   * Deletes a snapshot (a model or its id) and its copy of the files;
   * sessions started from it keep theirs. SnapshotNotFound if it is gone, a
   * 409 while sessions are starting from it.
   * @param {string|{id: string}} snapshot
   * @returns {Promise<void>}
   */
  async deleteSnapshot(snapshot) {
    await this.request('DELETE', `/v1/snapshots/${encodeURIComponent(snapshotId(snapshot))}`,
      { notFound: SnapshotNotFound });
  }

  /**
   * Makes a named volume: a size-capped file system of the token's that
   * outlives sessions; `createSession({volumes})` mounts it. `name` is 1 to
   * 64 letters, digits, '-' and '_'; `sizeBytes` 8 MiB to 64 GiB (default
   * 1 GiB). A 409 CellgateError if the name exists, TooManyVolumes past the
   * token's quota.
   * @param {{name: string, sizeBytes?: number, signal?: AbortSignal}} opts
   * @returns {Promise<import('./cellgate').VolumeModel>}
   */
  async createVolume(opts) {
    const { name, sizeBytes, signal } = opts || /** @type {any} */ ({});
    /** @type {Record<string, any>} */
    const body = { name };
    if (sizeBytes !== undefined && sizeBytes !== null) body.size_bytes = sizeBytes;
    return this.requestJson('POST', '/v1/volumes', { json: body, signal, tooMany: TooManyVolumes });
  }

  /**
   * The caller's volumes (models).
   * @returns {Promise<import('./cellgate').VolumeModel[]>}
   */
  async listVolumes() {
    const body = await this.requestJson('GET', '/v1/volumes');
    return (body && body.volumes) || [];
  }

  /**
   * One volume (a model or its name), refreshed; VolumeNotFound if there is none.
   * @param {string|{name: string}} volume
   * @returns {Promise<import('./cellgate').VolumeModel>}
   */
  async getVolume(volume) {
    return this.requestJson('GET', volumePath(volume), { notFound: VolumeNotFound });
  }

  /**
   * Deletes a volume (a model or its name) and its files. VolumeNotFound if
   * there is none, a 409 CellgateError while a session mounts it.
   * @param {string|{name: string}} volume
   * @returns {Promise<void>}
   */
  async deleteVolume(volume) {
    await this.request('DELETE', volumePath(volume), { notFound: VolumeNotFound });
  }

  /**
   * Builds a template (the gateway's docs/templates.md) and waits for it:
   * `definition` is POST /v1/templates' body (`{name: "analytics:v1",
   * packages: {pip: [...]}, steps: [...], tags?: [...], ...}`); `onLog(line)`
   * gets the build's log as it comes (Server-Sent Events). Resolves to the
   * build model (`cached_steps`, `built_steps`, `logs`); rejects with
   * TemplateBuildError when a step fails, a 400 CellgateError for a bad
   * definition, 429 or 413 past the tenant's caps.
   * @param {Record<string, any>} definition
   * @param {{onLog?: (line: string) => void, signal?: AbortSignal}} [opts]
   * @returns {Promise<any>}
   */
  async buildTemplate(definition, opts = {}) {
    const started = await this.requestJson('POST', '/v1/templates', { json: definition, signal: opts.signal });
    const at = started.status_url;
    const res = await this.request('GET', at, { headers: { Accept: SSE_TYPE }, signal: opts.signal });
    if (res.body) {
      await readEventStream(res.body, (event, data) => {
        if (event === 'log' && opts.onLog) opts.onLog(JSON.parse(data).log);
      });
    }
    const build = await this.requestJson('GET', at, { signal: opts.signal });
    if (build.status !== 'ready') throw new TemplateBuildError(build);
    return build;
  }

  /**
   * The caller's templates (models: name, tag, reference, kernelspec, definition, …).
   * @returns {Promise<any[]>}
   */
  async listTemplates() {
    const body = await this.requestJson('GET', '/v1/templates');
    return (body && body.templates) || [];
  }

  /**
   * One template by "name" (its "latest") or "name:tag"; TemplateNotFound if there is none.
   * @param {string} name
   * @returns {Promise<any>}
   */
  async getTemplate(name) {
    return this.requestJson('GET', `/v1/templates/${encodeURIComponent(name)}`, { notFound: TemplateNotFound });
  }

  /**
   * Deletes a template ("name" or "name:tag"); its sessions run on until they end.
   * @param {string} name
   * @returns {Promise<void>}
   */
  async deleteTemplate(name) {
    await this.request('DELETE', `/v1/templates/${encodeURIComponent(name)}`, { notFound: TemplateNotFound });
  }

  /**
   * Points `tags` at what template `name` ("name:tag") is: the same build and
   * layers, no step run; a tag that named another build moves.
   * @param {string} name
   * @param {string|string[]} tags
   * @returns {Promise<{build_id: string, tags: string[]}>}
   */
  async tagTemplate(name, tags) {
    return this.requestJson('POST', `/v1/templates/${encodeURIComponent(name)}/tags`, {
      json: { tags: Array.isArray(tags) ? tags : [tags] }, notFound: TemplateNotFound,
    });
  }

  /**
   * The tags of template `name`: [{tag, build_id, created_at_ms}].
   * @param {string} name
   * @returns {Promise<{tag: string, build_id: string, created_at_ms: number}[]>}
   */
  async templateTags(name) {
    const body = await this.requestJson('GET', `/v1/templates/${encodeURIComponent(name)}/tags`, { notFound: TemplateNotFound });
    return body.tags;
  }

  /**
   * Runs code in a fresh sandbox that is destroyed afterwards. The produced
   * files come back inline (`files[i].content_base64`, and `files[i].content`
   * as bytes). With `opts.language` (a name or alias of GET /api/v2/runtimes:
   * 'c', 'rust', 'go', 'javascript', 'r', …), `code` is a program of that
   * language, compiled if it needs it and run with `opts.stdin` and
   * `opts.args`: the result is a ProgramRun ({language, version, compile, run,
   * status, usage}).
   * @param {string} code
   * @param {import('./cellgate').OneShotFiles} [files]
   * @param {{timeout?: number, signal?: AbortSignal, language?: string, version?: string, stdin?: string, args?: string[]}} [opts]
   * @returns {Promise<any>}
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
    if (opts.language !== undefined) {
      body.language = String(opts.language);
      body.version = opts.version === undefined ? '*' : String(opts.version);
      body.stdin = opts.stdin === undefined ? '' : String(opts.stdin);
      body.args = (opts.args || []).map(String);
      return this.requestJson('POST', '/v1/execute', { json: body, signal: opts.signal });
    }
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
    /** @type {Commands} processes in the session's sandbox */
    this.commands = new Commands(this);
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
   * Runs a request on something in the session (a file, a command); a 404 is
   * SessionNotFound when the session is gone, NotFound (the file, the
   * command) while it lives.
   * @private
   * @template T
   * @param {() => Promise<T>} call
   * @returns {Promise<T>}
   */
  async _itemCall(call) {
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
    throwIfAborted(opts.signal);
    const res = await this.client.request('POST', this._path('/execute'), {
      json: body, headers: { Accept: SSE_TYPE }, signal: opts.signal, notFound: SessionNotFound,
    });
    if (!isEventStream(res)) {
      // A gateway may answer JSON anyway; honour it rather than hang.
      return execution(JSON.parse(await res.text()));
    }
    return execution(await followEvents(res, 'end', opts.signal, (event, payload) => {
      if (opts.onEvent) opts.onEvent(event, payload);
      switch (event) {
        case 'stdout': if (opts.onStdout) opts.onStdout(payload.text ?? ''); break;
        case 'stderr': if (opts.onStderr) opts.onStderr(payload.text ?? ''); break;
        case 'display': if (opts.onDisplay) opts.onDisplay(payload); break;
        case 'result': if (opts.onResult) opts.onResult(payload); break;
        case 'error': if (opts.onError) opts.onError(payload); break;
        case 'files': if (opts.onFiles) opts.onFiles(payload.files || []); break;
        default: break;  // anything newer is in the end event's result too
      }
    }));
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
   * Pauses the session: its sandbox stops (no CPU, no memory held), its files
   * stay, and under gVisor its kernel's memory too (`model.pause.mode` says
   * "memory" or "files").
   * @returns {Promise<import('./cellgate').SessionModel>}
   */
  async pause() {
    this.model = await this.client.requestJson('POST', this._path('/pause'), { notFound: SessionNotFound });
    return this.model;
  }

  /**
   * Resumes a paused session (a no-op when it runs): the same kernel when its
   * memory was kept, else a new kernel on its files (`model.pause.resumed_from`).
   * @returns {Promise<import('./cellgate').SessionModel>}
   */
  async resume() {
    this.model = await this.client.requestJson('POST', this._path('/resume'), { notFound: SessionNotFound });
    return this.model;
  }

  /**
   * Takes a snapshot of the running session: a copy of its workspace (mode
   * "files": the kernel's memory is not kept), taken while it runs on.
   * `createSession({fromSnapshot})` starts sessions on copies of it; it
   * outlives this session until `deleteSnapshot()`. `name` (1 to 128
   * characters) defaults to its id. Rejects with TooManySnapshots past the
   * tenant's cap, a 409 CellgateError while the session restarts, pauses or
   * resumes.
   * @param {{name?: string, signal?: AbortSignal}} [opts]
   * @returns {Promise<import('./cellgate').SnapshotModel>}
   */
  async snapshot(opts = {}) {
    /** @type {Record<string, any>} */
    const body = {};
    if (opts.name !== undefined && opts.name !== null) body.name = opts.name;
    return this.client.requestJson('POST', this._path('/snapshots'), {
      json: body, signal: opts.signal, notFound: SessionNotFound, tooMany: TooManySnapshots,
    });
  }

  /**
   * The snapshots taken from this session that still exist, oldest first.
   * @returns {Promise<import('./cellgate').SnapshotModel[]>}
   */
  async snapshots() {
    const body = await this.client.requestJson('GET', this._path('/snapshots'), { notFound: SessionNotFound });
    return (body && body.snapshots) || [];
  }

  /**
   * Snapshots the session and starts `count` (1 to 16, default 1) new
   * sessions on copies of it, in one call. Each child has a new id and a new
   * kernel on its own copy of the files (`model.origin` names the snapshot
   * and this session); nothing it writes reaches this session or the other
   * children. The children are admitted all or none: past the session quota
   * it rejects with TooManySessions and nothing is made. Close the children
   * when done; the snapshot stays until `deleteSnapshot()`.
   * @param {{count?: number, name?: string, signal?: AbortSignal}} [opts]
   * @returns {Promise<{snapshot: import('./cellgate').SnapshotModel, sessions: Session[]}>}
   */
  async fork(opts = {}) {
    /** @type {Record<string, any>} */
    const body = {};
    if (opts.count !== undefined && opts.count !== null) body.count = opts.count;
    if (opts.name !== undefined && opts.name !== null) body.name = opts.name;
    const out = await this.client.requestJson('POST', this._path('/fork'), {
      json: body, signal: opts.signal, notFound: SessionNotFound,
    });
    return { snapshot: out.snapshot, sessions: (out.sessions || []).map((m) => new Session(this.client, m)) };
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
    return this._itemCall(() => this.client.requestJson('PUT', this._path(`/files/${quotePath(path)}`), {
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
    const body = await this._itemCall(() => this.client.requestJson('POST', this._path('/files'), { body: form, signal: opts.signal }));
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
    return this._fetchBody(`/files/${quotePath(path)}`, opts);
  }

  /**
   * The workspace (or its directory `opts.path`) as a tar archive, as
   * download() gives a file (`as`: 'arraybuffer', 'blob' or 'response').
   * Symlinks and special files are left out.
   * @param {{path?: string, as?: 'arraybuffer'|'blob'|'response', signal?: AbortSignal}} [opts]
   * @returns {Promise<any>}
   */
  async exportWorkspace(opts = {}) {
    const query = opts.path ? `?path=${encodeURIComponent(opts.path)}` : '';
    return this._fetchBody(`/workspace${query}`, opts);
  }

  /**
   * Unpacks a tar archive (what exportWorkspace gave, or any tar) into the
   * workspace or its directory `opts.path`: directories and regular files
   * only; links, devices and unsafe paths are skipped and reported.
   * @param {Blob|ArrayBuffer|ArrayBufferView} archive
   * @param {{path?: string, signal?: AbortSignal}} [opts]
   * @returns {Promise<{files: number, directories: number, bytes: number, skipped: {path: string, why: string}[], skipped_count: number}>}
   */
  async importWorkspace(archive, opts = {}) {
    const query = opts.path ? `?path=${encodeURIComponent(opts.path)}` : '';
    return this._itemCall(() => this.client.requestJson('PUT', this._path(`/workspace${query}`), {
      body: toBody(archive), headers: { 'Content-Type': 'application/x-tar' }, signal: opts.signal,
    }));
  }

  async _fetchBody(suffix, opts) {
    const res = await this._itemCall(() => this.client.request('GET', this._path(suffix), {
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
   * The session's ledger, oldest first: records with `seq` greater than
   * `after` (page on with `nextAfter`).
   * @param {{after?: number, limit?: number}} [opts]
   * @returns {Promise<{executions: import('./cellgate').Usage[], nextAfter: number | null}>}
   */
  async executions({ after = 0, limit = 100 } = {}) {
    const body = await this.client.requestJson('GET', this._path(`/executions?after=${after}&limit=${limit}`),
      { notFound: SessionNotFound });
    return { executions: body.executions || [], nextAfter: body.next_after ?? null };
  }

  /**
   * The entries of a workspace directory ('' is /workspace).
   * @param {string} [path]
   * @returns {Promise<import('./cellgate').FileInfo[]>}
   */
  async listFiles(path = '') {
    const q = path ? `?path=${encodeURIComponent(path)}` : '';
    const body = await this._itemCall(() => this.client.requestJson('GET', this._path(`/files${q}`)));
    return (body && body.entries) || [];
  }

  /**
   * Deletes a file, or a directory recursively.
   * @param {string} path
   * @returns {Promise<void>}
   */
  async removeFile(path) {
    await this._itemCall(() => this.client.request('DELETE', this._path(`/files/${quotePath(path)}`)));
  }

  /**
   * The session's network policy (docs/egress.md): `enabled` is false when
   * the session was created without one (its sandbox reaches nothing).
   * @returns {Promise<import('./cellgate').NetworkPolicy>}
   */
  async network() {
    return this.client.requestJson('GET', this._path('/network'), { notFound: SessionNotFound });
  }

  /**
   * Changes the session's policy for new connections: each list given
   * replaces the session's, the others stay. Only a session created with a
   * network can change it (else a 409 CellgateError).
   * @param {{allow?: string[], deny?: string[], presets?: string[]}} changes
   * @returns {Promise<import('./cellgate').NetworkPolicy>}
   */
  async setNetwork(changes) {
    /** @type {Record<string, string[]>} */
    const body = {};
    for (const key of ['allow', 'deny', 'presets']) {
      const value = /** @type {Record<string, any>} */ (changes || {})[key];
      if (value !== undefined && value !== null) body[key] = typeof value === 'string' ? [value] : [...value];
    }
    return this.client.requestJson('PATCH', this._path('/network'), { json: body, notFound: SessionNotFound });
  }

  /**
   * The session's connection attempts, allowed and refused, oldest first:
   * records with `seq` greater than `after` (page on with `nextAfter`, null
   * on the last page).
   * @param {{after?: number, limit?: number}} [opts]
   * @returns {Promise<{connections: import('./cellgate').NetworkConnection[], nextAfter: number | null}>}
   */
  async networkLog({ after = 0, limit = 100 } = {}) {
    const body = await this.client.requestJson('GET', this._path(`/network/log?after=${after}&limit=${limit}`),
      { notFound: SessionNotFound });
    return { connections: body.connections || [], nextAfter: body.next_after ?? null };
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

/**
 * A command ended with a non-zero exit code (or was killed). It carries the
 * CommandResult's fields (`pid`, `exitCode`, `signal`, `stdout`, `stderr`,
 * `truncated`, `error`) and the result itself as `result`.
 */
export class CommandExitError extends CellgateError {
  /** @param {import('./cellgate').CommandResult} result */
  constructor(result) {
    super(200, 'command_failed', `command exited with ${result.exitCode}`
      + (result.signal ? ` (${result.signal})` : '')
      + (result.stderr ? `: ${result.stderr.slice(-500)}` : ''));
    this.name = 'CommandExitError';
    /** @type {import('./cellgate').CommandResult} */
    this.result = result;
    this.pid = result.pid;
    this.exitCode = result.exitCode;
    this.signal = result.signal;
    this.stdout = result.stdout;
    this.stderr = result.stderr;
    this.truncated = result.truncated;
    this.error = result.error;
  }
}

/**
 * A CommandResult from the gateway's command model (with its "exit").
 * @param {any} model
 * @param {{stdout?: string, stderr?: string}} [output] streamed output, when it did not come in the model
 * @returns {import('./cellgate').CommandResult}
 */
function commandResult(model, output = {}) {
  const exit = (model && model.exit) || {};
  return {
    pid: model.pid,
    exitCode: exit.exit_code ?? null,
    signal: exit.signal ?? null,
    stdout: output.stdout ?? model.stdout ?? '',
    stderr: output.stderr ?? model.stderr ?? '',
    truncated: !!model.truncated,
    error: exit.error ?? null,
    model,
  };
}

/** @param {import('./cellgate').CommandResult} result @returns {import('./cellgate').CommandResult} */
function succeeded(result) {
  if (result.exitCode !== 0) throw new CommandExitError(result);
  return result;
}

/**
 * `session.commands`: processes in the session's sandbox, with the kernel's
 * own confinement (same user, no network, the session's limits). A command
 * line runs with `bash -lc` in /home/user (the workspace) unless an argv is
 * given.
 */
export class Commands {
  /** @param {Session} session */
  constructor(session) {
    /** @type {Session} */
    this.session = session;
  }

  /** @private @param {string|number} [pid] @param {string} [suffix] */
  _path(pid, suffix = '') {
    return this.session._path('/commands' + (pid === undefined ? '' : `/${encodeURIComponent(String(pid))}`) + suffix);
  }

  /**
   * A request on one command (NotFound for an unknown pid, SessionNotFound
   * when the session is gone).
   * @private
   * @param {string} method
   * @param {string|number} pid
   * @param {string} suffix
   * @param {Parameters<Cellgate['request']>[2]} [opts]
   */
  _request(method, pid, suffix, opts) {
    return this.session._itemCall(() => this.session.client.requestJson(method, this._path(pid, suffix), opts));
  }

  /**
   * Runs a command: a shell command line (`bash -lc`), or an argv (an array,
   * or `{argv}`).
   *
   * In the foreground it resolves to the CommandResult once the command has
   * ended and rejects with a CommandExitError unless it exited 0. With
   * `onStdout`/`onStderr` (or `signal`) the output streams as Server-Sent
   * Events as it arrives; aborting `signal` drops the stream, which makes the
   * gateway kill the command, and rejects with the abort reason.
   *
   * With `background: true` it resolves at once to a CommandHandle.
   *
   * @param {string|string[]|{cmd?: string, argv?: string[]}} cmd
   * @param {import('./cellgate').CommandOptions} [opts]
   * @returns {Promise<import('./cellgate').CommandResult|CommandHandle>}
   */
  async run(cmd, opts = {}) {
    /** @type {Record<string, any>} */
    const body = Array.isArray(cmd) ? { argv: cmd.map(String) }
      : cmd && typeof cmd === 'object' ? { cmd: cmd.cmd, argv: cmd.argv } : { cmd };
    for (const key of ['cwd', 'env', 'stdin', 'tty', 'tag']) {
      const value = /** @type {Record<string, any>} */ (opts)[key];
      if (value !== undefined && value !== null) body[key] = value;
    }
    // The gateway reads whole seconds: round up (a fraction would read as 0, no limit).
    if (opts.timeout !== undefined && opts.timeout !== null) body.timeout_s = Math.ceil(/** @type {number} */ (seconds(opts.timeout)));
    const client = this.session.client;
    if (opts.background) {
      body.background = true;
      const model = await client.requestJson('POST', this._path(), { json: body, signal: opts.signal, notFound: SessionNotFound });
      return new CommandHandle(this, model);
    }
    const stream = opts.stream ?? (typeof opts.onStdout === 'function' || typeof opts.onStderr === 'function' || !!opts.signal);
    if (!stream) {
      return succeeded(commandResult(await client.requestJson('POST', this._path(), { json: body, notFound: SessionNotFound })));
    }
    throwIfAborted(opts.signal);
    const res = await client.request('POST', this._path(), {
      json: body, headers: { Accept: SSE_TYPE }, signal: opts.signal, notFound: SessionNotFound,
    });
    return succeeded(await followCommand(res, opts));
  }

  /**
   * The session's commands, running and recently ended (models).
   * @returns {Promise<import('./cellgate').CommandModel[]>}
   */
  async list() {
    const body = await this.session.client.requestJson('GET', this._path(), { notFound: SessionNotFound });
    return (body && body.commands) || [];
  }

  /**
   * One command's model (NotFound for an unknown pid).
   * @param {number} pid
   * @returns {Promise<import('./cellgate').CommandModel>}
   */
  get(pid) {
    return this._request('GET', pid, '');
  }

  /**
   * A handle on a command started earlier (NotFound for an unknown pid).
   * @param {number} pid
   * @returns {Promise<CommandHandle>}
   */
  async connect(pid) {
    return new CommandHandle(this, await this.get(pid));
  }
}

/**
 * Reads a command's event stream (`start`, `stdout`, `stderr`, `pty`, `exit`)
 * into a CommandResult; terminal output (`pty`) counts as stdout, as it does
 * in the gateway's JSON answer.
 * @param {Response} res
 * @param {{onStdout?: (text: string) => void, onStderr?: (text: string) => void, signal?: AbortSignal}} opts
 * @returns {Promise<import('./cellgate').CommandResult>}
 */
async function followCommand(res, opts) {
  if (!isEventStream(res)) return commandResult(JSON.parse(await res.text()));  // a JSON answer after all
  /** @type {any} */
  let model = {};
  const out = { stdout: '', stderr: '' };
  const pty = new TextDecoder('utf-8');
  const emit = (name, text) => {
    out[name] += text;
    const cb = name === 'stdout' ? opts.onStdout : opts.onStderr;
    if (cb && text) cb(text);
  };
  const exit = await followEvents(res, 'exit', opts.signal, (event, payload) => {
    switch (event) {
      case 'start': model = payload; break;
      case 'stdout': case 'stderr': emit(event, payload.text ?? ''); break;
      case 'pty': emit('stdout', pty.decode(base64ToBytes(payload.data_base64 || ''), { stream: true })); break;
      default: break;
    }
  });
  emit('stdout', pty.decode());
  return commandResult({ ...model, running: false, exit }, out);
}

/**
 * A command running in the background: feed its stdin, signal it, wait for it.
 */
export class CommandHandle {
  /**
   * @param {Commands} commands
   * @param {import('./cellgate').CommandModel} model
   */
  constructor(commands, model) {
    /** @private */
    this._commands = commands;
    /** @type {number} */
    this.pid = model.pid;
    /** @type {import('./cellgate').CommandModel} the last model seen */
    this.model = model;
  }

  /**
   * Writes to the command's stdin (strings as UTF-8); `eof: true` closes it
   * afterwards (^D on a terminal).
   * @param {string|Blob|ArrayBuffer|ArrayBufferView} data
   * @param {{eof?: boolean}} [opts]
   * @returns {Promise<void>}
   */
  async sendStdin(data, opts = {}) {
    /** @type {Record<string, any>} */
    const body = typeof data === 'string' ? { data } : { data_base64: bytesToBase64(await toBytes(data)) };
    if (opts.eof) body.eof = true;
    await this._commands._request('POST', this.pid, '/stdin', { json: body });
  }

  /** Closes the command's stdin. @returns {Promise<void>} */
  closeStdin() {
    return this.sendStdin('', { eof: true });
  }

  /**
   * Sends a signal (SIGINT, SIGTERM, SIGKILL, SIGHUP, SIGQUIT, SIGUSR1,
   * SIGUSR2); false when the command had already ended.
   * @param {string} [signal]
   * @returns {Promise<boolean>}
   */
  async kill(signal = 'SIGKILL') {
    try {
      await this._commands._request('POST', this.pid, '/signal', { json: { signal } });
      return true;
    } catch (e) {
      if (e instanceof CellgateError && e.status === 409) return false;
      throw e;
    }
  }

  /**
   * Resizes the command's terminal (commands started with `tty`).
   * @param {number} rows
   * @param {number} cols
   * @returns {Promise<void>}
   */
  async resize(rows, cols) {
    await this._commands._request('POST', this.pid, '/resize', { json: { rows, cols } });
  }

  /**
   * Refreshes and returns the command's model.
   * @returns {Promise<import('./cellgate').CommandModel>}
   */
  async info() {
    this.model = await this._commands.get(this.pid);
    return this.model;
  }

  /**
   * Follows the command to its end (its output so far first, then as it
   * arrives) and resolves to its CommandResult; rejects with a
   * CommandExitError unless it exited 0. Aborting `signal` stops following;
   * the command keeps running.
   * @param {{onStdout?: (text: string) => void, onStderr?: (text: string) => void, signal?: AbortSignal}} [opts]
   * @returns {Promise<import('./cellgate').CommandResult>}
   */
  async wait(opts = {}) {
    throwIfAborted(opts.signal);
    const commands = this._commands;
    const res = await commands.session._itemCall(() => commands.session.client.request('GET', commands._path(this.pid, '/events'), {
      headers: { Accept: SSE_TYPE }, signal: opts.signal,
    }));
    const result = await followCommand(res, opts);
    this.model = result.model;
    return succeeded(result);
  }
}

function abortError() {
  if (typeof DOMException === 'function') return new DOMException('The operation was aborted.', 'AbortError');
  const e = new Error('The operation was aborted.');
  e.name = 'AbortError';
  return e;
}

export default Cellgate;
