#!/usr/bin/env python3
"""QingLong's single sign-on (OpenID Connect) against a real provider, without a browser.

Starts tests/oidc/provider.mjs (the `oidc-provider` package on Node.js) and a real server on a
temporary data directory and free ports, then drives the authorization code flow the way a
browser would: QingLong's /api/v1/sign-in/oidc, the provider's sign-in and consent pages, the
callback. A small user agent keeps cookies per host name, shared by all ports as in browsers,
and follows no redirect by itself, so every Location and Set-Cookie is looked at.

With --server local (ql-local, libql-oidc.so beside it):
  methods          GET /api/v1/sign-in/methods offers the provider by its configured name
  alice            alice signs in: a session cookie (HttpOnly, SameSite=Strict), whoami says
                   alice, operator in the default project from her group `ops`, the binding is
                   the groups' (mutation id oidc:…), a write needs the CSRF token, audit has
                   auth.sign_in with code oidc, signing out ends the session
  other_browser    the provider's answer opened in a browser without the state cookie:
                   sign_in_error=oidc_state_invalid and no session
  replay           the same callback URL (code and state) again, with the state cookie:
                   oidc_state_invalid
  no_principal     mallory, whom no principal maps to: oidc_no_principal (audited)
  tampered_state   a changed, a cut, an empty and an unknown state: oidc_state_invalid
  code_swap        another sign-in's code under this browser's state: oidc_failed (PKCE)
  cancelled        the person cancels at the provider: oidc_failed
  disabled         alice disabled by the owner: principal_disabled (audited) and her live
                   session ends; enabled again, she signs in
  hand_binding     a binding an admin made by hand is not changed by the groups
  extra_parameters response parameters the client does not know (authuser, prompt, hd;
                   error_uri on an error) are ignored, as RFC 6749 §4.1.2 requires
  cli_login        `ql login --oidc` from a directory without a data directory: the browser
                   is sent back to ql's loopback port with the token sealed to ql's key (never
                   in the clear, no cookie); then `ql task list` and `ql whoami` work
  cli_login_refused  mallory through `ql login --oidc`: ql is told oidc_no_principal and
                   exits non-zero
  jit              ql-local restarted (same data) with just-in-time creation by
                   preferred_username: bob is created, installation admin from `admins`
  groups_changed   restarted with the installation grant on a group bob is not in: his
                   groups' binding is removed at his next sign-in and his older session ends
  provider_down    the provider stops mid sign-in: oidc_unavailable (audited); ql-local stays
                   ready

With --server cluster (a throwaway PostgreSQL, two `ql-cluster serve` replicas A and B with the
same configuration, whose redirect_uri is B's):
  cross_replica    a sign-in begun on replica A finishes on replica B; the session works on
                   both; the callback replayed at A is refused
  cluster_alice    begun and finished on B: refused in another browser, then alice with her
                   group's role on both replicas; mallory: oidc_no_principal

Every case runs even when an earlier one failed; exits non-zero when any failed. A missing dependency (node, the provider's
node_modules, a server binary, libql-oidc.so, the PostgreSQL helper) is a failure, never a skip.

    python3 tests/oidc/oidc_sign_in_test.py --server local --bin-dir build/bin
    python3 tests/oidc/oidc_sign_in_test.py --server cluster --bin-dir build/bin \\
        --postgres build/tests/throwaway_postgres --roles-sql deploy/postgres/roles.sql

Standard library only.
"""

import argparse
import http.client
import http.cookies
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.parse
from html.parser import HTMLParser

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENT_ID = "qinglong-sso-test"
CLIENT_SECRET = "qinglong-sso-test-secret-6f1d2a"
SSO_NAME = "Test SSO"
CALLBACK_PATH = "/api/v1/sign-in/oidc/callback"
BEGIN_PATH = "/api/v1/sign-in/oidc"


class Failure(Exception):
    pass


def check(condition, message):
    if not condition:
        raise Failure(message)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------- a user agent

class Agent:
    """One browser: cookies per host (ports share them, as in browsers), with paths, Max-Age
    and expiry; it follows no redirect by itself."""

    def __init__(self, name, verbose=False):
        self.name = name
        self.verbose = verbose
        self.cookies = {}  # (host, path, name) -> value

    @staticmethod
    def _path_matches(request_path, cookie_path):
        if request_path == cookie_path:
            return True
        if not request_path.startswith(cookie_path):
            return False
        return cookie_path.endswith("/") or request_path[len(cookie_path)] == "/"

    def cookie(self, host, name, path=None):
        for (h, p, n), value in self.cookies.items():
            if h == host and n == name and (path is None or p == path):
                return value
        return None

    def set_cookie(self, host, path, name, value):
        self.cookies[(host, path, name)] = value

    def _cookie_header(self, host, path):
        found = [(len(p), n, v) for (h, p, n), v in self.cookies.items()
                 if h == host and self._path_matches(path, p)]
        found.sort(key=lambda item: -item[0])  # longer paths first (RFC 6265 §5.4)
        return "; ".join(f"{n}={v}" for _, n, v in found)

    def _store(self, host, request_path, header):
        jar = http.cookies.SimpleCookie()
        jar.load(header)
        for name, morsel in jar.items():
            path = morsel["path"] or (request_path.rsplit("/", 1)[0] or "/")
            expired = morsel["max-age"] not in ("", None) and int(morsel["max-age"]) <= 0
            expired = expired or (morsel["expires"] and "1970" in morsel["expires"])
            if expired:
                self.cookies.pop((host, path, name), None)
            else:
                self.cookies[(host, path, name)] = morsel.value

    def request(self, method, url, body=None, form=None, headers=None, send_cookies=True):
        """Returns (status, headers, body bytes); Set-Cookie lines are stored."""
        parsed = urllib.parse.urlsplit(url)
        path = parsed.path or "/"
        target = path + (f"?{parsed.query}" if parsed.query else "")
        hdrs = dict(headers or {})
        cookie = self._cookie_header(parsed.hostname, path) if send_cookies else ""
        if cookie:
            hdrs["Cookie"] = cookie
        data = None
        if form is not None:
            data = urllib.parse.urlencode(form).encode()
            hdrs["Content-Type"] = "application/x-www-form-urlencoded"
        elif body is not None:
            data = json.dumps(body).encode()
            hdrs["Content-Type"] = "application/json"
        conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=30)
        try:
            conn.request(method, target, body=data, headers=hdrs)
            resp = conn.getresponse()
            payload = resp.read()
        finally:
            conn.close()
        for header in resp.headers.get_all("Set-Cookie") or []:
            self._store(parsed.hostname, path, header)
        if self.verbose:
            print(f"  [{self.name}] {method} {parsed.netloc}{path} -> {resp.status} "
                  f"{resp.headers.get('Location', '')}", file=sys.stderr)
        return resp.status, resp.headers, payload


