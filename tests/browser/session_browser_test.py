#!/usr/bin/env python3
"""Panel sessions in a real headless browser (Debian chromium + chromedriver + python3-selenium).

Starts `ql-local serve` on a temporary data directory and a free port with short session
bounds (--session-idle 10 --session-lifetime 24) and checks, as a person would, with a
principal `sam` who signs in with a password:

1. idle expiry: signed in and left untouched for 13 s, the next page shown is the sign-in
   screen, and the session cookie no longer authenticates (GET /api/v1/whoami answers 401);
2. absolute expiry: signed in and kept busy (another page every 3 s), the panel is still signed
   in 15 s after signing in (past the idle bound: use keeps a session alive), and 27 s after
   signing in it is on the sign-in screen and the cookie answers 401 (the 24 s lifetime);
3. another site cannot write with the session: from http://localhost:OTHERPORT (a different
   site than 127.0.0.1) a form that posts itself to POST /api/v1/tokens (text/plain with a
   JSON-looking body, and form-urlencoded) gets 401 or 403, and fetch() with
   credentials:'include' and a JSON body (preflighted, and as a no-cors text/plain request)
   creates nothing either: sam has no new API token afterwards (listed with the owner's token).

Every step is printed and saved as a screenshot into --screenshots. A missing browser or driver
is a failure, never a skip.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.keys import Keys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from panel_browser_test import Failure, Panel, check, free_port, wait_until  # noqa: E402

IDLE_S = 10
LIFETIME_S = 24
NAME = "sam"
PASSWORD = "sam's long passphrase"
COOKIE = "ql_session"


def http(url, method="GET", token=None, cookie=None, body=None):
    """Returns (status, body bytes) for one request; `cookie` is sent as the session cookie."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, method=method, data=data)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    if cookie:
        req.add_header("Cookie", f"{COOKIE}={cookie}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as res:
            return res.status, res.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def step(text):
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


class Server:
    """ql-local with short session bounds: `url`, the owner's `token`; stop() ends it."""

    def __init__(self, bin_dir, workdir):
        self.bin_dir = bin_dir
        self.workdir = workdir
        self.proc = None
        self.log = os.path.join(workdir, "ql-local.log")

    def start(self):
        port = free_port()
        data = os.path.join(self.workdir, "data")
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [os.path.join(self.bin_dir, "ql-local"), "serve", "--data", data,
                 "--listen", f"127.0.0.1:{port}", "--shutdown-wait", "2",
                 "--session-idle", str(IDLE_S), "--session-lifetime", str(LIFETIME_S)],
                stdout=log, stderr=subprocess.STDOUT)
        self.port = port
        self.url = f"http://127.0.0.1:{port}"

        def ready():
            check(self.proc.poll() is None, f"ql-local exited with {self.proc.returncode}")
            try:
                return http(self.url + "/readyz")[0] == 200
            except OSError:
                return False

        wait_until(ready, self.url + "/readyz", timeout=60)
        with open(os.path.join(data, "owner.token")) as f:
            self.token = f.read().strip()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def dump_log(self):
        if os.path.exists(self.log):
            with open(self.log, "rb") as f:
                print("---- ql-local.log (tail)\n" + f.read()[-4000:].decode(errors="replace"))


def api(server, method, path, body=None):
    """The JSON answer of one call with the owner's token, which must succeed."""
    status, data = http(server.url + path, method=method, token=server.token, body=body)
    check(200 <= status < 300, f"{method} {path} answered {status}: {data[:300]!r}")
    return json.loads(data) if data else None


