// Type declarations for cellgate.js — the JavaScript client of cellgate's /v1
// agent API (docs/agent-api.md). Hand-written; keep in step with cellgate.js.

export declare const version: string;

/** MIME type → data, as Jupyter sends it (images base64, SVG/HTML/text as strings, JSON as objects). */
export type MimeBundle = {
  'text/plain'?: string;
  'text/html'?: string;
  'text/markdown'?: string;
  'text/latex'?: string;
  'image/png'?: string;
  'image/jpeg'?: string;
  'image/svg+xml'?: string;
  'application/json'?: unknown;
  [mime: string]: unknown;
};

export interface SessionLimits {
  timeout_s: number;
  idle_timeout_s: number;
  lifetime_s: number;
  output_limit_bytes: number;
  upload_limit_bytes: number;
  memory_bytes?: number;
  cpu_millis?: number;
  pids?: number;
  workspace_bytes?: number;
}

export interface SessionModel {
  id: string;
  kernel: string;
  state: string;
  created: string;
  last_activity: string;
  expires_at: string | null;
  limits: SessionLimits;
  lifecycle?: { on_idle: 'delete' | 'pause'; auto_resume: boolean };
  pause?: SessionPause;
  /** null, or where a session started from a snapshot (or a fork) came from */
  origin?: SessionOrigin | null;
  /** the named volumes the session mounts */
  volumes?: SessionVolume[];
}

/** A named volume as a session mounts it. */
export interface SessionVolume {
  name: string;
  /** /volumes/<name> */
  path: string;
  read_only: boolean;
}

/** A volume to mount in `createSession({volumes})`; one writer at a time, read-only mounts are unlimited. */
export interface VolumeMountOptions {
  name: string;
  /** /volumes/<something>; default /volumes/<volume name> */
  path?: string;
  /** sent as read_only (default false) */
  readOnly?: boolean;
  read_only?: boolean;
}

/** A named volume: a size-capped file system of the token's that outlives sessions. */
export interface VolumeModel {
  name: string;
  /** its cap */
  size_bytes: number;
  /** what its files take */
  used_bytes: number;
  /** ISO 8601 */
  created: string;
  /** the sessions that mount it now */
  mounts: { session: string; path: string; read_only: boolean }[];
}

export interface SessionOrigin {
  /** the snapshot's id */
  snapshot: string;
  /** the id of the session the snapshot was taken from */
  source: string;
  /** what the snapshot held: the workspace's files, not the kernel's memory */
  mode: 'files';
}

/** A snapshot: an immutable copy of a session's workspace, taken while it ran. */
export interface SnapshotModel {
  id: string;
  /** the name it was given, else its id */
  name: string;
  /** the id of the session it was taken from (which may have ended since) */
  session: string;
  /** the source's kernelspec */
  kernel: string;
  /** ISO 8601 */
  created: string;
  /** the workspace is copied, the kernel's memory is not */
  mode: 'files';
  /** the files' size */
  bytes: number;
  /** what the copy takes on disk */
  disk_bytes: number;
  /** whether the copy shares its blocks with the source (a reflink) */
  reflinked: boolean;
}

/** What `session.fork()` made: the snapshot and the sessions started from it. */
export interface ForkResult {
  snapshot: SnapshotModel;
  sessions: Session[];
}

export interface SessionPause {
  paused: boolean;
  /** what the pause kept: the kernel's memory and files, or its files only */
  mode: 'memory' | 'files' | null;
  since: string | null;
  image_bytes: number;
  /** the last resume: the same kernel ("memory"), a new one on the files ("files"), or a restart */
  resumed_from: 'memory' | 'files' | 'restart' | null;
  pauses: number;
  resume_failed?: string;
}