def set_cookie_lines(headers, name):
    return [line for line in (headers.get_all("Set-Cookie") or [])
            if line.split("=", 1)[0].strip() == name]


def cookie_attributes(line):
    """'a=b; Path=/; HttpOnly' -> ('b', {'path': '/', 'httponly': True})."""
    parts = [p.strip() for p in line.split(";")]
    value = parts[0].split("=", 1)[1]
    attrs = {}
    for part in parts[1:]:
        key, _, val = part.partition("=")
        attrs[key.lower()] = val if _ else True
    return value, attrs


def http_json(method, url, token=None, body=None, cookie=None, headers=None):
    """A plain API call (no agent): returns (status, parsed JSON or raw bytes)."""
    parsed = urllib.parse.urlsplit(url)
    hdrs = dict(headers or {})
    if token:
        hdrs["Authorization"] = "Bearer " + token
    if cookie:
        hdrs["Cookie"] = cookie
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        hdrs["Content-Type"] = "application/json"
    conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=30)
    try:
        conn.request(method, parsed.path + (f"?{parsed.query}" if parsed.query else ""),
                     body=data, headers=hdrs)
        resp = conn.getresponse()
        payload = resp.read()
    finally:
        conn.close()
    try:
        return resp.status, json.loads(payload) if payload else None
    except ValueError:
        return resp.status, payload


# ---------------------------------------------------------------- the provider's pages

class PageParser(HTMLParser):
    def __init__(self):
        super().__init__()
        self.forms, self.links, self.errors = [], [], []
        self.title = ""
        self._in_title = False
        self._in_error = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "title":
            self._in_title = True
        elif tag == "form":
            self.forms.append({"id": attrs.get("id"), "action": attrs.get("action"),
                               "method": (attrs.get("method") or "get").lower(), "inputs": []})
        elif tag == "input" and self.forms:
            self.forms[-1]["inputs"].append({k: attrs.get(k) for k in ("name", "value", "id")})
        elif tag == "a" and attrs.get("href"):
            self.links.append({"id": attrs.get("id"), "href": attrs["href"]})
        if "error" in (attrs.get("class") or "").split():
            self._in_error = True

    def handle_data(self, data):
        if self._in_title:
            self.title += data
        if self._in_error and data.strip():
            self.errors.append(data.strip())
            self._in_error = False

    def handle_endtag(self, tag):
        if tag == "title":
            self._in_title = False


def parse_page(data):
    parser = PageParser()
    parser.feed(data.decode("utf-8", "replace"))
    return parser


class Provider:
    """provider.mjs on a free port; `issuer` once it is ready."""

    def __init__(self, node, redirect_uris, workdir, issuer_host="127.0.0.1"):
        self.log_path = os.path.join(workdir, "provider.log")
        self.log = open(self.log_path, "wb")
        cmd = [node, os.path.join(HERE, "provider.mjs"), "--port", "0",
               "--client-id", CLIENT_ID, "--client-secret", CLIENT_SECRET,
               "--redirect-uri", ",".join(redirect_uris), "--issuer-host", issuer_host]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log, text=True)
        deadline = time.monotonic() + 30
        line = ""
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line or line.startswith("READY "):
                break
        if not line.startswith("READY "):
            self.stop()
            raise Failure(f"the provider did not start: `{' '.join(cmd)}` (log: {self.tail()})")
        self.issuer = line.split()[1]

    def tail(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-3000:].decode(errors="replace")
        except OSError:
            return ""

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def drive_provider(agent, url, login, stop_prefix, abort=False):
    """From the provider's authorization URL, through its sign-in and consent pages as `login`,
    to the redirect back to the client. Returns that URL (not visited). With `abort`, cancels
    on the first page instead."""
    for _ in range(20):
        status, headers, body = agent.request("GET", url)
        while status in (301, 302, 303, 307, 308):
            url = urllib.parse.urljoin(url, headers["Location"])
            if url.startswith(stop_prefix):
                return url
            status, headers, body = agent.request("GET", url)
        check(status == 200, f"the provider answered {status} at {url}: {body[:300]!r}")
        page = parse_page(body)
        forms = {f["id"]: f for f in page.forms}
        if abort:
            links = [link for link in page.links if link["id"] == "abort"]
            check(links, f"no #abort link on the provider's page {page.title!r}")
            url = urllib.parse.urljoin(url, links[0]["href"])
            abort = False
            continue
        if "login-form" in forms:
            fields = {"login": login, "password": "any password"}
            form = forms["login-form"]
        elif "consent-form" in forms:
            fields = {}
            form = forms["consent-form"]
        else:
            raise Failure(f"unexpected provider page {page.title!r} at {url}: {page.errors}")
        data = {i["name"]: i["value"] or "" for i in form["inputs"] if i["name"]}
        data.update(fields)
        action = urllib.parse.urljoin(url, form["action"])
        status, headers, body = agent.request("POST", action, form=data)
        if status == 200:
            page = parse_page(body)
            raise Failure(f"the provider refused {login!r}: {page.errors or page.title}")
        check(status in (302, 303), f"the provider's {form['id']} answered {status}")
        url = urllib.parse.urljoin(action, headers["Location"])
        if url.startswith(stop_prefix):
            return url
    raise Failure("the provider's pages never sent the browser back to QingLong")


# ---------------------------------------------------------------- servers

class Servers:
    """Processes with logs in the work directory; stop() ends them all."""

    def __init__(self, args, workdir):
        self.args = args
        self.workdir = workdir
        self.procs = []
        self.logs = []

    def spawn(self, name, argv, **kwargs):
        log = open(os.path.join(self.workdir, name + ".log"), "wb")
        self.logs.append(log.name)
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, **kwargs)
        self.procs.append(proc)
        return proc

    def wait_ready(self, url, proc, what):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise Failure(f"{what} exited {proc.returncode} before it was ready "
                              f"(log: {self.log_tail(what)})")
            try:
                if http_json("GET", url + "/readyz")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise Failure(f"{what} was not ready within 60 s at {url}/readyz")

    def log_tail(self, name):
        path = os.path.join(self.workdir, name + ".log")
        try:
            with open(path, "rb") as f:
                return f.read()[-2000:].decode(errors="replace")
        except OSError:
            return "(no log)"

    @staticmethod
    def end(proc):
        if proc.poll() is not None:
            return proc.returncode
        if proc.stdin:
            proc.stdin.close()  # the PostgreSQL helper stops at the end of its input
        else:
            proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()

    def stop(self):
        for proc in reversed(self.procs):
            self.end(proc)

    def dump_logs(self):
        for path in self.logs:
            with open(path, "rb") as f:
                tail = f.read()[-4000:].decode(errors="replace")
            print(f"---- {os.path.basename(path)} (tail)\n{tail}")