class OtherSite:
    """A tiny web server on http://localhost:PORT, another site than the panel's 127.0.0.1,
    serving pages that try to write to the panel's API with the visitor's session."""

    def __init__(self, target):
        self.target = target
        pages = self.pages()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - the http.server interface
                page = pages.get(self.path.split("?")[0])
                body = (page or "not found").encode()
                self.send_response(200 if page else 404)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://localhost:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def pages(self):
        action = self.target + "/api/v1/tokens"

        def form(enctype):
            # A field named '{"a":"' with the value '"}': text/plain sends {"a":"="}.
            return f"""<!doctype html><html><head><title>A harmless page</title></head><body>
<h1>Nothing to see here</h1>
<form id="f" method="POST" action="{action}" enctype="{enctype}">
<input type="hidden" name='{{"a":"' value='"}}'>
</form>
<script>document.getElementById('f').submit();</script>
</body></html>"""

        return {
            "/form-plain": form("text/plain"),
            "/form-urlencoded": form("application/x-www-form-urlencoded"),
            "/blank": "<!doctype html><html><head><title>Another site</title></head>"
                      "<body><h1>Another site</h1><pre id='out'></pre></body></html>",
        }

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class Session:
    """sam's browser on the panel: sign-in, pages, screenshots, the session cookie."""

    def __init__(self, server, panel, shots):
        self.server = server
        self.panel = panel
        self.shots = shots

    def shot(self, name):
        path = os.path.join(self.shots, name + ".png")
        self.panel.driver.save_screenshot(path)
        step(f"  screenshot {path}")

    def signed_in(self):
        return bool(self.panel.css("#identity")) and not self.panel.css("#signin-name")

    def sign_in(self):
        """Signs sam in from the sign-in screen (signing out first when a session is live);
        returns (the session cookie's value, the monotonic time the panel showed sam)."""
        panel = self.panel
        panel.go("/")
        wait_until(lambda: panel.css("#signin-name") or panel.css("#identity"), "the panel to load")
        if panel.css("#identity"):
            panel.one("#signout").click()
            panel.one("#signin-name")
        panel.fill("#signin-name", NAME)
        panel.fill("#signin-password", PASSWORD).send_keys(Keys.ENTER)
        panel.wait_text("#identity", NAME)
        at = time.monotonic()
        cookie = panel.driver.get_cookie(COOKIE)
        check(cookie is not None and cookie.get("value"), f"no {COOKIE} cookie after signing in: {cookie!r}")
        return cookie["value"], at

    def show(self, route, marker):
        """Navigates to `route` and returns True when it is shown signed in (its `marker` and
        #identity), False when the sign-in screen is shown instead."""
        panel = self.panel
        panel.go(route)

        def settled():
            if panel.css("#signin-name"):
                return "out"
            if panel.css(marker) and panel.css("#identity"):
                return "in"
            return None

        state = wait_until(settled, f"{route} or the sign-in screen", timeout=15)
        if state == "in":
            time.sleep(0.4)  # a refusal of the page's own calls would show the sign-in screen now
            state = "out" if panel.css("#signin-name") else "in"
        return state == "in"

    def whoami(self, cookie):
        status, body = http(self.server.url + "/api/v1/whoami", cookie=cookie)
        return status, body


PAGES = [("/tasks?project=default", "#task-search"),
         ("/runs?project=default", "#runs-filters"),
         ("/?project=default", "#status-tiles")]


def idle_expiry(s):
    step(f"1. idle expiry (--session-idle {IDLE_S})")
    cookie, signed_in_at = s.sign_in()
    step("  signed in as sam: #identity shown")
    s.shot("1-signed-in")
    # Left on the Tasks page, which does not refresh itself: nothing uses the session now.
    check(s.show("/tasks?project=default", "#task-search"), "the Tasks page is not shown right after signing in")
    last_use = time.monotonic()
    status, body = s.whoami(cookie)
    check(status == 200, f"GET /api/v1/whoami with the fresh session cookie answered {status}: {body[:300]!r}")
    step(f"  whoami with the session cookie: {status}; leaving the panel untouched for 13 s")
    s.shot("1-tasks-before-idle")
    time.sleep(max(0.0, last_use + 13 - time.monotonic()))
    step(f"  {time.monotonic() - signed_in_at:.1f} s after signing in, "
         f"{time.monotonic() - last_use:.1f} s after the last use: opening the Runs page")
    shown = s.show("/runs?project=default", "#runs-filters")
    s.shot("1-after-idle")
    check(not shown, "13 s untouched (idle bound 10 s), the panel still shows its pages: the session did not end")
    step("  the sign-in screen is shown (#signin-name)")
    status, body = s.whoami(cookie)
    check(status == 401, f"GET /api/v1/whoami with the idle session's cookie answered {status}, expected 401: "
                         f"{body[:300]!r}")
    step(f"  whoami with the idle session's cookie: {status} {json.loads(body).get('code')}")