export interface SessionOptions {
  /** kernelspec name (default: the gateway's default) */
  kernel?: string;
  /** one of your templates, "name" or "name:tag" (docs/templates.md) */
  template?: string;
  /** default per-execution timeout, seconds */
  timeout?: number;
  /** the session ends after this many idle seconds */
  idleTimeout?: number;
  /** the session ends this many seconds after it started */
  lifetime?: number;
  /** { on_idle: 'pause' } pauses an idle session instead of ending it; auto_resume (default true) */
  lifecycle?: { on_idle?: 'delete' | 'pause'; auto_resume?: boolean };
  /** stdout + stderr kept per execution, bytes */
  outputLimit?: number;
  /** KERNEL_* names only */
  env?: Record<string, string>;
  /** a way out for the sandbox (docs/egress.md); without it, it reaches nothing */
  network?: NetworkOptions;
  /** start on a copy of this snapshot's files (a model or its id); not with kernel, env or network */
  fromSnapshot?: string | SnapshotModel;
  /** named volumes to mount (at most 8; names or mounts); VolumeNotFound for an unknown one, a 409 for a second writer */
  volumes?: (string | VolumeMountOptions)[];
  /** a tar archive unpacked into the new session's workspace before it is handed over (report: session.model.imported) */
  workspace?: Blob | ArrayBuffer | ArrayBufferView;
  signal?: AbortSignal;
  /** the API's own snake_case names (timeout_s, …) pass through as given */
  [apiName: string]: unknown;
}

/**
 * A session's network at creation: entries such as 'example.com',
 * 'example.com:8443', '*.example.com', '10.1.2.0/24', '[fd00::/8]:443'.
 * A connection is allowed when an allow entry matches and no deny entry does.
 */
export interface NetworkOptions {
  allow?: string[];
  deny?: string[];
  /** named allow lists the operator configured, e.g. 'python-packages' */
  preset?: string | string[];
  presets?: string[];
}

/** `session.network()`: the session's own lists (the kernelspec's and tenant's layers apply too). */
export interface NetworkPolicy {
  /** false: the session was created without a network and reaches nothing */
  enabled: boolean;
  allow?: string[];
  deny?: string[];
  presets?: string[];
}

/** One connection attempt in the session's egress log. */
export interface NetworkConnection {
  seq: number;
  /** Unix ms */
  time_ms: number;
  duration_ms: number;
  /** 'CONNECT' for a tunnel, else the HTTP method */
  method: string;
  /** as the code asked for it */
  host: string;
  port: number;
  /** the address the name led to ('' when it was not looked up) */
  address: string;
  bytes_up: number;
  bytes_down: number;
  verdict: 'allowed' | 'refused';
  /** the entry that decided ('' when none matched) */
  rule: string;
  /** why it was refused, or how it ended ('closed') */
  reason: string;
  /** the proxy added an operator's credential header */
  credential_injected: boolean;
  /** the proxy ended the TLS itself (docs/egress.md) */
  tls_terminated?: boolean;
}

export interface OutputResult {
  type: 'display_data' | 'execute_result';
  data: MimeBundle;
  metadata: Record<string, unknown>;
  is_main_result: boolean;
}

export interface ExecutionErrorInfo {
  ename: string;
  evalue: string;
  /** lines with ANSI colour codes */
  traceback: string[];
  /** the same without colours */
  traceback_text: string;
}

export interface FileInfo {
  path: string;
  name?: string;
  type?: 'file' | 'directory';
  size: number | null;
  mime_type: string | null;
  modified?: string;
  /** the gateway's URL for the file (needs the Authorization header) */
  url?: string;
  /** in an execution result: what happened to it */
  change?: 'created' | 'modified';
  /** one-shot results: the file's bytes, base64 */
  content_base64?: string;
  /** one-shot results: content_base64 decoded */
  readonly content?: Uint8Array;
}

export type ExecutionStatus = 'ok' | 'error' | 'timeout' | 'interrupted' | 'kernel_died';

/** A cell's record in the session's ledger (`execution.usage`, `session.executions()`). */
export interface Usage {
  execution_id: string;
  session_id: string;
  seq?: number;
  code_sha256: string;
  code_bytes: number;
  started_at: string;
  ended_at: string;
  wall_ms: number;
  status: ExecutionStatus;
  /** CPU seconds of the sandbox's cgroup during the cell; null when not measurable */
  cpu_s: number | null;
  /** the sandbox's memory peak during the cell; null when not measurable */
  peak_memory_bytes: number | null;
  peak_memory_increase_bytes?: number;
  memory_bytes_at_start?: number;
  memory_bytes_at_end?: number;
  stdout_bytes: number;
  stderr_bytes: number;
  result_bytes: number;
  results: number;
  files: { created: { path: string; size: number }[]; modified: { path: string; size: number }[]; deleted: { path: string; size: number }[] };
  files_complete: boolean;
  egress: unknown[];
}