def write_secret(workdir):
    path = os.path.join(workdir, "oidc.secret")
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write(CLIENT_SECRET + "\n")
    os.chmod(path, 0o600)
    return path


GROUPS = {
    "ops": [{"scope": "default", "role": "operator"}],
    "admins": [{"scope": "installation", "role": "admin"}],
}


def write_config(workdir, name, issuer, redirect_uri, secret_file, jit=False, groups=None):
    config = {
        "name": SSO_NAME,
        "issuer": issuer,
        "client_id": CLIENT_ID,
        "client_secret_file": secret_file,
        "redirect_uri": redirect_uri,
        "scopes": ["openid", "email", "profile", "groups"],
        "allow_insecure_http": True,
        "groups": groups or GROUPS,
    }
    if jit:
        config.update(principal_claim="preferred_username", claim_is_name=True,
                      create_principals=True)
    else:
        config.update(principal_claim="email", principals={"alice@example.com": "alice"})
    path = os.path.join(workdir, name)
    with open(path, "w") as f:
        json.dump(config, f, indent=2)
    return path


class Qing:
    """One QingLong API endpoint: base URL and the owner's token."""

    def __init__(self, name, base, token):
        self.name = name
        self.base = base
        self.token = token
        self.host = urllib.parse.urlsplit(base).hostname

    def api(self, method, path, body=None, expect=(200, 201)):
        status, answer = http_json(method, self.base + path, token=self.token, body=body)
        check(status in expect, f"{self.name}: {method} {path} answered {status}: {answer!r:.300}")
        return answer

    def whoami(self, session_cookie):
        return http_json("GET", self.base + "/api/v1/whoami", cookie=f"ql_session={session_cookie}")

    def audit(self):
        return self.api("GET", "/api/v1/audit?limit=500")["items"]


# ---------------------------------------------------------------- the flow, step by step

class Attempt:
    """One sign-in: the agent, the state cookie QingLong set, the callback URL from the
    provider."""

    def __init__(self, agent, state_cookie, authorize_url, callback_url):
        self.agent = agent
        self.state_cookie = state_cookie
        self.authorize_url = authorize_url
        self.callback_url = callback_url

    @property
    def query(self):
        return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.callback_url).query))


def begin(qing, agent, login, redirect_uri, issuer, abort=False, checks=False):
    """GET /api/v1/sign-in/oidc on `qing`, then the provider's pages as `login`."""
    status, headers, body = agent.request("GET", qing.base + BEGIN_PATH)
    check(status == 302, f"{qing.name}: GET {BEGIN_PATH} answered {status}: {body[:300]!r}")
    location = headers.get("Location", "")
    check(location.startswith(issuer + "/"),
          f"{qing.name}: GET {BEGIN_PATH} redirects to {location!r}, not the issuer {issuer}")
    lines = set_cookie_lines(headers, "ql_oidc_state")
    check(len(lines) == 1, f"{qing.name}: GET {BEGIN_PATH} set no ql_oidc_state cookie "
                           f"(Set-Cookie: {headers.get_all('Set-Cookie')})")
    state_cookie, attrs = cookie_attributes(lines[0])
    if checks:
        query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(location).query))
        want = {"response_type": "code", "client_id": CLIENT_ID, "redirect_uri": redirect_uri,
                "code_challenge_method": "S256", "state": state_cookie}
        for key, value in want.items():
            check(query.get(key) == value,
                  f"the authorization request's {key} is {query.get(key)!r}, expected {value!r}")
        check(set(query.get("scope", "").split()) == {"openid", "email", "profile", "groups"},
              f"the authorization request's scope is {query.get('scope')!r}")
        check(len(query.get("nonce", "")) >= 16, "the authorization request has no nonce")
        check(len(query.get("code_challenge", "")) == 43, "the authorization request has no S256 challenge")
        check(attrs.get("path") == BEGIN_PATH and attrs.get("httponly") is True
              and str(attrs.get("samesite", "")).lower() == "lax" and attrs.get("max-age") == "600",
              f"the state cookie is {lines[0]!r}: expected Path={BEGIN_PATH}; Max-Age=600; "
              "HttpOnly; SameSite=Lax")
        check(headers.get("Referrer-Policy") == "no-referrer",
              f"the redirect to the provider has Referrer-Policy {headers.get('Referrer-Policy')!r}")
    callback = drive_provider(agent, location, login, redirect_uri, abort=abort)
    return Attempt(agent, state_cookie, location, callback)


def finish(agent, url, expect_error=None, what="the callback"):
    """Opens the callback URL in `agent`; returns the new session cookie's value (or None).
    `expect_error` is the sign_in_error the server must send the browser back with, or None
    for a success."""
    status, headers, body = agent.request("GET", url)
    location = headers.get("Location", "")
    check(status == 303, f"{what} answered {status} (Location {location!r}): {body[:300]!r}")
    sessions = set_cookie_lines(headers, "ql_session")
    cleared = [cookie_attributes(line) for line in set_cookie_lines(headers, "ql_oidc_state")]
    check(any(a.get("max-age") == "0" and a.get("path") == BEGIN_PATH for _, a in cleared),
          f"{what} did not clear the state cookie (Set-Cookie: {headers.get_all('Set-Cookie')})")
    if expect_error is None:
        check(location == "/", f"{what} sent the browser to {location!r}, expected '/' "
                               f"(sign-in failed?)")
        check(len(sessions) == 1, f"{what} set no session cookie")
        value, attrs = cookie_attributes(sessions[0])
        check(attrs.get("path") == "/" and attrs.get("httponly") is True
              and str(attrs.get("samesite", "")).lower() == "strict",
              f"the session cookie is {sessions[0]!r}: expected Path=/; HttpOnly; SameSite=Strict")
        check(value.startswith("qls_"), f"the session cookie's value {value[:8]!r}… is no session")
        return value
    check(location == f"/?sign_in_error={expect_error}",
          f"{what} sent the browser to {location!r}, expected /?sign_in_error={expect_error}")
    check(not sessions, f"{what} failed ({expect_error}) yet set a session cookie: {sessions}")
    return None