def absolute_expiry(s):
    step(f"2. absolute expiry (--session-lifetime {LIFETIME_S}), kept busy with a page every 3 s")
    cookie, signed_in_at = s.sign_in()
    step("  signed in as sam again")
    s.shot("2-signed-in")
    went_out = None
    checked_busy = False
    n = 0
    while True:
        n += 1
        due = signed_in_at + 3 * n
        time.sleep(max(0.0, due - time.monotonic()))
        route, marker = PAGES[n % len(PAGES)]
        shown = s.show(route, marker)
        elapsed = time.monotonic() - signed_in_at
        step(f"  {elapsed:5.1f} s: {route} -> {'signed in' if shown else 'sign-in screen'}")
        if not shown and went_out is None:
            went_out = elapsed
            s.shot("2-signed-out")
        if 3 * n >= 15 and not checked_busy:
            checked_busy = True
            check(went_out is None,
                  f"used every 3 s, the session ended {(went_out or 0):.1f} s after signing in: use within the "
                  f"idle bound ({IDLE_S} s) did not keep it alive")
            status, body = s.whoami(cookie)
            check(status == 200, f"{elapsed:.1f} s after signing in and used every 3 s, GET /api/v1/whoami "
                                 f"with the session cookie answered {status}: {body[:300]!r}")
            step(f"  {elapsed:5.1f} s: still signed in past the idle bound; whoami with the cookie: {status}")
            s.shot("2-busy-past-idle")
        if 3 * n >= 27:
            break
    elapsed = time.monotonic() - signed_in_at
    check(went_out is not None, f"{elapsed:.1f} s after signing in (lifetime {LIFETIME_S} s) the panel "
                                "still shows its pages")
    check(s.panel.css("#signin-name"), "the sign-in screen is not shown at the end")
    s.shot("2-after-lifetime")
    status, body = s.whoami(cookie)
    check(status == 401, f"{elapsed:.1f} s after signing in (lifetime {LIFETIME_S} s), GET /api/v1/whoami "
                         f"with the session cookie answered {status}, expected 401: {body[:300]!r}")
    step(f"  signed out {went_out:.1f} s after signing in; whoami with the old cookie at "
         f"{elapsed:.1f} s: {status} {json.loads(body).get('code')}")


def sam_api_tokens(server, sam_id):
    items = api(server, "GET", "/api/v1/tokens")["items"]
    return sorted(t["id"] for t in items if t["principal_id"] == sam_id and t["kind"] == "api")


def navigation_status(panel):
    return panel.driver.execute_script(
        "const e = performance.getEntriesByType('navigation')[0];"
        "return e && e.responseStatus !== undefined ? e.responseStatus : null;")


def cross_site(s, other, sam_id):
    step(f"3. another site ({other.url}) cannot write with sam's session")
    server, panel = s.server, s.panel
    before = sam_api_tokens(server, sam_id)
    step(f"  sam's API tokens before: {len(before)}")
    refusals = []

    for name, enctype in (("form-plain", "text/plain"), ("form-urlencoded", "application/x-www-form-urlencoded")):
        cookie, _ = s.sign_in()
        status, _ = s.whoami(cookie)
        check(status == 200, f"the fresh session's whoami answered {status}")
        step(f"  signed in afresh (whoami {status}); opening {other.url}/{name}, a form posting itself "
             f"({enctype}) to {server.url}/api/v1/tokens")
        panel.driver.get(f"{other.url}/{name}")
        wait_until(lambda: panel.driver.current_url.startswith(server.url + "/api/v1/tokens"),
                   "the form's post to land on the API", timeout=15)
        wait_until(lambda: panel.driver.execute_script("return document.readyState") == "complete",
                   "the answer to load")
        text = panel.driver.execute_script("return document.body ? document.body.innerText : ''")
        nav_status = navigation_status(panel)
        s.shot(f"3-{name}")
        try:  # the JSON answer, perhaps under the browser's own "Pretty-print" control
            code = json.loads(text[text.index("{"):text.rindex("}") + 1]).get("code")
        except ValueError:
            code = None
        step(f"  the browser got HTTP {nav_status}: {text.strip()[:200]}")
        check(nav_status in (401, 403) or (nav_status is None and code in ("unauthorized", "csrf_failed")),
              f"the cross-site {enctype} form post was answered {nav_status}: {text[:300]!r}")
        check(code in ("unauthorized", "csrf_failed", "token_missing"),
              f"the cross-site {enctype} form post was not refused: {text[:300]!r}")
        refusals.append(f"{name}: {nav_status} {code}")
        status, _ = s.whoami(cookie)
        check(status == 200, f"sam's session ended during the {name} attempt (whoami {status}): inconclusive")

    cookie, _ = s.sign_in()
    status, _ = s.whoami(cookie)
    check(status == 200, f"the fresh session's whoami answered {status}")
    panel.driver.get(f"{other.url}/blank")
    panel.one("#out")
    step(f"  signed in afresh (whoami {status}); fetch() from {other.url} with credentials:'include'")
    results = panel.driver.execute_async_script("""
        const [url, done] = [arguments[0], arguments[arguments.length - 1]];
        const out = [];
        const attempt = (label, init) => fetch(url, Object.assign({method: 'POST', credentials: 'include'}, init))
            .then((r) => out.push(`${label}: HTTP ${r.status} (type ${r.type})`))
            .catch((e) => out.push(`${label}: refused by the browser (${e})`));
        attempt('application/json', {headers: {'Content-Type': 'application/json'},
                                     body: JSON.stringify({principal: 'sam', label: 'stolen'})})
          .then(() => attempt('no-cors text/plain', {mode: 'no-cors', headers: {'Content-Type': 'text/plain'},
                                                     body: JSON.stringify({label: 'stolen'})}))
          .then(() => { document.getElementById('out').textContent = out.join('\\n'); done(out); });""",
        server.url + "/api/v1/tokens")
    for line in results:
        step(f"  fetch {line}")
    s.shot("3-fetch")
    for line in results:
        check(" HTTP 2" not in line, f"a cross-site fetch succeeded: {line}")
    status, _ = s.whoami(cookie)
    check(status == 200, f"sam's session ended during the fetch attempts (whoami {status}): inconclusive")
    # The browser never sends the SameSite=Strict cookie along with those; the server refuses
    # them itself too: the same form post with the live cookie attached, as a browser that did
    # send it would, is 403 csrf_failed.
    req = urllib.request.Request(server.url + "/api/v1/tokens", method="POST", data=b'{"a":"="}\r\n')
    for header, value in (("Cookie", f"{COOKIE}={cookie}"), ("Content-Type", "text/plain"),
                          ("Origin", other.url), ("Sec-Fetch-Site", "cross-site"), ("Sec-Fetch-Mode", "navigate")):
        req.add_header(header, value)
    try:
        with urllib.request.urlopen(req, timeout=10) as res:
            status, body = res.status, res.read()
    except urllib.error.HTTPError as err:
        status, body = err.code, err.read()
    check(status == 403 and b"csrf_failed" in body,
          f"a cross-site form post carrying the live session cookie answered {status}: {body[:300]!r}")
    step(f"  the same post with the live cookie attached (Sec-Fetch-Site: cross-site): {status} csrf_failed")

    after = sam_api_tokens(server, sam_id)
    new = sorted(set(after) - set(before))
    check(not new, f"a cross-site request created API token(s) for sam: {new}")
    step(f"  sam's API tokens after: {len(after)} (none new); the form posts: {'; '.join(refusals)}")
    # A control: the same browser on the panel's own origin can mint one (the refusal above is
    # about where the request came from, not a broken route).
    panel.go("/tasks?project=default")
    panel.one("#task-search")
    own = panel.driver.execute_async_script("""
        const done = arguments[arguments.length - 1];
        fetch('/api/v1/tokens', {method: 'POST', credentials: 'same-origin',
                                 headers: {'Content-Type': 'application/json',
                                           'X-QL-CSRF': sessionStorage.getItem('ql.csrf')},
                                 body: '{}'}).then((r) => done(r.status), (e) => done(String(e)));""")
    check(own == 201, f"the panel's own origin could not mint a token with its CSRF token: {own}")
    check(len(sam_api_tokens(server, sam_id)) == len(after) + 1, "the control token is not listed")
    step(f"  control: the same request from the panel's own page with its CSRF token: {own}")