export interface Execution {
  execution_id: string;
  usage: Usage;
  status: ExecutionStatus;
  execution_count: number | null;
  stdout: string;
  stderr: string;
  results: OutputResult[];
  error: ExecutionErrorInfo | null;
  files: FileInfo[];
  duration_ms: number;
  truncated: { stdout: boolean; stderr: boolean; results: boolean; files: boolean };
  kernel_restarted: boolean;
  /** the cell's value as text/plain (the main result), or null */
  readonly text: string | null;
}

/** A `display` event's payload. */
export interface DisplayEvent {
  data: MimeBundle;
  metadata: Record<string, unknown>;
}

/** A `result` event's payload (the cell's value). */
export interface ResultEvent extends DisplayEvent {
  execution_count: number;
}

export interface ExecuteOptions {
  /** execution timeout for this cell, seconds */
  timeout?: number;
  onStdout?: (text: string) => void;
  onStderr?: (text: string) => void;
  onDisplay?: (output: DisplayEvent) => void;
  onResult?: (output: ResultEvent) => void;
  onError?: (error: ExecutionErrorInfo) => void;
  onFiles?: (files: FileInfo[]) => void;
  /** every event, before its specific callback: ('stdout', {text}), …, ('end', result) */
  onEvent?: (event: string, data: any) => void;
  /** aborting disconnects the stream; the gateway interrupts the cell; execute() rejects with an AbortError */
  signal?: AbortSignal;
  /** force (true) or forbid (false) streaming; default: stream when a callback or signal is given */
  stream?: boolean;
}

/** A command's exit: `exit_code` is 128 + n for signal n, with `signal` naming it. */
export interface CommandExit {
  exit_code: number;
  signal: string | null;
  /** why the command could not run, when it could not */
  error?: string;
}

/** The gateway's model of a command (`GET …/commands/{pid}`). */
export interface CommandModel {
  pid: number;
  argv: string[];
  cwd: string;
  tty: boolean;
  stdin: boolean;
  tag: string;
  started: string;
  running: boolean;
  /** null while it runs */
  exit: CommandExit | null;
  url: string;
  /** foreground JSON answers only */
  stdout?: string;
  stderr?: string;
  truncated?: boolean;
}

/** How a command ended and what it printed (within the session's output cap). */
export interface CommandResult {
  pid: number;
  exitCode: number | null;
  /** the signal that ended it ('SIGKILL', …), or null */
  signal: string | null;
  stdout: string;
  stderr: string;
  /** output went past the session's output cap (foreground JSON answers) */
  truncated: boolean;
  /** why the command could not run, or null */
  error: string | null;
  /** the gateway's model of the ended command */
  model: CommandModel;
}

export interface CommandOutputCallbacks {
  onStdout?: (text: string) => void;
  onStderr?: (text: string) => void;
}

export interface CommandOptions extends CommandOutputCallbacks {
  /** working directory; default /home/user (the workspace); relative paths are under it */
  cwd?: string;
  /** environment variables (no CELLGATE_* names) */
  env?: Record<string, string>;
  /** seconds (rounded up) before a foreground command is killed; default: the session's cell limit */
  timeout?: number;
  /** keep a stdin pipe (a background command, fed with sendStdin) */
  stdin?: boolean;
  /** a terminal: true (24×80) or its size; its output counts as stdout */
  tty?: boolean | { rows?: number; cols?: number };
  /** a label of yours, shown in list() */
  tag?: string;
  /** start it and resolve to a CommandHandle at once */
  background?: boolean;
  /** foreground: aborting drops the stream, the gateway kills the command, run() rejects with an AbortError */
  signal?: AbortSignal;
  /** force (true) or forbid (false) streaming; default: stream when a callback or signal is given */
  stream?: boolean;
}

export interface CommandWaitOptions extends CommandOutputCallbacks {
  /** aborting stops following (the command keeps running); wait() rejects with an AbortError */
  signal?: AbortSignal;
}