def role_in(who, project):
    for p in who.get("projects", []):
        if p.get("slug") == project:
            return p.get("role")
    return "none"


def expect_who(qing, session, name, role=None, installation=None):
    status, who = qing.whoami(session)
    check(status == 200, f"{qing.name}: whoami with the session cookie answered {status}: {who!r:.300}")
    check(who["principal"]["name"] == name, f"whoami says {who['principal']['name']!r}, not {name!r}")
    sess = who.get("session") or {}
    check(sess.get("kind") == "session", f"whoami's session kind is {sess.get('kind')!r}")
    check(str(sess.get("label", "")).startswith("oidc panel"),
          f"whoami's session label is {sess.get('label')!r}, expected 'oidc panel from …'")
    check(sess.get("csrf_token"), "whoami through the cookie gives no csrf_token")
    if role is not None:
        check(role_in(who, "default") == role,
              f"{name}'s role in project default is {role_in(who, 'default')!r}, expected {role!r} "
              f"(projects: {who.get('projects')})")
    if installation is not None:
        check(who.get("installation_role") == installation,
              f"{name}'s installation role is {who.get('installation_role')!r}, expected {installation!r}")
    return who


def audit_has(qing, since_ids, action, code, outcome=None, actor=None):
    """The first new audit fact (not in since_ids) with `action` and `code`."""
    facts = qing.audit()
    for fact in facts:
        if fact["id"] in since_ids:
            continue
        if fact["action"] == action and fact["code"] == code and \
                (outcome is None or fact["outcome"] == outcome) and \
                (actor is None or fact["actor_id"] == actor):
            return fact
    new = [f"{f['action']}/{f['outcome']}/{f['code']}" for f in facts if f["id"] not in since_ids]
    raise Failure(f"no audit fact {action} code {code}"
                  + (f" outcome {outcome}" if outcome else "") + f"; new facts: {new[:20]}")


def audit_ids(qing):
    """The audit's fact ids now. Also waits out the server's one-second budget of auth.failed
    facts (GovernanceService: ten a second, the rest only counted), so that the failure a case
    is about is written in full."""
    time.sleep(1.1)
    return {f["id"] for f in qing.audit()}


def wait_status(fn, want, what, timeout=4.0):
    deadline = time.monotonic() + timeout
    got = None
    while time.monotonic() < deadline:
        got = fn()
        if got == want:
            return
        time.sleep(0.2)
    raise Failure(f"{what}: {got}, expected {want} within {timeout:.0f} s")


# ---------------------------------------------------------------- cases

class Run:
    """Runs the cases one after another; a failed case is reported and the next one runs (a
    case that needs an earlier one's result says so when it is missing)."""

    def __init__(self, args):
        self.args = args
        self.passed = []
        self.failed = []

    def case(self, name, fn, *a):
        print(f"case {name}: ...", flush=True)
        try:
            fn(*a)
        except Failure as err:
            self.failed.append(name)
            print(f"case {name}: FAILED: {err}", flush=True)
            return
        except Exception:  # noqa: BLE001 - a broken case is a failed case
            self.failed.append(name)
            print(f"case {name}: FAILED:\n{traceback.format_exc()}", flush=True)
            return
        self.passed.append(name)
        print(f"case {name}: ok", flush=True)

    def needs(self, state, key, case):
        check(key in state, f"needs what case {case} leaves behind, and {case} failed")
        return state[key]


