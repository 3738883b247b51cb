// The panel's only way to the server: JSON over /api/v1 with the bearer token, errors as
// ApiError carrying the server's code and message, pages followed by cursor, and log streams.

import {session} from './session.js';

// An answer other than 2xx: `status` (HTTP), `code` (stable) and `message` (the server's).
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message || code || `HTTP ${status}`);
    this.status = status;
    this.code = code || `http_${status}`;
  }
}

// Called with the error when the server refuses the token (401): the app signs out.
let onUnauthorized = () => {};
export function setUnauthorizedHandler(fn) {
  onUnauthorized = fn;
}

// The 403 codes of a restricted session (the password must be changed, or a second factor set
// up, before anything else), and the restriction each means.
const RESTRICTIONS = {
  password_change_required: 'password_change',
  totp_enrolment_required: 'totp_enrolment',
};
// Called with the restriction when the server refuses a call for one: the app shows the
// screen that lifts it.
let onRestricted = () => {};
export function setRestrictedHandler(fn) {
  onRestricted = fn;
}

// Returns `path` with the query (undefined, null and '' are left out) and the current project.
// Values are percent-encoded by hand: a space must be %20 and a '+' %2B (docs/api.md).
export function apiUrl(path, query = {}, withProject = true) {
  const parts = [];
  for (const [k, v] of Object.entries(query)) {
    if (v === undefined || v === null || v === '') continue;
    parts.push(`${encodeURIComponent(k)}=${encodeURIComponent(String(v))}`);
  }
  if (withProject) parts.push(`project=${encodeURIComponent(session.project)}`);
  return parts.length ? `${path}?${parts.join('&')}` : path;
}

function headers(json, method = 'GET') {
  const out = {Accept: 'application/json'};
  if (session.token) {
    out.Authorization = `Bearer ${session.token}`;
  } else if (method !== 'GET' && session.csrf) {
    out['X-QL-CSRF'] = session.csrf;  // the cookie session's writes carry its CSRF token
  }
  if (json) out['Content-Type'] = 'application/json';
  return out;
}

async function errorOf(res) {
  let code = '';
  let message = '';
  try {
    const body = await res.json();
    code = body.code || '';
    message = body.message || '';
  } catch {
    message = `${res.status} ${res.statusText}`;
  }
  const err = new ApiError(res.status, code, message);
  if (res.status === 401) onUnauthorized(err);
  if (res.status === 403 && RESTRICTIONS[code]) onRestricted(RESTRICTIONS[code]);
  return err;
}

// Sends one request and returns the parsed JSON body (or throws ApiError). `body` (an object)
// is sent as JSON; `signal` aborts it.
export async function call(method, path, {query, body, signal} = {}) {
  const res = await fetch(apiUrl(path, query), {
    method,
    headers: headers(body !== undefined, method),
    body: body === undefined ? undefined : JSON.stringify(body),
    signal,
    cache: 'no-store',
    // The session cookie (HttpOnly, SameSite=Strict) goes along to this origin only.
    credentials: session.token ? 'omit' : 'same-origin',
  });
  if (!res.ok) throw await errorOf(res);
  return res.status === 204 ? null : res.json();
}

export const get = (path, query, signal) => call('GET', path, {query, signal});
export const post = (path, body = {}, signal) => call('POST', path, {body, signal});
export const put = (path, body, signal) => call('PUT', path, {body, signal});
export const del = (path, signal) => call('DELETE', path, {signal});

// Uploads `bytes` (a Uint8Array) as a blob of the current project and returns {digest, size}.
// The server takes at most 1 MiB a request: larger bytes go up as 1 MiB pieces (the last one
// shorter) joined by POST /api/v1/blobs/compose.
export async function uploadBlob(bytes, signal) {
  const piece = 1 << 20;
  if (bytes.length <= piece) return postBytes('/api/v1/blobs', bytes, signal);
  const pieces = [];
  for (let at = 0; at < bytes.length; at += piece) {
    pieces.push((await postBytes('/api/v1/blobs', bytes.subarray(at, at + piece), signal)).digest);
  }
  return post('/api/v1/blobs/compose', {pieces}, signal);
}

async function postBytes(path, bytes, signal) {
  const res = await fetch(apiUrl(path), {
    method: 'POST',
    headers: {...headers(false, 'POST'), 'Content-Type': 'application/octet-stream'},
    body: bytes,
    signal,
    cache: 'no-store',
    credentials: session.token ? 'omit' : 'same-origin',
  });
  if (!res.ok) throw await errorOf(res);
  return res.json();
}

// Reads raw bytes (a script file's content): {bytes (Uint8Array), size (X-QL-Size, or -1)}.
// Throws ApiError; bytes shorter than the size the server named (a read that ended early)
// throw too.
export async function getBytes(path, query, signal) {
  const res = await fetch(apiUrl(path, query), {
    headers: headers(false),
    cache: 'no-store',
    credentials: session.token ? 'omit' : 'same-origin',
    signal,
  });
  if (!res.ok) throw await errorOf(res);
  const bytes = new Uint8Array(await res.arrayBuffer());
  const size = Number(res.headers.get('X-QL-Size') ?? -1);
  if (size >= 0 && bytes.length !== size) {
    throw new ApiError(
        502, 'content_incomplete', `received ${bytes.length} of ${size} bytes; read it again`);
  }
  return {bytes, size};
}