export type UploadData = Blob | ArrayBuffer | ArrayBufferView | string;

/** runOnce with a language: a one-shot program of one of GET /api/v2/runtimes's runtimes. */
export interface ProgramOptions {
  language: string;
  version?: string;
  stdin?: string;
  args?: string[];
  timeout?: number;
  signal?: AbortSignal;
}
export interface ProgramStage {
  stdout: string;
  stderr: string;
  exit_code: number | null;
  signal: string | null;
  /** Piston's: null (a clean exit), 'RE', 'SG', 'TO', 'OL', 'EL', 'XX'. */
  status: string | null;
  message: string | null;
  cpu_ms: number;
  wall_ms: number;
  peak_memory_bytes: number;
}
export interface ProgramRun {
  language: string;
  version: string;
  compile: ProgramStage | null;
  run: ProgramStage | null;
  status: 'ok' | 'error' | 'timeout' | 'compile_error';
  usage: Record<string, any>;
}

/** runOnce files: {path: data}, [{path, data}] or File objects (stored under their names). */
export type OneShotFiles = Record<string, UploadData> | Array<{ path: string; data: UploadData } | File>;

export interface ClientOptions {
  /** the gateway's base URL; '' (default in browsers) = the page's origin; Node default: $CELLGATE_URL */
  url?: string;
  /** sent as `Authorization: Bearer <token>`; Node default: $CELLGATE_TOKEN */
  token?: string | null;
  /** a fetch to use instead of the global one */
  fetch?: typeof fetch;
}

export interface RequestOptions {
  json?: unknown;
  body?: BodyInit;
  headers?: Record<string, string>;
  signal?: AbortSignal;
  /** the class a 404 rejects with (default NotFound) */
  notFound?: typeof CellgateError;
  /** the class a 429 rejects with (default TooManySessions) */
  tooMany?: typeof CellgateError;
}

/** The gateway refused a request (status ≥ 400), or could not be reached (status null). */
export declare class CellgateError extends Error {
  constructor(status: number | null, reason: string, message: string);
  /** HTTP status, or null when no response arrived */
  status: number | null;
  /** the gateway's `reason` ("Not Found", "Forbidden", …) or "connection_failed", "stream_incomplete", "bad_response", "bad_event", "command_failed" */
  reason: string;
  /** the gateway's `message` */
  message: string;
}
/** 404: a file, or a session, that does not exist. */
export declare class NotFound extends CellgateError {}
/** 404 on a session: deleted, culled for idleness or past its lifetime. */
export declare class SessionNotFound extends NotFound {}
/** 404 on a snapshot: deleted, or never there. */
export declare class SnapshotNotFound extends NotFound {}
/** 404 on a named volume: there is none of that name. */
export declare class VolumeNotFound extends NotFound {}
export declare class TemplateNotFound extends NotFound {}
/** a template's build ended in an error: `build` is the build model, `failure` its step, exit code, message and log tail */
export declare class TemplateBuildError extends CellgateError {
  build: any;
  failure: { step?: { index: number; type: string }; exit_code?: number; message: string; log_tail?: string };
}
/** 429: too many sessions. */
export declare class TooManySessions extends CellgateError {}
/** 429 on a snapshot: the tenant keeps as many as it may; delete one first. */
export declare class TooManySnapshots extends CellgateError {}
/** 429 on a volume: the token's volume quota (count or total bytes) is full. */
export declare class TooManyVolumes extends CellgateError {}
/** A command exited non-zero or was killed; it carries the CommandResult's fields. */
export declare class CommandExitError extends CellgateError {
  constructor(result: CommandResult);
  result: CommandResult;
}
export interface CommandExitError extends Omit<CommandResult, 'model'> {}