def local_cases(run, servers, node, workdir):
    args = run.args
    ql_local = os.path.join(args.bin_dir, "ql-local")
    check(os.access(ql_local, os.X_OK), f"{ql_local} is missing: build ql-local")
    module = os.path.join(args.bin_dir, "libql-oidc.so")
    check(os.path.exists(module), f"{module} is missing: ql-local needs it beside it for "
                                  "--oidc-config (build target ql-oidc)")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    redirect_uri = base + CALLBACK_PATH
    provider = Provider(node, [redirect_uri], workdir)
    servers.provider = provider
    issuer = provider.issuer
    print(f"provider: {issuer}; ql-local: {base}")
    secret = write_secret(workdir)
    mapped = write_config(workdir, "oidc-mapped.json", issuer, redirect_uri, secret)
    jit = write_config(workdir, "oidc-jit.json", issuer, redirect_uri, secret, jit=True)
    data = os.path.join(workdir, "data")

    def start(config, log):
        proc = servers.spawn(log, [ql_local, "serve", "--data", data, "--listen",
                                   f"127.0.0.1:{port}", "--shutdown-wait", "2",
                                   "--oidc-config", config])
        servers.wait_ready(base, proc, log)
        with open(os.path.join(data, "owner.token")) as f:
            return proc, Qing("ql-local", base, f.read().strip())

    proc, qing = start(mapped, "ql-local")
    alice_id = qing.api("POST", "/api/v1/principals", {"name": "alice"})["id"]
    state = {}

    def methods():
        status, answer = http_json("GET", base + "/api/v1/sign-in/methods")
        check(status == 200, f"GET /api/v1/sign-in/methods answered {status}: {answer!r:.300}")
        check(answer.get("password") is True, f"methods: {answer}")
        check(answer.get("oidc") == {"name": SSO_NAME, "url": BEGIN_PATH},
              f"methods' oidc is {answer.get('oidc')!r}, expected name {SSO_NAME!r}, url {BEGIN_PATH}")

    def alice():
        before = audit_ids(qing)
        agent = Agent("alice", args.verbose)
        attempt = begin(qing, agent, "alice", redirect_uri, issuer, checks=True)
        check(attempt.query.get("iss") == issuer, f"the provider's answer has iss {attempt.query.get('iss')!r}")
        status, headers, _ = agent.request("GET", attempt.callback_url)
        check(headers.get("Referrer-Policy") == "no-referrer",
              f"the callback's answer has Referrer-Policy {headers.get('Referrer-Policy')!r}")
        check(status == 303 and headers.get("Location") == "/",
              f"alice's callback answered {status} to {headers.get('Location')!r}")
        session = agent.cookie(qing.host, "ql_session")
        check(session, "no session cookie kept after alice's callback")
        check(agent.cookie(qing.host, "ql_oidc_state") is None, "the state cookie outlived the callback")
        who = expect_who(qing, session, "alice", role="operator", installation="none")
        check(who["principal"]["id"] == alice_id, "whoami names another principal id than alice's")
        fact = audit_has(qing, before, "auth.sign_in", "oidc", actor=alice_id)
        check(fact["outcome"] != "failed", f"the sign-in fact's outcome is {fact['outcome']!r}")
        # The group's binding is marked as the groups' (the next sign-in may change it).
        items = qing.api("GET", "/api/v1/projects/default/bindings")["items"]
        mine = [b for b in items if b["principal_id"] == alice_id]
        check(len(mine) == 1 and mine[0]["role"] == "operator",
              f"alice's bindings in default: {mine} (all: {items!r:.600})")
        check(mine[0]["mutation_id"].startswith("oidc:"),
              f"the groups' binding has mutation id {mine[0]['mutation_id']!r}, expected oidc:…")
        # A write through the cookie needs the CSRF token.
        cookie = f"ql_session={session}"
        status, answer = http_json("POST", base + "/api/v1/tokens", body={}, cookie=cookie)
        check(status == 403, f"a cookie write without X-QL-CSRF answered {status}: {answer!r:.200}")
        status, answer = http_json("POST", base + "/api/v1/tokens", body={}, cookie=cookie,
                                   headers={"X-QL-CSRF": who["session"]["csrf_token"]})
        check(status == 201, f"a cookie write with X-QL-CSRF answered {status}: {answer!r:.200}")
        # A second sign-in in the same browser goes straight through the provider.
        again = begin(qing, agent, "alice", redirect_uri, issuer)
        second = finish(agent, again.callback_url, what="alice's second callback")
        check(second != session, "the second sign-in gave the same session")
        who2 = expect_who(qing, second, "alice", role="operator")
        # Signing out ends that session (and clears its cookie), not the other one.
        status, headers, body = agent.request("POST", base + "/api/v1/sign-out", body={},
                                              headers={"X-QL-CSRF": who2["session"]["csrf_token"]})
        check(status == 200, f"sign-out answered {status}: {body[:200]!r}")
        check(agent.cookie(qing.host, "ql_session") is None, "sign-out left the session cookie")
        wait_status(lambda: qing.whoami(second)[0], 401, "whoami after signing out")
        check(qing.whoami(session)[0] == 200, "signing out ended alice's other session too")

    def other_browser():
        before = audit_ids(qing)
        victim = Agent("victim", args.verbose)
        attempt = begin(qing, victim, "alice", redirect_uri, issuer)
        other = Agent("other browser", args.verbose)
        finish(other, attempt.callback_url, "oidc_state_invalid", "the callback in another browser")
        check(other.cookie(qing.host, "ql_session") is None, "the other browser got a session")
        audit_has(qing, before, "auth.failed", "oidc_state_invalid")
        # The answer is still good in the browser that started the sign-in.
        session = finish(victim, attempt.callback_url, what="the callback in the right browser")
        expect_who(qing, session, "alice")
        state["replay"] = attempt

    def replay():
        attempt = run.needs(state, "replay", "other_browser")
        agent = attempt.agent
        check(agent.cookie(qing.host, "ql_oidc_state") is None, "the state cookie outlived its use")
        agent.set_cookie(qing.host, BEGIN_PATH, "ql_oidc_state", attempt.state_cookie)
        before = agent.cookie(qing.host, "ql_session")
        finish(agent, attempt.callback_url, "oidc_state_invalid", "the replayed callback")
        check(agent.cookie(qing.host, "ql_session") == before, "the replay changed the session")
        # Also from a fresh browser that forged the state cookie.
        forger = Agent("forger", args.verbose)
        forger.set_cookie(qing.host, BEGIN_PATH, "ql_oidc_state", attempt.state_cookie)
        finish(forger, attempt.callback_url, "oidc_state_invalid", "the replay with a forged cookie")

    def no_principal():
        before = audit_ids(qing)
        agent = Agent("mallory", args.verbose)
        attempt = begin(qing, agent, "mallory", redirect_uri, issuer)
        finish(agent, attempt.callback_url, "oidc_no_principal", "mallory's callback")
        audit_has(qing, before, "auth.failed", "oidc_no_principal")
        status, answer = http_json("GET", base + "/api/v1/principals", token=qing.token)
        names = [p["name"] for p in answer["items"]] if status == 200 else []
        check(status == 200 and "mallory" not in names, f"principals after mallory: {names}")

    def tampered_state():
        agent = Agent("tamper", args.verbose)
        attempt = begin(qing, agent, "alice", redirect_uri, issuer)
        real = attempt.query["state"]

        def with_state(value):
            q = dict(attempt.query, state=value)
            return redirect_uri + "?" + urllib.parse.urlencode(q)

        flipped = real[:-1] + ("0" if real[-1] != "0" else "1")
        finish(agent, with_state(flipped), "oidc_state_invalid", "the callback with a changed state")
        # The failure cleared the cookie; put it back for each further try.
        agent.set_cookie(qing.host, BEGIN_PATH, "ql_oidc_state", attempt.state_cookie)
        finish(agent, with_state(real[:32]), "oidc_state_invalid", "the callback with a cut state")
        agent.set_cookie(qing.host, BEGIN_PATH, "ql_oidc_state", attempt.state_cookie)
        finish(agent, with_state(""), "oidc_state_invalid", "the callback with an empty state")
        # A well-formed state that the server never issued (or that expired and was purged),
        # in both the cookie and the query.
        unknown = secrets.token_hex(32)
        agent.set_cookie(qing.host, BEGIN_PATH, "ql_oidc_state", unknown)
        finish(agent, with_state(unknown), "oidc_state_invalid", "the callback with an unknown state")
        check(agent.cookie(qing.host, "ql_session") is None, "a tampered state gave a session")

    def code_swap():
        # Another sign-in's code under this browser's own state: the verifier (PKCE) and nonce
        # of this state do not fit it, so the provider refuses it and nobody is signed in.
        before = audit_ids(qing)
        mine, theirs = Agent("swap-victim", args.verbose), Agent("swap-attacker", args.verbose)
        own = begin(qing, mine, "alice", redirect_uri, issuer)
        foreign = begin(qing, theirs, "alice", redirect_uri, issuer)
        q = dict(own.query, code=foreign.query["code"])
        finish(mine, redirect_uri + "?" + urllib.parse.urlencode(q), "oidc_failed",
               "the callback with another sign-in's code")
        fact = audit_has(qing, before, "auth.failed", "oidc_failed")
        check(fact["outcome"] == "failed", f"the failure's outcome is {fact['outcome']!r}")

    def cancelled():
        before = audit_ids(qing)
        agent = Agent("cancel", args.verbose)
        attempt = begin(qing, agent, "alice", redirect_uri, issuer, abort=True)
        check(attempt.query.get("error") == "access_denied",
              f"the provider's cancel came back with {attempt.query}")
        finish(agent, attempt.callback_url, "oidc_failed", "the cancelled sign-in's callback")
        audit_has(qing, before, "auth.failed", "oidc_failed")

    def disabled():
        # A live session of alice's, to see it end when she is disabled.
        agent = Agent("alice-live", args.verbose)
        live = finish(agent, begin(qing, agent, "alice", redirect_uri, issuer).callback_url,
                      what="alice's callback")
        qing.api("POST", "/api/v1/principals/alice/disable", {})
        try:
            wait_status(lambda: qing.whoami(live)[0], 401,
                        "a session of alice's after she was disabled")
            before = audit_ids(qing)
            fresh = Agent("alice-disabled", args.verbose)
            attempt = begin(qing, fresh, "alice", redirect_uri, issuer)
            finish(fresh, attempt.callback_url, "principal_disabled", "a disabled alice's callback")
            audit_has(qing, before, "auth.sign_in", "principal_disabled", outcome="failed")
        finally:
            qing.api("POST", "/api/v1/principals/alice/enable", {})
        attempt = begin(qing, fresh, "alice", redirect_uri, issuer)
        session = finish(fresh, attempt.callback_url, what="the enabled alice's callback")
        expect_who(qing, session, "alice", role="operator")

    def hand_binding():
        qing.api("POST", "/api/v1/projects/default/bindings",
                 {"principal": "alice", "role": "viewer", "mutation_id": "by-hand-alice-viewer"})
        agent = Agent("alice-hand", args.verbose)
        session = finish(agent, begin(qing, agent, "alice", redirect_uri, issuer).callback_url,
                         what="alice's callback")
        expect_who(qing, session, "alice", role="viewer")

    def extra_parameters():
        # RFC 6749 §4.1.2: "The client MUST ignore unrecognized response parameters." Google,
        # for one, adds authuser, prompt and hd to the authorization response.
        problems = []
        agent = Agent("extra", args.verbose)
        attempt = begin(qing, agent, "alice", redirect_uri, issuer)
        url = attempt.callback_url + "&" + urllib.parse.urlencode(
            {"authuser": "0", "prompt": "consent", "hd": "example.com"})
        try:
            session = finish(agent, url, what="a callback with authuser, prompt and hd added")
            expect_who(qing, session, "alice")
        except Failure as err:
            problems.append(str(err))
        # An error response may carry error_uri (RFC 6749 §4.1.2.1).
        agent = Agent("extra-error", args.verbose)
        attempt = begin(qing, agent, "alice", redirect_uri, issuer, abort=True)
        url = attempt.callback_url + "&" + urllib.parse.urlencode(
            {"error_uri": "https://id.example.com/errors/access_denied"})
        try:
            finish(agent, url, "oidc_failed", "a cancelled sign-in's callback with error_uri")
        except Failure as err:
            problems.append(str(err))
        check(not problems, "; ".join(problems))

    run.case("methods", methods)
    run.case("alice", alice)
    run.case("other_browser", other_browser)
    run.case("replay", replay)
    run.case("no_principal", no_principal)
    run.case("tampered_state", tampered_state)
    run.case("code_swap", code_swap)
    run.case("cancelled", cancelled)
    run.case("disabled", disabled)
    run.case("hand_binding", hand_binding)
    run.case("extra_parameters", extra_parameters)

    def cli_login(login, expect_error=None):
        """`ql login --oidc` from a directory without a data directory: ql prints the address
        to open; a browser (this agent) goes through the provider and is sent back to ql's
        loopback port with the token sealed to ql's key. Returns ql's HOME."""
        ql = os.path.join(args.bin_dir, "ql")
        check(os.access(ql, os.X_OK), f"{ql} is missing: build ql")
        home = tempfile.mkdtemp(prefix="home-", dir=workdir)
        env = {"HOME": home, "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        proc = subprocess.Popen([ql, "login", "--server", base, "--oidc", "--oidc-timeout", "60"],
                                cwd=home, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            url = None
            deadline = time.monotonic() + 20
            while url is None and time.monotonic() < deadline:
                line = proc.stderr.readline()
                check(line, f"ql login --oidc printed no address (exit {proc.poll()})")
                if line.strip().startswith(base + BEGIN_PATH + "?"):
                    url = line.strip()
            check(url, "ql login --oidc printed no address to open")
            query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))
            check(query.get("client") == "cli" and len(query.get("key", "")) == 43
                  and query.get("port", "").isdigit(), f"ql's address is {url!r}")
            agent = Agent("cli-" + login, args.verbose)
            status, headers, body = agent.request("GET", url)
            check(status == 302, f"GET {url} answered {status}: {body[:200]!r}")
            callback = drive_provider(agent, headers["Location"], login, redirect_uri)
            status, headers, body = agent.request("GET", callback)
            location = headers.get("Location", "")
            loopback = f"http://127.0.0.1:{query['port']}/callback?"
            check(status == 303 and location.startswith(loopback),
                  f"the callback of ql's sign-in answered {status} to {location!r}, expected "
                  f"{loopback}…")
            check(not set_cookie_lines(headers, "ql_session"),
                  "ql's sign-in set a session cookie in the browser")
            answer = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(location).query))
            if expect_error is None:
                check("sealed" in answer and "qls_" not in location,
                      f"the token travels unsealed or not at all: {location[:120]!r}")
            else:
                check(answer.get("error") == expect_error,
                      f"ql's sign-in came back with {answer!r}, expected error {expect_error}")
            status, _, body = agent.request("GET", location)
            out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if expect_error is None:
            check(proc.returncode == 0, f"ql login --oidc exited {proc.returncode}: {err[-500:]}")
            check(f"as {login}" in out, f"ql login --oidc said {out!r}")
            creds = os.path.join(home, ".config", "qinglong", "credentials.json")
            check(os.stat(creds).st_mode & 0o077 == 0, "the credentials file is readable by others")
            # After ql login, ql works with no --token, QL_TOKEN or data directory.
            listed = subprocess.run([ql, "task", "list"], cwd=home, env=env,
                                    capture_output=True, text=True, timeout=30)
            check(listed.returncode == 0,
                  f"ql task list after ql login --oidc exited {listed.returncode}: "
                  f"{listed.stderr[-300:]}")
            who = subprocess.run([ql, "whoami"], cwd=home, env=env, capture_output=True,
                                 text=True, timeout=30)
            check(who.returncode == 0 and login in who.stdout, f"ql whoami said {who.stdout!r}")
        else:
            check(proc.returncode != 0, f"ql login --oidc for {login} exited 0")
            check(expect_error in err, f"ql login --oidc said {err[-300:]!r}, not {expect_error}")
        return home

    run.case("cli_login", cli_login, "alice")
    run.case("cli_login_refused", cli_login, "mallory", "oidc_no_principal")

    # Just-in-time creation: the same data directory, the other configuration.
    code = servers.end(proc)
    check(code == 0, f"ql-local exited {code} on SIGTERM")
    proc, qing = start(jit, "ql-local-jit")

    def jit_case():
        status, answer = http_json("GET", base + "/api/v1/principals", token=qing.token)
        check(status == 200 and "bob" not in [p["name"] for p in answer["items"]],
              "bob exists before his first sign-in")
        before = audit_ids(qing)
        agent = Agent("bob", args.verbose)
        attempt = begin(qing, agent, "bob", redirect_uri, issuer)
        session = finish(agent, attempt.callback_url, what="bob's first callback")
        who = expect_who(qing, session, "bob", role="operator", installation="admin")
        status, answer = http_json("GET", base + "/api/v1/principals", token=qing.token)
        bobs = [p for p in answer["items"] if p["name"] == "bob"]
        check(len(bobs) == 1 and bobs[0]["id"] == who["principal"]["id"],
              f"principals named bob: {bobs}")
        audit_has(qing, before, "auth.sign_in", "oidc", actor=who["principal"]["id"])
        # As an installation admin through the cookie: the audit log is his to read.
        status, answer = http_json("GET", base + "/api/v1/audit?limit=1", cookie=f"ql_session={session}")
        check(status == 200, f"bob (installation admin) reading the audit answered {status}")
        # A second sign-in finds him; no second bob.
        again = finish(agent, begin(qing, agent, "bob", redirect_uri, issuer).callback_url,
                       what="bob's second callback")
        expect_who(qing, again, "bob", installation="admin")
        status, answer = http_json("GET", base + "/api/v1/principals", token=qing.token)
        check([p["name"] for p in answer["items"]].count("bob") == 1, "a second bob was created")
        state["bob_session"] = again

    run.case("jit", jit_case)
    code = servers.end(proc)
    check(code == 0, f"ql-local exited {code} on SIGTERM")

    # The installation admin grant moves to a group bob is not in.
    moved = write_config(workdir, "oidc-moved.json", issuer, redirect_uri, secret, jit=True,
                         groups={"ops": GROUPS["ops"], "superusers": GROUPS["admins"]})
    proc, qing = start(moved, "ql-local-moved")

    def groups_changed():
        status, answer = http_json("GET", base + "/api/v1/principals", token=qing.token)
        bob = [p for p in answer["items"] if p["name"] == "bob"][0]
        bindings = qing.api("GET", "/api/v1/installation/bindings")["items"]
        mine = [b for b in bindings if b["principal_id"] == bob["id"]]
        check(len(mine) == 1 and mine[0]["role"] == "admin" and mine[0]["mutation_id"].startswith("oidc:"),
              f"bob's installation bindings before: {mine}")
        # His session from before the restart is still good, as an admin.
        earlier = run.needs(state, "bob_session", "jit")
        status, who = qing.whoami(earlier)
        check(status == 200 and who["installation_role"] == "admin",
              f"bob's session from before the restart: {status} {who!r:.300}")
        # Signing in once his groups no longer grant it: the grant goes, and with it his older
        # sessions (the new one is made after the change and stays).
        fresh = Agent("bob-again", args.verbose)
        session = finish(fresh, begin(qing, fresh, "bob", redirect_uri, issuer).callback_url,
                         what="bob's callback after the change")
        who = expect_who(qing, session, "bob", role="operator", installation="none")
        bindings = qing.api("GET", "/api/v1/installation/bindings")["items"]
        check(not [b for b in bindings if b["principal_id"] == who["principal"]["id"]],
              f"bob keeps an installation binding: {bindings}")
        wait_status(lambda: qing.whoami(earlier)[0], 401,
                    "bob's session from before his grant was removed")

    def provider_down():
        # A sign-in under way when the provider goes away: the code cannot be redeemed.
        agent = Agent("alice-down", args.verbose)
        attempt = begin(qing, agent, "alice", redirect_uri, issuer)
        provider.stop()
        before = audit_ids(qing)
        finish(agent, attempt.callback_url, "oidc_unavailable", "the callback with the provider down")
        audit_has(qing, before, "auth.failed", "oidc_unavailable")
        # A new sign-in: refused at once, or sent to a provider that does not answer.
        status, headers, _ = Agent("late", args.verbose).request("GET", base + BEGIN_PATH)
        location = headers.get("Location", "")
        check((status == 303 and location == "/?sign_in_error=oidc_unavailable")
              or (status == 302 and location.startswith(issuer + "/")),
              f"GET {BEGIN_PATH} with the provider down answered {status} to {location!r}")
        print(f"  a new sign-in with the provider down: {status} to {location.split('?')[0]}")
        status, _ = http_json("GET", base + "/readyz")
        check(status == 200, f"ql-local is not ready with the provider down: {status}")

    run.case("groups_changed", groups_changed)
    run.case("provider_down", provider_down)
    code = servers.end(proc)
    check(code == 0, f"ql-local exited {code} on SIGTERM")