// Returns a pager over a listing with `next_cursor`: next() resolves to the next page's items
// (an empty array once done), `done` tells whether another page exists.
export function pager(path, query = {}, limit = 50) {
  let cursor = null;
  let done = false;
  return {
    get done() {
      return done;
    },
    async next(signal) {
      if (done) return [];
      const page = await get(path, {...query, limit, cursor}, signal);
      cursor = page.next_cursor ?? null;
      done = cursor === null;
      return page.items || [];
    },
  };
}

// Reads a public endpoint (/readyz, /metrics) without a token: {status, text}.
export async function publicText(path, signal) {
  const res = await fetch(path, {cache: 'no-store', credentials: 'omit', signal});
  return {status: res.status, text: await res.text()};
}

// Streams a run's log (follow=true) into `onText` until the server ends it (run finished,
// 10 minutes passed) or `signal` aborts. Throws ApiError when the server refuses to start
// (e.g. 503 overloaded: at most 2 streams at once).
export async function followLog(runId, attempt, signal, onText, offset = 0) {
  const query = {follow: 'true', attempt};
  if (offset > 0) query.offset = offset;
  const res = await fetch(apiUrl(`/api/v1/runs/${runId}/log`, query), {
    headers: headers(false),
    cache: 'no-store',
    credentials: session.token ? 'omit' : 'same-origin',
    signal,
  });
  if (!res.ok) throw await errorOf(res);
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  for (;;) {
    const {value, done} = await reader.read();
    if (done) return;
    if (value) onText(value);
  }
}

// Reads up to `limit` log bytes from `offset`: {bytes, next, eof, exists, size} (size: the
// log's length now, -1 when the server does not say).
export async function readLog(runId, attempt, offset, limit, signal) {
  const res = await fetch(apiUrl(`/api/v1/runs/${runId}/log`, {attempt, offset, limit}), {
    headers: headers(false),
    cache: 'no-store',
    credentials: session.token ? 'omit' : 'same-origin',
    signal,
  });
  if (!res.ok) throw await errorOf(res);
  return {
    bytes: new Uint8Array(await res.arrayBuffer()),
    next: Number(res.headers.get('X-QL-Log-Next-Offset') || offset),
    eof: res.headers.get('X-QL-Log-Eof') === 'true',
    exists: res.headers.get('X-QL-Log-Exists') !== 'false',
    size: Number(res.headers.get('X-QL-Log-Size') ?? -1),
  };
}

// Posts `body` as JSON to a public route that starts a cookie session (sign-in, set-up) and
// returns the answer; the server sets the cookie. Throws ApiError.
async function startSession(path, body) {
  const res = await fetch(path, {
    method: 'POST',
    headers: {Accept: 'application/json', 'Content-Type': 'application/json'},
    body: JSON.stringify({...body, client: 'panel'}),
    cache: 'no-store',
    credentials: 'same-origin',
  });
  if (!res.ok) {
    let code = '';
    let message = '';
    try {
      const answer = await res.json();
      code = answer.code || '';
      message = answer.message || '';
    } catch {
      message = `${res.status} ${res.statusText}`;
    }
    throw new ApiError(res.status, code, message);
  }
  return res.json();
}

// Signs in with a name and password: the server sets the session cookie and answers the
// session's CSRF token. Throws ApiError (401 sign_in_failed, 429 too_many_attempts, ...).
export async function signInWithPassword(name, password, totp) {
  const body = {name, password};
  if (totp) body.totp = totp;
  return startSession('/api/v1/sign-in', body);
}

// Sets the owner's first password with the one-time set-up code (first start) and signs in:
// answers like signInWithPassword. Throws ApiError (setup_code_invalid, password_too_short, ...).
export async function setUp(code, password) {
  return startSession('/api/v1/setup', {code, password});
}

// Returns how one may sign in: {password, oidc: null | {name, url}, setup}. A server without
// the route (404) offers the password only; so does one that cannot answer.
export async function signInMethods() {
  const fallback = {password: true, oidc: null, setup: false};
  try {
    const res = await fetch('/api/v1/sign-in/methods', {
      headers: {Accept: 'application/json'},
      cache: 'no-store',
      credentials: 'omit',
    });
    if (!res.ok) return fallback;
    const methods = await res.json();
    const oidc = methods.oidc && typeof methods.oidc.url === 'string' ? methods.oidc : null;
    return {password: methods.password !== false, oidc, setup: methods.setup === true};
  } catch {
    return fallback;
  }
}

// Asks whether the browser still holds a live session cookie (a new tab, a reload): returns
// the answer of /api/v1/whoami, or null when there is none.
export async function resumeCookieSession() {
  const res = await fetch('/api/v1/whoami', {
    headers: {Accept: 'application/json'},
    cache: 'no-store',
    credentials: 'same-origin',
  });
  if (!res.ok) return null;
  const who = await res.json();
  return who.session && who.session.kind === 'session' && who.session.csrf_token ? who : null;
}