export declare class Cellgate {
  constructor(options?: ClientOptions);
  readonly url: string;
  token: string | null;
  /** an API path as a URL on this gateway */
  absolute(path: string): string;
  /** a raw request; throws CellgateError for statuses ≥ 400 */
  request(method: string, path: string, opts?: RequestOptions): Promise<Response>;
  requestJson(method: string, path: string, opts?: RequestOptions): Promise<any>;
  createSession(opts?: SessionOptions): Promise<Session>;
  /** attaches to an existing session (SessionNotFound if it ended) */
  connect(id: string): Promise<Session>;
  /** a Session for an id, without asking the gateway */
  session(id: string): Session;
  listSessions(): Promise<SessionModel[]>;
  /** the caller's snapshots, oldest first */
  listSnapshots(): Promise<SnapshotModel[]>;
  /** one snapshot (SnapshotNotFound if it is gone) */
  getSnapshot(snapshot: string | SnapshotModel): Promise<SnapshotModel>;
  /** deletes a snapshot; sessions started from it keep their files (SnapshotNotFound if it is gone) */
  deleteSnapshot(snapshot: string | SnapshotModel): Promise<void>;
  /** makes a named volume (sizeBytes 8 MiB to 64 GiB, default 1 GiB); a 409 if the name exists, TooManyVolumes past the quota */
  createVolume(opts: { name: string; sizeBytes?: number; signal?: AbortSignal }): Promise<VolumeModel>;
  /** the caller's volumes */
  listVolumes(): Promise<VolumeModel[]>;
  /** one volume (VolumeNotFound if there is none) */
  getVolume(volume: string | VolumeModel): Promise<VolumeModel>;
  /** deletes a volume and its files (VolumeNotFound if there is none, a 409 while a session mounts it) */
  deleteVolume(volume: string | VolumeModel): Promise<void>;
  /** builds a template (POST /v1/templates' body) and waits; onLog gets its log as it comes */
  buildTemplate(definition: Record<string, any>,
                opts?: { onLog?: (line: string) => void; signal?: AbortSignal }): Promise<any>;
  listTemplates(): Promise<any[]>;
  getTemplate(name: string): Promise<any>;
  deleteTemplate(name: string): Promise<void>;
  tagTemplate(name: string, tags: string | string[]): Promise<{ build_id: string; tags: string[] }>;
  templateTags(name: string): Promise<{ tag: string; build_id: string; created_at_ms: number }[]>;
  runOnce(code: string, files?: OneShotFiles, opts?: { timeout?: number; signal?: AbortSignal }): Promise<Execution>;
  runOnce(code: string, files: OneShotFiles | undefined, opts: ProgramOptions): Promise<ProgramRun>;
  static runOnce(code: string, files?: OneShotFiles,
                 opts?: ClientOptions & { timeout?: number; signal?: AbortSignal }): Promise<Execution>;
  static runOnce(code: string, files: OneShotFiles | undefined, opts: ClientOptions & ProgramOptions): Promise<ProgramRun>;
}