def scenario(server, panel, shots, other):
    api(server, "POST", "/api/v1/principals", {"name": NAME})
    api(server, "POST", "/api/v1/projects/default/bindings", {"principal": NAME, "role": "operator"})
    api(server, "POST", f"/api/v1/principals/{NAME}/password", {"new_password": PASSWORD})
    sam_id = next(p["id"] for p in api(server, "GET", "/api/v1/principals")["items"] if p["name"] == NAME)
    step(f"sam ({sam_id}) is an operator of the default project with a password")
    s = Session(server, panel, shots)
    idle_expiry(s)
    absolute_expiry(s)
    cross_site(s, other, sam_id)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--screenshots", required=True)
    args = parser.parse_args()
    os.makedirs(args.screenshots, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="ql-session-browser-")
    server = Server(args.bin_dir, workdir)
    panel = None
    other = None
    started = time.monotonic()
    try:
        server.start()
        step(f"ql-local serve on {server.url} with --session-idle {IDLE_S} --session-lifetime {LIFETIME_S}")
        other = OtherSite(server.url)
        panel = Panel(server.url, args.screenshots)
        scenario(server, panel, args.screenshots, other)
    except Exception as err:  # noqa: BLE001 - report everything, then fail
        if not isinstance(err, Failure):
            traceback.print_exc()
        if panel:
            try:
                panel.driver.save_screenshot(os.path.join(args.screenshots, "failure.png"))
                print("URL at failure:", panel.driver.current_url)
                print("page text:", panel.driver.execute_script(
                    "return document.body ? document.body.innerText : ''")[:2000])
            except WebDriverException:
                pass
        server.dump_log()
        print(f"session browser test: FAILED: {err}")
        return 1
    finally:
        if panel:
            panel.quit()
        if other:
            other.stop()
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"session browser test: passed in {time.monotonic() - started:.0f} s; screenshots in {args.screenshots}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