def cluster_cases(run, servers, node, workdir):
    args = run.args
    cluster = os.path.join(args.bin_dir, "ql-cluster")
    check(os.access(cluster, os.X_OK), f"{cluster} is missing: build ql-cluster")
    check(args.postgres and os.access(args.postgres, os.X_OK),
          f"--postgres {args.postgres!r}: the throwaway_postgres helper is missing "
          "(build target throwaway_postgres, tests/browser)")
    check(args.roles_sql and os.path.exists(args.roles_sql), f"--roles-sql {args.roles_sql!r} is missing")
    helper = subprocess.Popen([args.postgres, args.roles_sql], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    servers.procs.append(helper)
    line = helper.stdout.readline()
    if not line:
        raise Failure("the throwaway PostgreSQL did not start: " + helper.stderr.read()[-2000:])
    urls = json.loads(line)
    env = dict(os.environ, QL3_POSTGRES_ALLOW_INSECURE="true")

    def tool(argv):
        out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
        check(out.returncode == 0, f"{' '.join(argv[:3])} failed: {out.stderr[-2000:]}")
        return out.stdout.strip().splitlines()[-1]

    tool([cluster, "migrate", "--database-url", urls["migration"]])
    owner = tool([cluster, "token", "create", "owner", "--database-url", urls["admin"]])
    key_file = os.path.join(workdir, "secret.key")
    with open(os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
        f.write(os.urandom(32))
    port_a, port_b = free_port(), free_port()
    base_a, base_b = f"http://127.0.0.1:{port_a}", f"http://127.0.0.1:{port_b}"
    redirect_uri = base_b + CALLBACK_PATH
    provider = Provider(node, [redirect_uri], workdir)
    servers.provider = provider
    issuer = provider.issuer
    print(f"provider: {issuer}; replica A: {base_a}; replica B: {base_b} (the redirect URI's)")
    config = write_config(workdir, "oidc-mapped.json", issuer, redirect_uri, write_secret(workdir))
    replicas = {}
    for name, port in (("A", port_a), ("B", port_b)):
        proc = servers.spawn(f"ql-cluster-{name}", [
            cluster, "serve", "--database-url", urls["runtime"],
            "--admin-database-url", urls["admin"], "--worker-database-url", urls["worker"],
            "--listen", f"127.0.0.1:{port}", "--worker-listen", f"127.0.0.1:{free_port()}",
            "--secret-key-file", key_file, "--shutdown-wait", "2", "--oidc-config", config], env=env)
        base = f"http://127.0.0.1:{port}"
        servers.wait_ready(base, proc, f"ql-cluster-{name}")
        replicas[name] = Qing(f"replica {name}", base, owner)
    a, b = replicas["A"], replicas["B"]
    alice_id = a.api("POST", "/api/v1/principals", {"name": "alice"})["id"]

    def cross_replica():
        for q in (a, b):
            status, answer = http_json("GET", q.base + "/api/v1/sign-in/methods")
            check(status == 200 and (answer.get("oidc") or {}).get("name") == SSO_NAME,
                  f"{q.name}: methods answered {status}: {answer!r:.300}")
        before = audit_ids(b)
        agent = Agent("alice", args.verbose)
        attempt = begin(a, agent, "alice", redirect_uri, issuer, checks=True)
        check(attempt.callback_url.startswith(base_b + CALLBACK_PATH + "?"),
              f"the provider sent the browser to {attempt.callback_url}, not replica B")
        session = finish(agent, attempt.callback_url, what="the callback at replica B")
        who = expect_who(b, session, "alice", role="operator", installation="none")
        check(who["principal"]["id"] == alice_id, "replica B signed in another alice")
        expect_who(a, session, "alice", role="operator")
        audit_has(b, before, "auth.sign_in", "oidc", actor=alice_id)
        # The state was taken from the shared store: a replay at replica A is refused.
        replay = Agent("replay", args.verbose)
        replay.set_cookie(a.host, BEGIN_PATH, "ql_oidc_state", attempt.state_cookie)
        url_a = base_a + CALLBACK_PATH + "?" + urllib.parse.urlsplit(attempt.callback_url).query
        finish(replay, url_a, "oidc_state_invalid", "the callback replayed at replica A")

    def cluster_alice():
        # Begun and finished on replica B; the other browser's answer is refused at B too.
        agent = Agent("alice-b", args.verbose)
        attempt = begin(b, agent, "alice", redirect_uri, issuer)
        finish(Agent("stranger", args.verbose), attempt.callback_url, "oidc_state_invalid",
               "the callback at replica B in another browser")
        session = finish(agent, attempt.callback_url, what="alice's callback at replica B")
        for q in (a, b):
            expect_who(q, session, "alice", role="operator")
        mallory = Agent("mallory", args.verbose)
        finish(mallory, begin(a, mallory, "mallory", redirect_uri, issuer).callback_url,
               "oidc_no_principal", "mallory's callback at replica B")

    run.case("cross_replica", cross_replica)
    run.case("cluster_alice", cluster_alice)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", choices=("local", "cluster"), default="local")
    parser.add_argument("--bin-dir", required=True, help="the directory of ql-local / ql-cluster")
    parser.add_argument("--postgres", help="the throwaway_postgres helper (--server cluster)")
    parser.add_argument("--roles-sql", help="deploy/postgres/roles.sql (--server cluster)")
    parser.add_argument("--node", help="the node executable (default: node on PATH)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("-v", "--verbose", action="store_true", help="show every request")
    args = parser.parse_args()
    args.bin_dir = os.path.abspath(args.bin_dir)
    # Stopped from outside (a test timeout): still stop the servers and the provider.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    run = Run(args)
    workdir = tempfile.mkdtemp(prefix=f"ql-oidc-{args.server}-")
    servers = Servers(args, workdir)
    servers.provider = None
    started = time.monotonic()
    try:
        node = args.node or shutil.which("node")
        check(node, "node is not installed: run scripts/install-oidc-provider.sh")
        check(os.path.isdir(os.path.join(HERE, "node_modules", "oidc-provider")),
              "tests/oidc/node_modules is missing: run scripts/install-oidc-provider.sh")
        if args.server == "local":
            local_cases(run, servers, node, workdir)
        else:
            cluster_cases(run, servers, node, workdir)
        check(not run.failed, f"{len(run.failed)} case(s) failed: {', '.join(run.failed)}")
    except Exception as err:  # noqa: BLE001 - report everything, then fail
        if isinstance(err, Failure):
            print(f"FAIL: {err}")
        else:
            traceback.print_exc()
        servers.dump_logs()
        if servers.provider:
            print(f"---- provider.log (tail)\n{servers.provider.tail()}")
        print(f"oidc sign-in test ({args.server}): FAILED; failed: {', '.join(run.failed) or 'none'}; "
              f"passed: {', '.join(run.passed) or 'none'}")
        return 1
    finally:
        servers.stop()
        if servers.provider:
            servers.provider.stop()
        if args.keep:
            print(f"work directory kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"oidc sign-in test ({args.server}): passed ({', '.join(run.passed)}) in "
          f"{time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