export declare class Session {
  constructor(client: Cellgate, model: SessionModel | { id: string });
  readonly client: Cellgate;
  readonly id: string;
  /** the last session model seen */
  model: SessionModel | { id: string };
  readonly limits: SessionLimits | undefined;
  /** processes in the session's sandbox */
  readonly commands: Commands;
  info(): Promise<SessionModel>;
  execute(code: string, opts?: ExecuteOptions): Promise<Execution>;
  interrupt(): Promise<void>;
  restart(): Promise<SessionModel>;
  pause(): Promise<SessionModel>;
  resume(): Promise<SessionModel>;
  /** a copy of the workspace (not the kernel's memory); TooManySnapshots past the tenant's cap */
  snapshot(opts?: { name?: string; signal?: AbortSignal }): Promise<SnapshotModel>;
  /** the snapshots taken from this session that still exist */
  snapshots(): Promise<SnapshotModel[]>;
  /** a snapshot and `count` (1..16, default 1) new sessions on copies of it; all or none (TooManySessions) */
  fork(opts?: { count?: number; name?: string; signal?: AbortSignal }): Promise<ForkResult>;
  upload(path: string, data: UploadData, opts?: { signal?: AbortSignal }): Promise<FileInfo>;
  uploadMany(files: Record<string, UploadData> | File[], opts?: { path?: string; signal?: AbortSignal }): Promise<FileInfo[]>;
  download(path: string, opts?: { as?: 'arraybuffer'; signal?: AbortSignal }): Promise<ArrayBuffer>;
  download(path: string, opts: { as: 'blob'; signal?: AbortSignal }): Promise<Blob>;
  download(path: string, opts: { as: 'text'; signal?: AbortSignal }): Promise<string>;
  download(path: string, opts: { as: 'response'; signal?: AbortSignal }): Promise<Response>;
  /** The workspace (or its directory `path`) as a tar archive; symlinks and special files are left out. */
  exportWorkspace(opts?: { path?: string; as?: 'arraybuffer'; signal?: AbortSignal }): Promise<ArrayBuffer>;
  exportWorkspace(opts: { path?: string; as: 'blob'; signal?: AbortSignal }): Promise<Blob>;
  exportWorkspace(opts: { path?: string; as: 'response'; signal?: AbortSignal }): Promise<Response>;
  /** Unpacks a tar archive into the workspace (or its directory `path`); links, devices and unsafe paths are skipped. */
  importWorkspace(archive: Blob | ArrayBuffer | ArrayBufferView, opts?: { path?: string; signal?: AbortSignal }): Promise<{
    files: number; directories: number; bytes: number; skipped: { path: string; why: string }[]; skipped_count: number;
  }>;
  listFiles(path?: string): Promise<FileInfo[]>;
  executions(opts?: { after?: number; limit?: number }): Promise<{ executions: Usage[]; nextAfter: number | null }>;
  removeFile(path: string): Promise<void>;
  /** GET …/network */
  network(): Promise<NetworkPolicy>;
  /** PATCH …/network: the lists given replace the session's (409 for a session created without a network) */
  setNetwork(changes: { allow?: string[]; deny?: string[]; presets?: string[] }): Promise<NetworkPolicy>;
  /** GET …/network/log, oldest first; page on with nextAfter (null on the last page) */
  networkLog(opts?: { after?: number; limit?: number }): Promise<{ connections: NetworkConnection[]; nextAfter: number | null }>;
  /** the file's URL; it needs the Authorization header (no <img src>, no plain links) */
  fileUrl(path: string, opts?: { download?: boolean }): string;
  close(): Promise<void>;
}

/** `session.commands`: processes in the session's sandbox (`bash -lc` for a command line). */
export declare class Commands {
  constructor(session: Session);
  readonly session: Session;
  /** foreground: the result, or a CommandExitError unless it exits 0 */
  run(cmd: string | string[] | { cmd: string } | { argv: string[] },
      opts?: CommandOptions & { background?: false }): Promise<CommandResult>;
  run(cmd: string | string[] | { cmd: string } | { argv: string[] },
      opts: CommandOptions & { background: true }): Promise<CommandHandle>;
  /** running and recently ended commands */
  list(): Promise<CommandModel[]>;
  /** one command's model (NotFound for an unknown pid) */
  get(pid: number): Promise<CommandModel>;
  /** a handle on a command started earlier */
  connect(pid: number): Promise<CommandHandle>;
}

/** A background command. */
export declare class CommandHandle {
  constructor(commands: Commands, model: CommandModel);
  readonly pid: number;
  /** the last model seen */
  model: CommandModel;
  /** strings go as UTF-8; eof: true closes stdin afterwards */
  sendStdin(data: UploadData, opts?: { eof?: boolean }): Promise<void>;
  closeStdin(): Promise<void>;
  /** false when it had already ended */
  kill(signal?: 'SIGINT' | 'SIGTERM' | 'SIGKILL' | 'SIGHUP' | 'SIGQUIT' | 'SIGUSR1' | 'SIGUSR2'): Promise<boolean>;
  /** a terminal's size (tty commands) */
  resize(rows: number, cols: number): Promise<void>;
  info(): Promise<CommandModel>;
  /** follows it to its end (the output so far first); a CommandExitError unless it exits 0 */
  wait(opts?: CommandWaitOptions): Promise<CommandResult>;
}

/** A workspace path as URL path segments. */
export declare function quotePath(path: string): string;
export declare function base64ToBytes(b64: string): Uint8Array;
export declare function bytesToBase64(bytes: Uint8Array): string;
/** Parses a text/event-stream body, calling onEvent(event, data) per event. */
export declare function readEventStream(body: ReadableStream<Uint8Array>,
                                        onEvent: (event: string, data: string) => void): Promise<void>;

export default Cellgate;
