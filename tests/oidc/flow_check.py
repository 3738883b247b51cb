#!/usr/bin/env python3
"""Checks the test OpenID Connect provider end to end, without a browser.

Starts provider.mjs, reads its discovery document, runs an authorization code flow with PKCE
(S256) through the provider's interaction pages (login form, then consent form), exchanges the
code at the token endpoint, verifies the ID token's signature against the provider's JWKS
(RS256, PS256, ES256 and EdDSA, in plain Python), checks its claims, calls userinfo, and prints
the ID token's header and payload. Also checks that an unknown account cannot sign in and that
a request without PKCE is refused. Exits non-zero on the first failure.

    python3 tests/oidc/flow_check.py [--signing-alg ES256] [--login bob] [--client-auth post]

Standard library only.
"""

import argparse
import base64
import hashlib
import http.client
import http.cookies
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
from html.parser import HTMLParser

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENT_ID = "qinglong-test"
CLIENT_SECRET = "qinglong-test-secret-0123456789"
REDIRECT_URI = "http://127.0.0.1:9/oidc/callback"  # never contacted: the check stops at it
EXPECTED = {
    "alice": {"sub": "alice-sub-1", "email": "alice@example.com", "email_verified": True,
              "preferred_username": "alice", "groups": ["ops"]},
    "bob": {"sub": "bob-sub-2", "email": "bob@example.com", "preferred_username": "bob",
            "groups": ["admins", "ops"]},
    "mallory": {"sub": "mallory-sub-3", "email": "mallory@example.com",
                "preferred_username": "mallory", "groups": []},
}


class CheckFailed(Exception):
    pass


def check(condition, message):
    if not condition:
        raise CheckFailed(message)


def b64url_decode(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def b64url_int(text):
    return int.from_bytes(b64url_decode(text), "big")


# ---------------------------------------------------------------- signature verification

def verify_rs256(jwk, signing_input, signature):
    n, e = b64url_int(jwk["n"]), b64url_int(jwk["e"])
    k = (n.bit_length() + 7) // 8
    check(len(signature) == k, "RS256 signature has the wrong length")
    em = pow(int.from_bytes(signature, "big"), e, n).to_bytes(k, "big")
    digest_info = bytes.fromhex("3031300d060960864801650304020105000420")
    t = digest_info + hashlib.sha256(signing_input).digest()
    expected = b"\x00\x01" + b"\xff" * (k - len(t) - 3) + b"\x00" + t
    return em == expected


def verify_ps256(jwk, signing_input, signature):
    n, e = b64url_int(jwk["n"]), b64url_int(jwk["e"])
    em_bits = n.bit_length() - 1
    em_len = (em_bits + 7) // 8
    em = pow(int.from_bytes(signature, "big"), e, n).to_bytes(em_len, "big")
    h_len = 32
    m_hash = hashlib.sha256(signing_input).digest()
    if em[-1] != 0xBC:
        return False
    masked_db, h = em[:em_len - h_len - 1], em[em_len - h_len - 1:-1]
    mask, counter = b"", 0
    while len(mask) < len(masked_db):  # MGF1 with SHA-256
        mask += hashlib.sha256(h + counter.to_bytes(4, "big")).digest()
        counter += 1
    db = bytearray(a ^ b for a, b in zip(masked_db, mask))
    db[0] &= 0xFF >> (8 * em_len - em_bits)
    salt_len = h_len
    ps_len = em_len - h_len - salt_len - 2
    if any(db[:ps_len]) or db[ps_len] != 1:
        return False
    salt = bytes(db[ps_len + 1:])
    return hashlib.sha256(b"\x00" * 8 + m_hash + salt).digest() == h


P256_P = 0xFFFFFFFF00000001000000000000000000000000FFFFFFFFFFFFFFFFFFFFFFFF
P256_A = P256_P - 3
P256_B = 0x5AC635D8AA3A93E7B3EBBD55769886BC651D06B0CC53B0F63BCE3C3E27D2604B
P256_G = (0x6B17D1F2E12C4247F8BCE6E563A440F277037D812DEB33A0F4A13945D898C296,
          0x4FE342E2FE1A7F9B8EE7EB4A7C0F9E162BCE33576B315ECECBB6406837BF51F5)
P256_N = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551


def _ec_add(p1, p2):
    if p1 is None:
        return p2
    if p2 is None:
        return p1
    (x1, y1), (x2, y2) = p1, p2
    if x1 == x2 and (y1 + y2) % P256_P == 0:
        return None
    if p1 == p2:
        lam = (3 * x1 * x1 + P256_A) * pow(2 * y1, -1, P256_P) % P256_P
    else:
        lam = (y2 - y1) * pow(x2 - x1, -1, P256_P) % P256_P
    x3 = (lam * lam - x1 - x2) % P256_P
    return x3, (lam * (x1 - x3) - y1) % P256_P


def _ec_mul(k, point):
    result = None
    while k:
        if k & 1:
            result = _ec_add(result, point)
        point = _ec_add(point, point)
        k >>= 1
    return result


def _on_p256(point):
    x, y = point
    return (y * y - (x * x * x + P256_A * x + P256_B)) % P256_P == 0


def verify_es256(jwk, signing_input, signature):
    check(jwk.get("crv") == "P-256", "ES256 key is not on P-256")
    q = (b64url_int(jwk["x"]), b64url_int(jwk["y"]))
    check(_on_p256(P256_G) and _on_p256(q), "P-256 point check failed")
    check(len(signature) == 64, "ES256 signature has the wrong length")
    r, s = int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big")
    if not (0 < r < P256_N and 0 < s < P256_N):
        return False
    e = int.from_bytes(hashlib.sha256(signing_input).digest(), "big")
    w = pow(s, -1, P256_N)
    point = _ec_add(_ec_mul(e * w % P256_N, P256_G), _ec_mul(r * w % P256_N, q))
    return point is not None and point[0] % P256_N == r


ED_P = 2 ** 255 - 19
ED_D = -121665 * pow(121666, -1, ED_P) % ED_P
ED_Q = 2 ** 252 + 27742317777372353535851937790883648493
ED_SQRT_M1 = pow(2, (ED_P - 1) // 4, ED_P)


def _ed_add(p1, p2):
    a = (p1[1] - p1[0]) * (p2[1] - p2[0]) % ED_P
    b = (p1[1] + p1[0]) * (p2[1] + p2[0]) % ED_P
    c = 2 * p1[3] * p2[3] * ED_D % ED_P
    d = 2 * p1[2] * p2[2] % ED_P
    e, f, g, h = b - a, d - c, d + c, b + a
    return e * f % ED_P, g * h % ED_P, f * g % ED_P, e * h % ED_P


def _ed_mul(k, point):
    result = (0, 1, 1, 0)
    while k:
        if k & 1:
            result = _ed_add(result, point)
        point = _ed_add(point, point)
        k >>= 1
    return result


def _ed_recover_x(y, sign):
    if y >= ED_P:
        return None
    x2 = (y * y - 1) * pow(ED_D * y * y + 1, -1, ED_P)
    if x2 % ED_P == 0:
        return None if sign else 0
    x = pow(x2, (ED_P + 3) // 8, ED_P)
    if (x * x - x2) % ED_P:
        x = x * ED_SQRT_M1 % ED_P
    if (x * x - x2) % ED_P:
        return None
    if (x & 1) != sign:
        x = ED_P - x
    return x


def _ed_decompress(data):
    y = int.from_bytes(data, "little")
    sign, y = y >> 255, y & ((1 << 255) - 1)
    x = _ed_recover_x(y, sign)
    return None if x is None else (x, y, 1, x * y % ED_P)


def verify_eddsa(jwk, signing_input, signature):
    check(jwk.get("crv") == "Ed25519", "EdDSA key is not Ed25519")
    public = b64url_decode(jwk["x"])
    check(len(signature) == 64, "EdDSA signature has the wrong length")
    a_point, r_point = _ed_decompress(public), _ed_decompress(signature[:32])
    s = int.from_bytes(signature[32:], "little")
    if a_point is None or r_point is None or s >= ED_Q:
        return False
    gy = 4 * pow(5, -1, ED_P) % ED_P
    gx = _ed_recover_x(gy, 0)
    base = (gx, gy, 1, gx * gy % ED_P)
    h = int.from_bytes(hashlib.sha512(signature[:32] + public + signing_input).digest(),
                       "little") % ED_Q
    left, right = _ed_mul(s, base), _ed_add(r_point, _ed_mul(h, a_point))
    return ((left[0] * right[2] - right[0] * left[2]) % ED_P == 0
            and (left[1] * right[2] - right[1] * left[2]) % ED_P == 0)


VERIFIERS = {"RS256": verify_rs256, "PS256": verify_ps256, "ES256": verify_es256,
             "EdDSA": verify_eddsa}


# ---------------------------------------------------------------- HTTP with a cookie jar

class Browser:
    """Just enough of a user agent: no redirect following, cookies with paths."""

    def __init__(self, origin, verbose):
        parsed = urllib.parse.urlsplit(origin)
        self.host, self.port = parsed.hostname, parsed.port
        self.cookies = {}  # (name, path) -> value
        self.set_cookie_lines = []
        self.verbose = verbose

    def _cookie_header(self, path):
        pairs = [f"{name}={value}" for (name, cpath), value in sorted(self.cookies.items())
                 if path == cpath or path.startswith(cpath.rstrip("/") + "/") or cpath == "/"]
        return "; ".join(pairs)

    def _store(self, header, request_path):
        self.set_cookie_lines.append(header)
        jar = http.cookies.SimpleCookie()
        jar.load(header)
        for name, morsel in jar.items():
            path = morsel["path"] or request_path.rsplit("/", 1)[0] or "/"
            expired = morsel["max-age"] == "0" or (
                morsel["expires"] and "1970" in morsel["expires"])
            if expired or morsel.value == "":
                self.cookies.pop((name, path), None)
            else:
                self.cookies[(name, path)] = morsel.value

    def request(self, method, url, form=None, headers=None):
        parsed = urllib.parse.urlsplit(url)
        check((parsed.hostname, parsed.port) == (self.host, self.port),
              f"request left the provider: {url}")
        path = parsed.path + (f"?{parsed.query}" if parsed.query else "")
        hdrs = dict(headers or {})
        cookie = self._cookie_header(parsed.path)
        if cookie:
            hdrs["Cookie"] = cookie
        body = None
        if form is not None:
            body = urllib.parse.urlencode(form).encode()
            hdrs["Content-Type"] = "application/x-www-form-urlencoded"
        conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
        try:
            conn.request(method, path, body=body, headers=hdrs)
            resp = conn.getresponse()
            data = resp.read()
        finally:
            conn.close()
        for header in resp.headers.get_all("Set-Cookie") or []:
            self._store(header, parsed.path)
        if self.verbose:
            print(f"  {method} {parsed.path} -> {resp.status} {resp.headers.get('Location', '')}",
                  file=sys.stderr)
        return resp.status, resp.headers, data


class FormParser(HTMLParser):
    def __init__(self):
        super().__init__()
        self.forms, self.errors, self.links = [], [], []
        self._in_error = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "form":
            self.forms.append({"id": attrs.get("id"), "action": attrs.get("action"),
                               "method": (attrs.get("method") or "get").lower(),
                               "inputs": [], "buttons": []})
        elif tag == "input" and self.forms:
            self.forms[-1]["inputs"].append({k: attrs.get(k) for k in ("name", "type", "value", "id")})
        elif tag == "button" and self.forms:
            self.forms[-1]["buttons"].append({k: attrs.get(k) for k in ("id", "type", "class", "name")})
        elif tag == "a" and attrs.get("href"):
            self.links.append({"id": attrs.get("id"), "href": attrs["href"]})
        elif "error" in (attrs.get("class") or "").split():
            self._in_error = True

    def handle_data(self, data):
        if self._in_error and data.strip():
            self.errors.append(data.strip())
            self._in_error = False


def parse_page(data):
    parser = FormParser()
    parser.feed(data.decode("utf-8", "replace"))
    return parser


# ---------------------------------------------------------------- the flow

def start_provider(node, alg, issuer_host, verbose):
    cmd = [node, os.path.join(HERE, "provider.mjs"), "--port", "0", "--client-id", CLIENT_ID,
           "--client-secret", CLIENT_SECRET, "--redirect-uri", REDIRECT_URI,
           "--signing-alg", alg, "--issuer-host", issuer_host]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=None if verbose else subprocess.DEVNULL,
                            text=True)
    deadline = time.monotonic() + 30
    line = ""
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line or line.startswith("READY "):
            break
    if not line.startswith("READY "):
        proc.kill()
        proc.wait()
        raise CheckFailed(f"provider did not start (exit {proc.returncode}): run `{' '.join(cmd)}`")
    return proc, line.split()[1]


def follow(browser, url, stop_prefix, limit=10):
    """GETs url and follows redirects inside the provider; returns (status, headers, body, url)
    of the first page that is no redirect, or (303, headers, b"", location) at stop_prefix."""
    status, headers, body = browser.request("GET", url)
    for _ in range(limit):
        if status not in (301, 302, 303, 307, 308):
            return status, headers, body, url
        url = urllib.parse.urljoin(url, headers["Location"])
        if url.startswith(stop_prefix):
            return status, headers, b"", url
        status, headers, body = browser.request("GET", url)
    raise CheckFailed("too many redirects")


def authorization_url(config, state, nonce, challenge, scope):
    params = {"client_id": CLIENT_ID, "response_type": "code", "scope": scope,
              "redirect_uri": REDIRECT_URI, "state": state, "nonce": nonce}
    if challenge:
        params.update(code_challenge=challenge, code_challenge_method="S256")
    return config["authorization_endpoint"] + "?" + urllib.parse.urlencode(params)


def submit(browser, page_url, form, fields):
    action = urllib.parse.urljoin(page_url, form["action"])
    check(form["method"] == "post", f"form {form['id']} is not a POST form")
    data = {i["name"]: i["value"] or "" for i in form["inputs"] if i["name"]}
    data.update(fields)
    return browser.request("POST", action, form=data), action


def run(args):
    node = args.node or shutil.which("node")
    check(node, "node is not installed (scripts/install-oidc-provider.sh)")
    check(os.path.isdir(os.path.join(HERE, "node_modules", "oidc-provider")),
          "tests/oidc/node_modules is missing (scripts/install-oidc-provider.sh)")
    proc, issuer = start_provider(node, args.signing_alg, args.issuer_host, args.verbose)
    try:
        return flow(args, issuer)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise CheckFailed("provider did not exit on SIGTERM")
        check(code == 0, f"provider exited {code} on SIGTERM")


def flow(args, issuer):
    print(f"issuer: {issuer}")
    browser = Browser(issuer, args.verbose)
    status, _, body = browser.request("GET", issuer + "/.well-known/openid-configuration")
    check(status == 200, f"discovery answered {status}")
    config = json.loads(body)
    check(config["issuer"] == issuer, "discovery issuer differs")
    for key, value in (("code_challenge_methods_supported", "S256"),
                       ("token_endpoint_auth_methods_supported", "client_secret_basic"),
                       ("token_endpoint_auth_methods_supported", "client_secret_post"),
                       ("id_token_signing_alg_values_supported", args.signing_alg),
                       ("scopes_supported", "groups")):
        check(value in config.get(key, []), f"discovery {key} lacks {value}")
    status, _, body = browser.request("GET", config["jwks_uri"])
    check(status == 200, f"jwks answered {status}")
    jwks = json.loads(body)
    print("discovery: ok (" + ", ".join(f"{k}={config[k]}" for k in (
        "authorization_endpoint", "token_endpoint", "userinfo_endpoint", "jwks_uri")) + ")")

    scope = "openid email profile groups"

    # A request without PKCE is sent back to the client with an error.
    status, _, _, url = follow(browser, authorization_url(config, "s0", "n0", None, scope),
                               REDIRECT_URI)
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))
    check(url.startswith(REDIRECT_URI) and query.get("error") == "invalid_request",
          f"a request without PKCE was not refused: {url}")
    print(f"no PKCE: refused ({query.get('error')}: {query.get('error_description')})")

    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    state, nonce = secrets.token_urlsafe(16), secrets.token_urlsafe(16)

    # 1. The authorization request lands on the login page.
    status, _, body, login_url = follow(
        browser, authorization_url(config, state, nonce, challenge, scope), REDIRECT_URI)
    check(status == 200, f"authorization request ended at {status} {login_url}")
    page = parse_page(body)
    forms = {f["id"]: f for f in page.forms}
    check("login-form" in forms, f"no login form at {login_url}")
    login_form = forms["login-form"]
    names = {i["name"] for i in login_form["inputs"]}
    check({"prompt", "login", "password"} <= names, f"login form fields: {names}")
    print(f"login page: {urllib.parse.urlsplit(login_url).path} form#{login_form['id']} "
          f"action={login_form['action']} inputs={[i['name'] for i in login_form['inputs']]} "
          f"buttons={[b['id'] for b in login_form['buttons']]}")

    # 2. An unknown account does not sign in: the same form again, with an error.
    (status, headers, body), _ = submit(browser, login_url, login_form,
                                        {"login": "nobody", "password": "x"})
    page = parse_page(body)
    check(status == 200 and any(f["id"] == "login-form" for f in page.forms) and page.errors,
          f"unknown account: {status} {headers.get('Location')}")
    print(f"unknown account: refused ({page.errors[0]})")

    # 3. Sign in, then the consent page.
    (status, headers, body), action = submit(browser, login_url, login_form,
                                             {"login": args.login, "password": "anything"})
    check(status in (302, 303), f"login answered {status}")
    status, _, body, consent_url = follow(
        browser, urllib.parse.urljoin(action, headers["Location"]), REDIRECT_URI)
    check(status == 200, f"after login: {status} {consent_url}")
    page = parse_page(body)
    forms = {f["id"]: f for f in page.forms}
    check("consent-form" in forms, f"no consent form at {consent_url}")
    consent_form = forms["consent-form"]
    print(f"consent page: {urllib.parse.urlsplit(consent_url).path} form#{consent_form['id']} "
          f"action={consent_form['action']} inputs={[i['name'] for i in consent_form['inputs']]} "
          f"buttons={[b['id'] for b in consent_form['buttons']]}")

    # 4. Consent; the provider redirects to the client with the code.
    (status, headers, body), action = submit(browser, consent_url, consent_form, {})
    check(status in (302, 303), f"consent answered {status}")
    status, _, _, callback = follow(browser, urllib.parse.urljoin(action, headers["Location"]),
                                    REDIRECT_URI)
    check(callback.startswith(REDIRECT_URI + "?"), f"no redirect to the client: {callback}")
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(callback).query))
    check("code" in query, f"callback without a code: {callback}")
    check(query.get("state") == state, "state differs")
    check(query.get("iss") == issuer, "callback iss differs")
    print(f"callback: {REDIRECT_URI}?code=…&state=…&iss={query['iss']}")
    print("cookies set by the provider:")
    for line in dict.fromkeys(line.split("=", 1)[0] + "; " + "; ".join(
            p.strip() for p in line.split(";")[1:] if not p.strip().lower().startswith("expires"))
            for line in browser.set_cookie_lines):
        print(f"  {line}")

    # 5. Exchange the code.
    form = {"grant_type": "authorization_code", "code": query["code"],
            "redirect_uri": REDIRECT_URI, "code_verifier": verifier}
    headers = {"Accept": "application/json"}
    if args.client_auth == "basic":
        creds = f"{urllib.parse.quote(CLIENT_ID, safe='')}:{urllib.parse.quote(CLIENT_SECRET, safe='')}"
        headers["Authorization"] = "Basic " + base64.b64encode(creds.encode()).decode()
    else:
        form.update(client_id=CLIENT_ID, client_secret=CLIENT_SECRET)
    token_browser = Browser(issuer, args.verbose)
    status, _, body = token_browser.request("POST", config["token_endpoint"], form=form,
                                            headers=headers)
    check(status == 200, f"token endpoint answered {status}: {body[:300]!r}")
    tokens = json.loads(body)
    check(tokens.get("token_type", "").lower() == "bearer" and "id_token" in tokens,
          f"token response: {sorted(tokens)}")
    print(f"token ({args.client_auth}): ok, fields {sorted(tokens)}")

    # 6. The ID token: signature, then claims.
    head_b64, payload_b64, sig_b64 = tokens["id_token"].split(".")
    header = json.loads(b64url_decode(head_b64))
    payload = json.loads(b64url_decode(payload_b64))
    check(header.get("alg") == args.signing_alg, f"ID token alg {header.get('alg')}")
    keys = [k for k in jwks["keys"] if k.get("kid") == header.get("kid")]
    check(len(keys) == 1, f"no JWKS key with kid {header.get('kid')}")
    check(VERIFIERS[args.signing_alg](keys[0], f"{head_b64}.{payload_b64}".encode(),
                                      b64url_decode(sig_b64)),
          "ID token signature does not verify")
    check(not VERIFIERS[args.signing_alg](keys[0], f"{head_b64}.{payload_b64}x".encode(),
                                          b64url_decode(sig_b64)),
          "the signature check accepts a changed token")
    print(f"ID token signature: verifies ({header['alg']}, kid {header['kid']})")
    now = time.time()
    check(payload["iss"] == issuer, "iss differs")
    check(payload["aud"] == CLIENT_ID or CLIENT_ID in payload["aud"], "aud differs")
    check(payload["nonce"] == nonce, "nonce differs")
    check(payload["iat"] <= now + 5 < payload["exp"] + 5, "iat/exp out of range")
    for claim, value in EXPECTED[args.login].items():
        check(payload.get(claim) == value, f"claim {claim}: {payload.get(claim)!r} != {value!r}")
    # at_hash: the left half of the token's hash, SHA-512 for Ed25519, SHA-256 otherwise.
    digest = (hashlib.sha512 if args.signing_alg == "EdDSA" else hashlib.sha256)(
        tokens["access_token"].encode()).digest()
    at_hash = base64.urlsafe_b64encode(digest[:len(digest) // 2]).rstrip(b"=").decode()
    check(payload.get("at_hash") == at_hash, "at_hash differs")

    # 7. Userinfo agrees.
    status, _, body = token_browser.request(
        "GET", config["userinfo_endpoint"],
        headers={"Authorization": f"Bearer {tokens['access_token']}"})
    check(status == 200, f"userinfo answered {status}")
    userinfo = json.loads(body)
    check(userinfo.get("sub") == payload["sub"], "userinfo sub differs")

    # 8. A second authorization in the same browser needs neither sign-in nor consent.
    status, _, _, url = follow(browser, authorization_url(config, "s2", "n2", challenge, scope),
                               REDIRECT_URI)
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))
    check(url.startswith(REDIRECT_URI) and "code" in query,
          f"a second authorization did not return straight to the client: {url}")
    print("second authorization: straight back to the client with a code")

    # 9. The code is single use, and its replay revokes the tokens it gave.
    status, _, body = token_browser.request("POST", config["token_endpoint"], form=form,
                                            headers=headers)
    check(status == 400 and json.loads(body).get("error") == "invalid_grant",
          f"a reused code answered {status}")
    status, _, _ = token_browser.request(
        "GET", config["userinfo_endpoint"],
        headers={"Authorization": f"Bearer {tokens['access_token']}"})
    check(status == 401, f"userinfo after a code replay answered {status}")
    print("code replay: refused (invalid_grant), access token revoked")

    print("ID token header: " + json.dumps(header, sort_keys=True))
    print("ID token payload: " + json.dumps(payload, sort_keys=True, indent=2))
    print("userinfo: " + json.dumps(userinfo, sort_keys=True))
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--signing-alg", default="RS256", choices=sorted(VERIFIERS))
    parser.add_argument("--login", default="alice", choices=sorted(EXPECTED))
    parser.add_argument("--client-auth", default="basic", choices=["basic", "post"])
    parser.add_argument("--issuer-host", default="127.0.0.1", choices=["127.0.0.1", "localhost"])
    parser.add_argument("--node", help="the node executable (default: node on PATH)")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="show each request and the provider's log")
    args = parser.parse_args()
    try:
        run(args)
    except (CheckFailed, OSError, ValueError, KeyError) as err:
        print(f"FAIL: {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    print(f"PASS: authorization code + PKCE flow as {args.login}, {args.signing_alg}, "
          f"client_secret_{args.client_auth}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
