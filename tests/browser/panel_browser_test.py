#!/usr/bin/env python3
"""The web panel in a real headless browser (Debian chromium + chromedriver + python3-selenium).

Starts a real server on a temporary data directory and a free port, `ql-local serve` or (with
--server cluster) a throwaway PostgreSQL, `ql-cluster serve` and one `ql-worker`, and drives the
panel as a person would: sign in; create a task and a trigger every 2 seconds through the
forms; see runs appear and a log stream live; cancel a long run; a bad cron expression shows
the server's message; set a secret (its value never shows again) and run a task that names it;
an operator requests a run of a task that requires approval, the owner's own request is refused
approval (approval_self) and the operator's is approved in the page, and the run happens; a
viewer's token sees no edit control and a forced write is refused with 403; a trigger with
overlap `forbid` every second on a task that sleeps 3 s records skipped runs with their reason;
a task's concurrency limit round-trips through its form; and (ql-local only) an approved run left
in recovery_required by killing ql-local and the attempt's supervisor is resolved in the run
page's Resolve form. Scripts: a script written in the page's editor (line numbers beside it) and
saved twice is two versions holding the bytes typed, their diff shows the changed line, a task
pinned to the first is listed under Used by, and a save over a version someone pushed past is
refused with a clear message; a viewer's editor is read-only. Workers: ql-local's page says it runs
every task itself; a cluster's lists its worker (state, pool, labels as chips, slots), which is
drained and resumed, grants a pool to the project and revokes it, and a run asking for labels no
worker has says on its page that it waits for a worker. Accounts: a failed single sign-on's error shown and taken out of the address;
a password set with require_change forces its change before anything else; a person opens
Account from their name, sets up a second factor from the QR code's key (the code computed here,
RFC 6238), sees the recovery codes once, signs in again with a code, revokes another session of
theirs and removes the second factor; and, once the server has the routes (REQUIRE_NEW_ROUTES),
the first-start set-up form and a second factor required of everyone on the People page, which
leaves a person without one only its set-up. Every page is saved
as a screenshot, desktop and 360 px wide, into --screenshots, and must not scroll sideways at
360 px. A missing browser or driver is a failure, never a skip.
"""

import argparse
import base64
import hashlib
import hmac
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.error
import urllib.parse
import urllib.request

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
# The browser's own zone, unlike the triggers' (UTC), so both appear next to each other.
VIEWER_TZ = "Asia/Shanghai"
DESKTOP = (1280, 1000)
PHONE = (360, 780)
# The owner's first password, chosen in the first-start set-up form.
OWNER_PASSWORD = "owner's first long passphrase"
# Typed into the Secrets page; it must never be shown by any page afterwards.
SECRET_VALUE = "pv-7f1c-s3cr3t-value"
# The sign-in policy routes (GET /api/v1/sign-in/methods and POST /api/v1/setup; GET/POST
# /api/v1/settings; whoami's session.restriction) are required: a server without them fails the
# test. False would turn their absence into a printed note (for running this test against an
# older server).
REQUIRE_NEW_ROUTES = True


class Failure(Exception):
    pass


def check(condition, message):
    if not condition:
        raise Failure(message)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(url, method="GET", token=None, body=None):
    """Returns (status, headers, body bytes) for one request."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, method=method, data=data)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as res:
            return res.status, res.headers, res.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers, err.read()


def wait_until(fn, what, timeout=30.0, interval=0.2):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            value = fn()
            if value:
                return value
        except (StaleElementReferenceException, WebDriverException) as err:
            last = err
        time.sleep(interval)
    raise Failure(f"timed out after {timeout:.0f} s waiting for {what}" + (f" ({last})" if last else ""))


class Server:
    """A running QingLong API: `url` and the owner's `token`; stop() ends everything."""

    def __init__(self, args, workdir):
        self.args = args
        self.workdir = workdir
        self.procs = []
        self.logs = []
        self.url = ""
        self.token = ""

    def spawn(self, name, argv, **kwargs):
        log = open(os.path.join(self.workdir, name + ".log"), "wb")
        self.logs.append(log.name)
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, **kwargs)
        self.procs.append(proc)
        return proc

    def wait_ready(self):
        def ready():
            try:
                return http(self.url + "/readyz")[0] == 200
            except OSError:
                return False

        wait_until(ready, self.url + "/readyz", timeout=60)

    def start(self):
        if self.args.server == "local":
            self.start_local()
        else:
            self.start_cluster()

    def start_local(self, port=None, log_name="ql-local"):
        port = port or free_port()
        self.data = os.path.join(self.workdir, "data")
        self.local = self.spawn(log_name, [os.path.join(self.args.bin_dir, "ql-local"), "serve", "--data", self.data,
                                           "--listen", f"127.0.0.1:{port}", "--shutdown-wait", "2",
                                           # The Notifications page's test channel posts to a
                                           # receiver on 127.0.0.1 (i18n_browser_test.py).
                                           "--notify-allow-loopback"])
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.wait_ready()
        with open(os.path.join(self.data, "owner.token")) as f:
            self.token = f.read().strip()

    def crash_local(self):
        """SIGKILLs ql-local (no shutdown of any kind)."""
        self.local.kill()
        self.local.wait()

    def restart_local(self):
        """Starts ql-local again on the same data directory and port."""
        self.start_local(self.port, "ql-local-restarted")

    def start_cluster(self):
        helper = subprocess.Popen([self.args.postgres, self.args.roles_sql], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.procs.append(helper)
        line = helper.stdout.readline()
        if not line:
            raise Failure("throwaway PostgreSQL did not start: " + helper.stderr.read())
        urls = json.loads(line)
        env = dict(os.environ, QL3_POSTGRES_ALLOW_INSECURE="true")
        cluster = os.path.join(self.args.bin_dir, "ql-cluster")

        def run(argv):
            out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
            check(out.returncode == 0, f"{' '.join(argv[:3])} failed: {out.stderr}")
            return out.stdout.strip().splitlines()[-1]

        run([cluster, "migrate", "--database-url", urls["migration"]])
        self.token = run([cluster, "token", "create", "owner", "--database-url", urls["admin"]])
        worker_token = run([cluster, "worker-token", "create", "panel-worker", "--database-url", urls["admin"]])
        token_file = os.path.join(self.workdir, "worker.token")
        with open(token_file, "w") as f:
            f.write(worker_token + "\n")
        os.chmod(token_file, 0o600)
        port, worker_port = free_port(), free_port()
        key_file = os.path.join(self.workdir, "secret.key")
        with open(os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
            f.write(os.urandom(32))
        self.spawn("ql-cluster", [cluster, "serve", "--database-url", urls["runtime"],
                                  "--admin-database-url", urls["admin"],
                                  "--worker-database-url", urls["worker"],
                                  "--listen", f"127.0.0.1:{port}",
                                  "--worker-listen", f"127.0.0.1:{worker_port}",
                                  "--secret-key-file", key_file,
                                  "--shutdown-wait", "2"], env=env)
        self.url = f"http://127.0.0.1:{port}"
        self.wait_ready()
        self.spawn("ql-worker", [os.path.join(self.args.bin_dir, "ql-worker"), "--control",
                                 f"http://127.0.0.1:{worker_port}", "--token-file", token_file,
                                 "--slots", "4", "--work-dir", os.path.join(self.workdir, "worker"),
                                 "--label", "zone=panel",
                                 "--secret-key-file", key_file],
                   env=env)

    def stop(self):
        for proc in reversed(self.procs):
            if proc.poll() is not None:
                continue
            if proc.stdin:
                proc.stdin.close()  # the PostgreSQL helper stops on end of input
            else:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def dump_logs(self):
        for path in self.logs:
            with open(path, "rb") as f:
                tail = f.read()[-4000:].decode(errors="replace")
            print(f"---- {os.path.basename(path)} (tail)\n{tail}")


class Panel:
    """The browser on the panel, with helpers that wait for what a page shows."""

    def __init__(self, base, shots, lang="en-US"):
        """`lang`: the browser's language (--lang and the Accept-Language preference)."""
        check(os.path.exists(CHROMIUM), f"{CHROMIUM} is missing: run scripts/install-deps.sh (package chromium)")
        check(os.path.exists(CHROMEDRIVER), f"{CHROMEDRIVER} is missing: run scripts/install-deps.sh (package chromium-driver)")
        self.base = base
        self.shots = shots
        self.profile = tempfile.mkdtemp(prefix="ql-panel-chromium-")
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                    "--no-first-run", "--disable-extensions", f"--lang={lang}",
                    f"--window-size={DESKTOP[0]},{DESKTOP[1]}", f"--user-data-dir={self.profile}"):
            options.add_argument(arg)
        options.add_experimental_option("prefs", {"intl.accept_languages": lang})
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        env = dict(os.environ, TZ=VIEWER_TZ)
        service = Service(executable_path=CHROMEDRIVER, env=env)
        self.driver = webdriver.Chrome(service=service, options=options)
        self.driver.set_script_timeout(20)
        self.console = []

    def quit(self):
        try:
            self.driver.quit()
        finally:
            shutil.rmtree(self.profile, ignore_errors=True)

    # Navigation and finding ---------------------------------------------------------------

    def go(self, route):
        self.driver.get(self.base + "/#" + route)

    def css(self, selector):
        return self.driver.find_elements(By.CSS_SELECTOR, selector)

    def one(self, selector, timeout=20):
        return wait_until(lambda: (self.css(selector) or [None])[0], selector, timeout)

    def button(self, text, timeout=20):
        xpath = f"//button[normalize-space()='{text}'] | //a[contains(@class,'btn') and normalize-space()='{text}']"
        return wait_until(lambda: (self.driver.find_elements(By.XPATH, xpath) or [None])[0], f"button {text!r}", timeout)

    def text(self, selector):
        els = self.css(selector)
        return els[0].text if els else ""

    def wait_text(self, selector, needle, timeout=20):
        return wait_until(lambda: needle in self.text(selector), f"{needle!r} in {selector}", timeout)

    def fill(self, selector, value):
        # Again when the page drew the field anew meanwhile (a stale element).
        def attempt():
            el = self.one(selector)
            el.clear()
            el.send_keys(value)
            return el

        return wait_until(attempt, f"{selector} to take the text")

    def main_text(self):
        return self.text("main")

    def collect_console(self):
        self.console += self.driver.get_log("browser")

    # Screenshots ----------------------------------------------------------------------------

    def shoot(self, name, show=None):
        """Saves the page at desktop size and at 360 px (as a phone), which must not scroll sideways;
        `show`, a selector, is scrolled into view in both."""
        scroll = f"document.querySelector({json.dumps(show)}).scrollIntoView({{block: 'center'}})"
        if show:
            self.driver.execute_script(scroll)
        time.sleep(0.3)
        self.driver.save_screenshot(os.path.join(self.shots, f"{name}-desktop.png"))
        self.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": PHONE[0], "height": PHONE[1], "deviceScaleFactor": 1, "mobile": True})
        try:
            time.sleep(0.4)
            if show:
                self.driver.execute_script(scroll)
                time.sleep(0.1)
            width = self.driver.execute_script("return document.documentElement.scrollWidth")
            self.driver.save_screenshot(os.path.join(self.shots, f"{name}-360.png"))
            check(width <= PHONE[0], f"page {name} is {width} px wide at {PHONE[0]} px: it scrolls sideways")
        finally:
            self.driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
            time.sleep(0.2)


def api(server, method, path, body=None, token=None):
    """Returns the JSON answer of one API call that must succeed (the owner's token by default)."""
    status, _, data = http(server.url + path, method=method, token=token or server.token, body=body)
    check(200 <= status < 300, f"{method} {path} answered {status}: {data[:300]!r}")
    return json.loads(data) if data else None


def principal_with_role(server, name, role):
    """Creates principal `name` with `role` in the default project; returns a token of it."""
    api(server, "POST", "/api/v1/principals", {"name": name, "kind": "user"})
    api(server, "POST", "/api/v1/projects/default/bindings",
        {"principal": name, "role": role, "mutation_id": f"panel-test-grant-{name}"})
    return api(server, "POST", "/api/v1/tokens", {"principal": name})["token"]


def api_error(server, path, query):
    """Returns the server's {code, message} for a GET expected to fail."""
    status, _, body = http(f"{server.url}{path}?{urllib.parse.urlencode(query, quote_via=urllib.parse.quote)}",
                           token=server.token)
    check(status == 400, f"{path} answered {status}, expected 400")
    return json.loads(body)


def totp_code(secret, at):
    """The RFC 6238 code (HMAC-SHA1, 30 s, 6 digits) of base32 `secret` at Unix time `at`."""
    secret = secret.replace(" ", "").upper()
    key = base64.b32decode(secret + "=" * (-len(secret) % 8))
    digest = hmac.new(key, struct.pack(">Q", int(at // 30)), hashlib.sha1).digest()
    offset = digest[-1] & 0x0F
    value = struct.unpack(">I", digest[offset:offset + 4])[0] & 0x7FFFFFFF
    return f"{value % 1000000:06d}"


def new_route(server, method, path, what):
    """Whether the server serves `path` (one of the routes REQUIRE_NEW_ROUTES is about). Absent,
    it is a failure when REQUIRE_NEW_ROUTES, else a printed note that `what` is not tested. Asked
    with the owner's token: without one, a server that lacks even a public route answers 401."""
    status, _, body = http(server.url + path, method=method, token=server.token,
                           body={} if method == "POST" else None)
    absent = status == 404 and b"route_not_found" in body
    if absent:
        check(not REQUIRE_NEW_ROUTES, f"{method} {path} is not served: {what} cannot be tested")
        print(f"note: {method} {path} is not served yet; not tested: {what}")
    return not absent


def public_json(server, path):
    """Returns the JSON answer of a public GET (no token) that must succeed."""
    status, _, data = http(server.url + path)
    check(status == 200, f"GET {path} answered {status}: {data[:300]!r}")
    return json.loads(data)


def password_principal(server, name, role, password, require_change=False):
    """Creates principal `name` with `role` in the default project and `password`."""
    principal_with_role(server, name, role)
    api(server, "POST", f"/api/v1/principals/{name}/password",
        {"new_password": password, "require_change": require_change})


def panel_password_sign_in(panel, name, password):
    panel.go("/")
    panel.fill("#signin-name", name)
    panel.fill("#signin-password", password).send_keys(Keys.ENTER)


def check_headers(server):
    status, headers, body = http(server.url + "/")
    check(status == 200, f"GET / answered {status}")
    check(headers.get("Content-Type", "").startswith("text/html"), "GET / is not text/html")
    csp = headers.get("Content-Security-Policy", "")
    check("script-src 'self'" in csp and "unsafe-inline" not in csp, f"weak CSP: {csp!r}")
    check(headers.get("X-Content-Type-Options") == "nosniff", "GET / lacks nosniff")
    check(headers.get("Cache-Control") == "no-cache", f"GET / Cache-Control {headers.get('Cache-Control')!r}")
    page = body.decode()
    start = page.index('src="/ui/') + len('src="')
    asset = page[start:page.index('"', start)]
    status, headers, _ = http(server.url + asset)
    check(status == 200 and headers.get("Content-Type", "").startswith("text/javascript"), f"{asset}: {status}")
    check("immutable" in headers.get("Cache-Control", ""), f"{asset} is not cached as immutable")
    status, headers, body = http(server.url + "/api/v1/no-such-route", token=server.token)
    check(status == 404 and json.loads(body)["code"] == "route_not_found", "unknown API route is not a JSON 404")
    status, headers, _ = http(server.url + "/api/v1/status", token=server.token)
    check(status == 200 and headers.get("Cache-Control") == "no-store", "API answers are not no-store")
    check(headers.get("X-Content-Type-Options") == "nosniff", "API answers lack nosniff")


def sign_in(panel, token, expect_role):
    panel.go("/")
    panel.fill("#token", token).send_keys(Keys.ENTER)
    panel.wait_text("#identity", expect_role)
    check(panel.text("#role") == expect_role, f"role shown {panel.text('#role')!r}, expected {expect_role!r}")


def sign_out(panel):
    panel.one("#signout").click()
    panel.one("#token")
    check(panel.driver.execute_script("return sessionStorage.getItem('ql.token')") is None,
          "the token is still in sessionStorage after signing out")


def create_task(panel, name, command, env="", timeout_s="60", secret_env="", approval=False, concurrency=""):
    panel.go("/tasks/new?project=default")
    panel.fill("#task-name", name)
    panel.fill("#task-command", command)
    if env:
        panel.fill("#task-env", env)
    if secret_env:
        panel.fill("#task-secret-env", secret_env)
    if approval:
        panel.one("#task-approval").click()
        Select(panel.one("#task-approver-role")).select_by_value("admin")
        panel.fill("#task-approval-ttl", "1")
    panel.fill("#task-timeout", timeout_s)
    if concurrency:
        panel.fill("#task-concurrency", concurrency)
    panel.one("#task-save").click()
    wait_until(lambda: "/tasks/" in panel.driver.current_url and "/new" not in panel.driver.current_url,
               f"the page of task {name}")
    panel.wait_text("h1", name)
    return panel.driver.current_url.split("/tasks/")[1].split("?")[0]


def alert_with(panel, needle):
    """Waits for an error banner holding `needle`; returns its text."""
    return wait_until(lambda: next((e.text for e in panel.css("main [role=alert]") if needle in e.text), None),
                      f"an error banner with {needle!r}")


def no_secret_shown(panel, where):
    check(SECRET_VALUE not in panel.main_text(), f"the secret's value shows in the text of {where}")
    check(SECRET_VALUE not in panel.driver.page_source, f"the secret's value is in the DOM of {where}")


def secrets_and_approvals(server, panel):
    """Secrets and approvals, signed in as the owner; ends signed in as the owner. Returns the
    approval request's id."""
    # A secret set in its page: the field is emptied and the value never shows again.
    panel.go("/secrets?project=default")
    panel.fill("#secret-name", "panel-secret")
    panel.fill("#secret-value", SECRET_VALUE)
    panel.one("#secret-form button[type=submit]").click()
    panel.wait_text("#secret-saved", "version 1")
    wait_until(lambda: "panel-secret" in panel.text("table"), "the secret in the list")
    check(panel.one("#secret-value").get_attribute("value") == "", "the value field was not emptied")
    check(panel.one("#secret-value").get_attribute("type") == "password", "the value field is not a password field")
    no_secret_shown(panel, "the Secrets page")
    panel.shoot("secrets")
    # A second value is version 2; an invalid name shows the server's message.
    panel.button("New value").click()
    check(panel.one("#secret-name").get_attribute("value") == "panel-secret", "New value did not fill the name")
    panel.fill("#secret-value", SECRET_VALUE)
    panel.one("#secret-form button[type=submit]").click()
    panel.wait_text("#secret-saved", "version 2")
    panel.fill("#secret-name", "9bad")
    panel.fill("#secret-value", "x")
    panel.one("#secret-form button[type=submit]").click()
    alert_with(panel, "secret_name_invalid")
    no_secret_shown(panel, "the Secrets page after two writes")
    # Another one deleted with a confirming second click: kept as a tombstone.
    panel.fill("#secret-name", "panel-doomed")
    panel.fill("#secret-value", "short-lived")
    panel.one("#secret-form button[type=submit]").click()
    panel.wait_text("#secret-saved", "panel-doomed is at version 1")
    row = "//tr[.//code[normalize-space()='panel-doomed']]"
    panel.driver.find_element(By.XPATH, row + "//button[normalize-space()='Delete']").click()
    panel.driver.find_element(By.XPATH, row + "//button[normalize-space()='Confirm delete']").click()
    panel.wait_text("#secret-saved", "panel-doomed deleted")
    wait_until(lambda: panel.driver.find_elements(By.XPATH, row + "//span[normalize-space()='deleted']"),
               "panel-doomed shown as deleted")

    # A task naming it in its secret environment: shown as a reference, and the run gets it.
    secret_task = create_task(panel, "panel-secret-user", 'echo "secret length ${#PANEL_SECRET}"',
                              secret_env="PANEL_SECRET=panel-secret")
    panel.wait_text("#task-env-list", "PANEL_SECRET ← secret panel-secret (current)")
    no_secret_shown(panel, "the task page")
    panel.go(f"/tasks/{secret_task}/edit?project=default")
    check(panel.one("#task-secret-env").get_attribute("value") == "PANEL_SECRET=panel-secret",
          "the form does not show the secret environment as NAME=secret")
    panel.go(f"/tasks/{secret_task}?project=default")
    panel.button("Run now").click()
    wait_until(lambda: "/runs/" in panel.driver.current_url, "the secret task's run")
    panel.wait_text("#log", f"secret length {len(SECRET_VALUE)}", timeout=40)
    panel.wait_text("#run-status", "succeeded", timeout=30)
    no_secret_shown(panel, "the run page")

    # A task whose manual runs need approval; the owner's own request cannot be approved by it.
    gated = create_task(panel, "panel-gated", "echo gated-run-ok", approval=True)
    panel.wait_text("#task-approval", "wait for an admin")
    panel.go(f"/tasks/{gated}/edit?project=default")
    check(panel.one("#task-approval").is_selected(), "the form does not show the approval policy")
    check(panel.one("#task-approval-ttl").get_attribute("value") == "1", "the form lost the approval TTL")
    panel.driver.execute_script("document.getElementById('task-approval').scrollIntoView()")
    panel.shoot("task-form-approval")
    panel.go(f"/tasks/{gated}?project=default")
    panel.button("Run now").click()
    panel.wait_text("#approval-requested", "Approval requested")
    panel.one("#approval-requested a.approval-link").click()
    panel.wait_text("#approval-status", "pending")
    panel.button("Approve").click()
    expected = "approval_self"
    alert_with(panel, expected)
    panel.shoot("approval-self")
    panel.fill("#reject-reason", "asked by mistake")
    panel.one("#reject-form button[type=submit]").click()
    panel.wait_text("#approval-status", "rejected")
    panel.wait_text("main", "asked by mistake")

    # An operator requests a run in the page: "approval requested", no Approve button for it.
    operator_token = principal_with_role(server, "otto", "operator")
    sign_out(panel)
    sign_in(panel, operator_token, "operator")
    panel.go(f"/tasks/{gated}?project=default")
    panel.button("Run now").click()
    panel.wait_text("#approval-requested", "Approval requested")
    check(not panel.css("main [role=alert]:not([hidden])"), "Run now of a gated task shows an error")
    panel.shoot("task-approval-requested")
    request_link = panel.one("#approval-requested a.approval-link")
    approval_id = request_link.get_attribute("href").split("/approvals/")[1].split("?")[0]
    request_link.click()
    panel.wait_text("#approval-status", "pending")
    panel.button("Withdraw")
    check(not [b.text for b in panel.css("main button") if b.text in ("Approve", "Reject")],
          "the operator sees the approver's buttons")
    panel.go("/approvals?project=default")
    panel.one(f"a.approval-link[title='{approval_id}']")
    panel.shoot("approvals")
    sign_out(panel)

    # The owner approves it in the page, and the run happens.
    sign_in(panel, server.token, "owner")
    panel.go("/approvals?project=default")
    panel.one(f"a.approval-link[title='{approval_id}']").click()
    panel.wait_text("#approval-status", "pending")
    panel.wait_text("main", "otto")
    panel.shoot("approval")
    panel.button("Approve").click()
    panel.wait_text("#approval-status", "approved")
    panel.wait_text("main", "Receipt")
    panel.shoot("approval-approved")
    panel.one("#approval-run a.run-link").click()
    panel.wait_text("#log", "gated-run-ok", timeout=40)
    panel.wait_text("#run-status", "succeeded", timeout=30)
    panel.wait_text("main", "approved")
    # The filter: approved lists it, pending no longer does.
    panel.go("/approvals?status=approved&project=default")
    panel.one(f"a.approval-link[title='{approval_id}']")
    panel.go("/approvals?status=pending&project=default")
    panel.wait_text("main", "No request waits for approval.")
    panel.go("/runs?status=recovery_required&project=default")
    panel.wait_text("main", "No run.")
    check(Select(panel.one("#runs-status")).first_selected_option.get_attribute("value") == "recovery_required",
          "the runs filter lacks recovery_required")
    return approval_id


def overlap_and_concurrency(server, panel):
    """A task's concurrency limit through its form, and a trigger with overlap forbid every second
    on a task that sleeps 3 s: its skipped runs show why. Signed in as the owner."""
    # Concurrency: the server's refusal shows, a limit round-trips, and empty is unlimited again.
    panel.go("/tasks/new?project=default")
    panel.fill("#task-name", "panel-sleeper")
    panel.fill("#task-command", "sleep 3")
    panel.fill("#task-concurrency", "0")
    panel.one("#task-save").click()
    alert_with(panel, "invalid_concurrency")
    panel.fill("#task-concurrency", "2")
    panel.one("#task-save").click()
    wait_until(lambda: "/tasks/" in panel.driver.current_url and "/new" not in panel.driver.current_url,
               "the page of task panel-sleeper")
    sleeper = panel.driver.current_url.split("/tasks/")[1].split("?")[0]
    panel.wait_text("#task-concurrency-limit", "at most 2 unfinished runs")
    check(api(server, "GET", f"/api/v1/tasks/{sleeper}")["concurrency"] == 2, "the task was not saved with concurrency 2")
    panel.go(f"/tasks/{sleeper}/edit?project=default")
    check(panel.one("#task-concurrency").get_attribute("value") == "2", "the form lost the concurrency limit")
    panel.shoot("task-form-concurrency", show="#task-concurrency")
    panel.one("#task-concurrency").clear()
    panel.one("#task-save").click()
    panel.wait_text("#task-concurrency-limit", "unlimited")
    check(api(server, "GET", f"/api/v1/tasks/{sleeper}")["concurrency"] is None, "emptying the field kept a limit")

    # Overlap forbid, chosen in the form: while one run sleeps, the next occurrences are skipped.
    panel.go(f"/triggers/new?task={sleeper}&project=default")
    panel.fill("#trigger-zone", "UTC")
    panel.fill("#trigger-expression", "* * * * * *")
    Select(panel.one("#trigger-overlap")).select_by_value("forbid")
    panel.wait_text("#trigger-overlap-choices li.chosen", "forbid")
    panel.fill("#trigger-jitter-seconds", "2")
    wait_until(lambda: len(panel.css("#preview ol.fire-times li")) == 5, "5 previewed fire times")
    panel.shoot("trigger-form-overlap", show="#trigger-overlap-choices")
    panel.one("#trigger-save").click()
    wait_until(lambda: "/triggers/" in panel.driver.current_url and "/new" not in panel.driver.current_url,
               "the forbid trigger's page")
    panel.wait_text("#trigger-overlap-policy", "forbid")
    trigger = panel.driver.current_url.split("/triggers/")[1].split("?")[0]
    check(api(server, "GET", f"/api/v1/triggers/{trigger}")["overlap"] == "forbid", "the trigger was not created with forbid")
    panel.wait_text("#trigger-jitter", "up to 2 s")
    check(api(server, "GET", f"/api/v1/triggers/{trigger}")["jitter_ms"] == 2000, "the trigger was not created with its jitter")
    panel.shoot("trigger-overlap")
    panel.go(f"/runs?task={sleeper}&project=default")
    skipped = "//tr[.//span[normalize-space()='skipped']]"
    wait_until(lambda: any("overlap" in e.text for e in panel.driver.find_elements(By.XPATH, skipped + "//span[contains(@class,'skip-reason')]")),
               "a skipped run with reason overlap in the list", timeout=30)
    api(server, "POST", f"/api/v1/triggers/{trigger}/disable")
    badge = panel.driver.find_element(By.XPATH, skipped + "//span[contains(@class,'badge')]")
    check(badge.rect["x"] > 0 and badge.value_of_css_property("border-top-style") == "dashed",
          f"skipped has no badge of its own (x {badge.rect['x']}, border {badge.value_of_css_property('border-top-style')})")
    Select(panel.one("#runs-status")).select_by_value("skipped")
    panel.one("#runs-filters button[type=submit]").click()
    wait_until(lambda: "status=skipped" in panel.driver.current_url, "the skipped filter applied")
    panel.one("a.run-link")
    check("running" not in panel.text("table") and "succeeded" not in panel.text("table"),
          "the skipped filter lists other runs")
    panel.shoot("runs-skipped")
    panel.driver.find_element(By.XPATH, skipped + "//a[contains(@class,'run-link')]").click()
    panel.wait_text("#run-skip-reason", "overlap")
    panel.wait_text("#run-skip-reason", "forbid")
    panel.wait_text("#log-state", "no attempt")
    panel.wait_text("main", "run.skipped")
    panel.shoot("run-skipped")
    panel.go("/triggers?project=default")
    wait_until(lambda: panel.driver.find_elements(By.XPATH, "//tr[.//td[normalize-space()='forbid']]"),
               "the trigger list showing forbid")


def supervisor_pids(attempt_id):
    """Returns the pids of supervisor processes (`... supervise <run root>/<attempt id>`)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"supervise" in argv and any(a.endswith(attempt_id.encode()) for a in argv):
            pids.append(int(entry))
    return pids


def resolve_recovery(server, panel):
    """An approved run whose attempt is lost after it started (ql-local and its supervisor
    SIGKILLed, ql-local restarted on the same data): recovery_required, resolved by the owner in
    the run page's Resolve form. Signed in as the owner; ql-local only."""
    requester = principal_with_role(server, "rhea", "operator")
    task = api(server, "POST", "/api/v1/tasks?project=default", {
        "name": "panel-guarded", "spec": {"command": {"kind": "shell", "command": "sleep 30", "shell": "/bin/sh"}},
        "approval": {"required": True, "approver_role": "admin"}})
    requested = api(server, "POST", "/api/v1/runs?project=default", {"task_id": task["id"]}, token=requester)
    check(requested.get("code") == "approval_required", f"the guarded run was not held for approval: {requested}")
    run_id = api(server, "POST", f"/api/v1/approvals/{requested['approval_id']}/approve")["run"]["id"]

    def started():
        run = api(server, "GET", f"/api/v1/runs/{run_id}")
        attempts = run.get("attempts") or []
        return run if run["status"] == "running" and attempts and attempts[-1].get("pid") else None

    run = wait_until(started, "the approved run running", timeout=30)
    attempt = run["attempts"][-1]
    supervisors = wait_until(lambda: supervisor_pids(attempt["id"]), f"the supervisor of attempt {attempt['id']}")
    server.crash_local()
    for pid in supervisors:
        os.kill(pid, signal.SIGKILL)
    try:
        os.killpg(attempt["pid"], signal.SIGKILL)  # the command's own group, orphaned now
    except ProcessLookupError:
        pass
    server.restart_local()
    wait_until(lambda: api(server, "GET", f"/api/v1/runs/{run_id}")["status"] == "recovery_required",
               "the run in recovery_required after the restart", timeout=30)

    panel.go(f"/runs/{run_id}?project=default")
    panel.wait_text("#run-status", "recovery_required")
    panel.one("#resolve-form")
    check(not panel.driver.find_elements(By.XPATH, "//button[normalize-space()='Cancel run']"),
          "a run in recovery_required offers Cancel")
    Select(panel.one("#resolve-resolution")).select_by_value("succeeded")
    reason = "checked the target by hand: the job completed"
    panel.fill("#resolve-reason", reason)
    panel.shoot("run-resolve-form", show="#resolve-form")
    panel.one("#resolve-form button[type=submit]").click()
    panel.wait_text("#run-status", "succeeded")
    panel.wait_text("#run-resolution", reason)
    owner_name = api(server, "GET", "/api/v1/whoami")["principal"]["name"]
    panel.wait_text("#run-resolution", f"by {owner_name}")
    check(not panel.css("#resolve-form"), "the Resolve form stays after the run was resolved")
    panel.wait_text("main", "run.recovery_resolved")
    panel.shoot("run-resolved")
    resolved = api(server, "GET", f"/api/v1/runs/{run_id}")
    check(resolved["status"] == "succeeded", f"the run is {resolved['status']} after resolving")


def password_sign_in(server, panel):
    """A person signs in with a name and password: the session lives in an HttpOnly cookie that a
    new tab picks up, a write carries the CSRF token, signing out ends it, and a principal
    disabled by an admin is thrown out within the 2 s bound."""
    principal_with_role(server, "pat", "operator")
    api(server, "POST", "/api/v1/principals/pat/password", {"new_password": "pat's long passphrase"})
    panel.go("/")
    panel.one("#signin-name")
    panel.fill("#signin-name", "pat")
    panel.fill("#signin-password", "not pat's password").send_keys(Keys.ENTER)
    panel.wait_text("#signin-form [role=alert]", "sign_in_failed")
    panel.fill("#signin-password", "pat's long passphrase").send_keys(Keys.ENTER)
    panel.wait_text("#identity", "operator")
    check(panel.driver.execute_script("return sessionStorage.getItem('ql.token')") is None,
          "a password sign-in left a token in sessionStorage")
    check("ql_session" not in panel.driver.execute_script("return document.cookie"),
          "the session cookie is readable by the page's script (not HttpOnly)")
    cookie = panel.driver.get_cookie("ql_session")
    check(cookie is not None and cookie.get("httpOnly") and cookie.get("sameSite") == "Strict",
          f"the session cookie is {cookie!r}")
    panel.shoot("signed-in-with-password")
    # A write through the cookie session (a run started from the panel's API helper) works.
    ok = panel.driver.execute_async_script("""
        const done = arguments[arguments.length - 1];
        fetch('/api/v1/tokens', {method: 'POST', credentials: 'same-origin',
                                 headers: {'Content-Type': 'application/json',
                                           'X-QL-CSRF': sessionStorage.getItem('ql.csrf')},
                                 body: '{}'}).then(r => done(r.status));""")
    check(ok == 201, f"a cookie-session write with its CSRF token answered {ok}")
    forged = panel.driver.execute_async_script("""
        const done = arguments[arguments.length - 1];
        fetch('/api/v1/tokens', {method: 'POST', credentials: 'same-origin',
                                 headers: {'Content-Type': 'application/json'}, body: '{}'})
            .then(r => done(r.status));""")
    check(forged == 403, f"a cookie-session write without the CSRF token answered {forged}")
    # A new tab is signed in already.
    first = panel.driver.current_window_handle
    panel.driver.switch_to.new_window("tab")
    panel.go("/")
    panel.wait_text("#identity", "operator")
    panel.driver.close()
    panel.driver.switch_to.window(first)
    # Disabled by an admin: out within the 2 s bound.
    api(server, "POST", "/api/v1/principals/pat/disable", {})
    time.sleep(2.2)
    panel.go("/tasks?project=default")
    panel.one("#signin-name")
    api(server, "POST", "/api/v1/principals/pat/enable", {})
    # Sign in again and out: the cookie session ends on the server too.
    panel.fill("#signin-name", "pat")
    panel.fill("#signin-password", "pat's long passphrase").send_keys(Keys.ENTER)
    panel.wait_text("#identity", "operator")
    session_cookie = panel.driver.get_cookie("ql_session")["value"]
    panel.one("#signout").click()
    panel.one("#signin-name")
    time.sleep(2.2)  # past the server's authentication cache
    status, _, _ = http(server.url + "/api/v1/whoami", token=session_cookie)
    check(status == 401, f"the signed-out session still answers {status}")


def sign_in_error_shown(panel):
    """A failed single sign-on comes back as /?sign_in_error=CODE: the sign-in screen says what
    it means (an unknown code as it is) and the address loses the query."""
    panel.driver.get(panel.base + "/?sign_in_error=oidc_no_principal#/")
    panel.wait_text("#signin-form [role=alert]", "oidc_no_principal")
    panel.wait_text("#signin-form [role=alert]", "no QingLong account is linked")
    check("sign_in_error" not in panel.driver.current_url,
          f"the address keeps the error: {panel.driver.current_url}")
    panel.shoot("signin-oidc-error")
    panel.driver.get(panel.base + "/?sign_in_error=some_new_code")
    panel.wait_text("#signin-form [role=alert]", "some_new_code")
    check("sign_in_error" not in panel.driver.current_url, "the address keeps an unknown error")
    panel.go("/")  # a reload: the message is gone
    panel.one("#signin-name")
    time.sleep(0.3)
    check(not panel.css("#signin-form [role=alert]:not([hidden])"), "the sign-in error outlived a reload")


def first_start_setup(server, panel):
    """(new routes) First start: the sign-in screen offers the set-up form, which takes the
    one-time code ql-local wrote to DATA/setup.code and the owner's first password, and signs in.
    Also: a single sign-on button when the server offers one."""
    if not new_route(server, "GET", "/api/v1/sign-in/methods", "sign-in methods, first-start set-up"):
        return
    methods = public_json(server, "/api/v1/sign-in/methods")
    panel.go("/")
    panel.one("#signin-name")
    if methods.get("oidc"):
        link = panel.one("#signin-oidc")
        check(link.text == f"Sign in with {methods['oidc']['name']}", f"the single sign-on button says {link.text!r}")
        check(link.get_attribute("href").endswith(methods["oidc"]["url"]), "the single sign-on button goes elsewhere")
    if server.args.server != "local":
        if methods.get("setup"):
            panel.one("#setup-form")
        return
    check(methods.get("setup") is True, f"a fresh ql-local does not offer set-up: {methods}")
    code_file = os.path.join(server.data, "setup.code")
    check(os.path.exists(code_file), f"{code_file} is missing while set-up is offered")
    with open(code_file) as f:
        code = f.read().strip()
    panel.one("#setup-form")
    panel.wait_text("#setup-form", "setup.code")
    panel.shoot("setup")
    panel.fill("#setup-code", "not-the-code")
    panel.fill("#setup-password", OWNER_PASSWORD)
    panel.fill("#setup-password-repeat", OWNER_PASSWORD)
    panel.one("#setup-form button[type=submit]").click()
    panel.wait_text("#setup-form [role=alert]", "setup_code_invalid")
    panel.fill("#setup-code", code)
    panel.fill("#setup-password", "short")
    panel.fill("#setup-password-repeat", "short")
    panel.one("#setup-form button[type=submit]").click()
    panel.wait_text("#setup-form [role=alert]", "password_too_short")
    panel.fill("#setup-password", OWNER_PASSWORD)
    panel.fill("#setup-password-repeat", OWNER_PASSWORD + "x")
    panel.one("#setup-form button[type=submit]").click()
    panel.wait_text("#setup-form [role=alert]", "differ")
    panel.fill("#setup-password-repeat", OWNER_PASSWORD)
    panel.one("#setup-form button[type=submit]").click()
    panel.wait_text("#identity", "owner")
    panel.one("#signout").click()
    panel.one("#signin-name")
    check(public_json(server, "/api/v1/sign-in/methods").get("setup") is False,
          "set-up is still offered after it was done")
    time.sleep(0.5)
    check(not panel.css("#setup-form"), "the set-up form is still shown after set-up")
    owner = api(server, "GET", "/api/v1/whoami")["principal"]["name"]
    panel_password_sign_in(panel, owner, OWNER_PASSWORD)
    panel.wait_text("#identity", "owner")
    panel.one("#signout").click()
    panel.one("#signin-name")


def forced_password_change(server, panel):
    """A password an admin set with require_change: the only screen is the password change, with
    no navigation, until the person has chosen their own; then the panel goes on as usual."""
    password_principal(server, "rory", "operator", "rory's first passphrase", require_change=True)
    panel_password_sign_in(panel, "rory", "rory's first passphrase")
    panel.one("#restricted[data-restriction='password_change']")
    check(not panel.css("nav.nav") and not panel.css("#account-link"), "a restricted session shows navigation")
    panel.shoot("restricted-password")
    panel.go("/tasks?project=default")  # navigating by hand changes nothing
    panel.one("#restricted[data-restriction='password_change']")
    panel.fill("#password-current", "rory's first passphrase")
    panel.fill("#password-new", "rory's own long passphrase")
    panel.fill("#password-repeat", "rory's own long passphrase!")
    panel.one("#password-form button[type=submit]").click()
    panel.wait_text("#password-form [role=alert]", "differ")
    panel.fill("#password-repeat", "rory's own long passphrase")
    panel.one("#password-form button[type=submit]").click()
    panel.wait_text("#identity", "operator")
    panel.one("nav.nav")
    panel.one("#signout").click()
    panel.one("#signin-name")
    panel_password_sign_in(panel, "rory", "rory's own long passphrase")
    panel.wait_text("#identity", "operator")
    check(not panel.css("#restricted"), "the password change did not lift the restriction")
    panel.one("#signout").click()
    panel.one("#signin-name")


def enrol_totp_in_page(panel, shots=""):
    """Sets up a second factor in the enrolment shown (Account page or the restricted screen):
    the QR code and the key, a code computed from the key, the ten recovery codes. Returns the key."""
    panel.one("#totp-start").click()
    qr = panel.one("#totp-qr svg.qr")
    check(qr.is_displayed() and qr.size["width"] >= 150, f"the QR code is not shown ({qr.size})")
    modules = int(qr.get_attribute("data-modules") or 0)
    check(modules >= 21, f"the QR code has {modules} modules a side")
    check(len(panel.css("#totp-qr svg.qr path.qr-dark")) == 1, "the QR code has no dark modules")
    secret = panel.one("#totp-secret").get_attribute("data-secret")
    shown = panel.text("#totp-secret").replace(" ", "")
    check(secret and shown == secret, f"the key shown ({shown!r}) is not the key ({secret!r})")
    if shots:
        panel.shoot(shots + "-enrol", show="#totp-enrol")
    panel.fill("#totp-code", "000000" if totp_code(secret, time.time()) != "000000" else "111111")
    panel.one("#totp-confirm-form button[type=submit]").click()
    panel.wait_text("#totp-confirm-form [role=alert]", "totp_invalid")
    panel.fill("#totp-code", totp_code(secret, time.time()))
    panel.one("#totp-confirm-form button[type=submit]").click()
    wait_until(lambda: len(panel.css("#recovery-codes li")) == 10, "ten recovery codes")
    panel.wait_text("#totp-enrol", "shown only this once")
    if shots:
        panel.shoot(shots + "-recovery", show="#recovery-codes")
    panel.one("#totp-done").click()
    return secret


def account_and_totp(server, panel):
    """A person with a password opens Account from their name: their sessions (this one marked),
    a second factor set up from the QR code's key, signing in again with a code, another session
    revoked, and the second factor removed again."""
    password = "tess's long passphrase"
    password_principal(server, "tess", "operator", password)
    status, _, body = http(server.url + "/api/v1/sign-in", "POST",
                           body={"name": "tess", "password": password, "client": "cli"})
    check(status == 200, f"tess's sign-in as the CLI answered {status}: {body[:200]!r}")
    other_session = json.loads(body)["token"]
    panel_password_sign_in(panel, "tess", password)
    panel.wait_text("#identity", "operator")
    panel.one("#account-link").click()
    panel.wait_text("#account-name", "tess")
    wait_until(lambda: len(panel.css("#sessions tbody tr")) == 2, "tess's two sessions")
    check(len(panel.css("#sessions .current-session")) == 1, "this session is not marked")
    panel.shoot("account")

    secret = enrol_totp_in_page(panel, shots="account-totp")
    panel.wait_text("#totp-state", "On")
    panel.one("#signout").click()
    panel.one("#signin-name")

    # Signing in again needs a code: the next step's (the one just used is spent).
    panel_password_sign_in(panel, "tess", password)
    panel.wait_text("#signin-form [role=alert]", "totp_required")
    panel.one("#signin-totp")
    panel.fill("#signin-totp", totp_code(secret, time.time() + 30)).send_keys(Keys.ENTER)
    panel.wait_text("#identity", "operator")

    # The CLI session is revoked from the Account page.
    panel.one("#account-link").click()
    panel.wait_text("#account-name", "tess")
    other_row = "//div[@id='sessions']//tr[not(.//span[contains(@class,'current-session')])]"
    wait_until(lambda: panel.driver.find_elements(By.XPATH, other_row + "//button[normalize-space()='Revoke']"),
               "the other session's Revoke button")
    panel.driver.find_element(By.XPATH, other_row + "//button[normalize-space()='Revoke']").click()
    panel.driver.find_element(By.XPATH, other_row + "//button[normalize-space()='Confirm revoke']").click()
    wait_until(lambda: len(panel.css("#sessions tbody tr")) == 1 and panel.css("#sessions .current-session"),
               "only this session left")
    time.sleep(2.2)  # past the server's authentication cache
    status, _, _ = http(server.url + "/api/v1/whoami", token=other_session)
    check(status == 401, f"the revoked session still answers {status}")

    # Removed with the current password (the page learns it is on when set-up is refused).
    if not panel.text("#totp-state").startswith("On"):
        panel.one("#totp-start").click()
        panel.wait_text("#totp-state", "On")
        panel.wait_text("#totp", "set already")
    panel.fill("#totp-disable-password", "not tess's password")
    panel.one("#totp-disable-form button[type=submit]").click()
    panel.wait_text("#totp-disable-form [role=alert]", "wrong_password")
    panel.fill("#totp-disable-password", password)
    panel.one("#totp-disable-form button[type=submit]").click()
    panel.wait_text("#totp-state", "Off")
    panel.one("#totp-start")
    panel.one("#signout").click()
    panel.one("#signin-name")
    panel_password_sign_in(panel, "tess", password)
    panel.wait_text("#identity", "operator")
    panel.one("#signout").click()
    panel.one("#signin-name")


def required_second_factor(server, panel):
    """(new routes) An installation admin requires a second factor of everyone on the People
    page; a person without one then sees only its set-up after signing in, and goes on once it
    is done."""
    if not new_route(server, "GET", "/api/v1/settings", "the sign-in policy (require a second factor)"):
        return
    sign_in(panel, server.token, "owner")
    panel.go("/people?project=default")
    Select(panel.one("#require-second-factor")).select_by_value("everyone")
    panel.one("#settings-form button[type=submit]").click()
    panel.wait_text("#settings-saved", "everyone")
    panel.shoot("people-sign-in-policy", show="#settings-form")
    check(api(server, "GET", "/api/v1/settings")["require_second_factor"] == "everyone",
          "the setting did not reach the server")
    sign_out(panel)
    try:
        password = "una's long passphrase"
        password_principal(server, "una", "operator", password)
        panel_password_sign_in(panel, "una", password)
        panel.one("#restricted[data-restriction='totp_enrolment']")
        check(not panel.css("nav.nav"), "a restricted session shows navigation")
        status, code = panel.driver.execute_async_script("""
            const done = arguments[arguments.length - 1];
            fetch('/api/v1/projects', {credentials: 'same-origin'})
                .then((r) => r.json().then((b) => done([r.status, b.code])));""")
        check(status == 403 and code == "totp_enrolment_required",
              f"a restricted session read projects: {status} {code}")
        panel.shoot("restricted-totp")
        enrol_totp_in_page(panel)
        panel.wait_text("#identity", "operator")
        panel.one("nav.nav")
        panel.one("#signout").click()
        panel.one("#signin-name")
    finally:
        api(server, "POST", "/api/v1/settings", {"require_second_factor": "off"})


def long_log_shows_its_end(server, panel):
    """A run that printed 32 MiB: its page shows the log's last line within 300 ms of opening
    (only the end is read; earlier output is marked as not shown), and Download saves the whole
    kept log."""
    task = api(server, "POST", "/api/v1/tasks", {
        "name": "panel-long-log",
        "spec": {"command": {"kind": "shell", "shell": "/bin/sh",
                             "command": "head -c 33554432 /dev/zero | tr '\\0' x | fold -w 99; "
                                        "echo LAST-LINE-OF-THE-LOG"},
                 "timeoutMs": 120000}})
    run = api(server, "POST", f"/api/v1/tasks/{task['id']}/runs", {})
    wait_until(lambda: api(server, "GET", f"/api/v1/runs/{run['id']}")["status"] == "succeeded",
               "the 32 MiB run to succeed", timeout=90)
    samples = []
    for _ in range(3):
        panel.go("/runs?project=default")
        panel.one("a.run-link")
        # The time from the route's change to the log's last line on screen, taken in the page.
        panel.driver.execute_script(
            "window.__shown = null; const t0 = performance.now();"
            "new MutationObserver((_, o) => {"
            "  const log = document.getElementById('log');"
            "  if (log && log.textContent.includes('LAST-LINE-OF-THE-LOG')) {"
            "    window.__shown = performance.now() - t0; o.disconnect(); }"
            "}).observe(document.body, {subtree: true, childList: true, characterData: true});"
            "location.hash = arguments[0];", f"#/runs/{run['id']}?project=default")
        samples.append(wait_until(lambda: panel.driver.execute_script("return window.__shown;"),
                                  "the log's last line", timeout=20))
    samples.sort()
    print(f"32 MiB log: its end shown {samples[1]:.0f} ms after the route opened (median of 3: "
          f"{', '.join(f'{x:.0f}' for x in samples)})")
    check(samples[1] <= 300, f"the end of a 32 MiB log took {samples[1]:.0f} ms to show (bound 300)")
    check("[earlier output not shown]" in panel.text("#log"), "the skipped start is not marked")
    check(panel.one("#log-download").is_displayed(), "no Download button beside the log")
    # Search reads the whole log on the server: the last line is found with its number.
    panel.one("#log-search-q").send_keys("last-line-of")
    panel.one("#log-search button[type=submit]").click()
    panel.wait_text("#log-search-results", "Matching lines: 1")
    found = panel.text("#log-search-results ol.log-matches")
    # The kept log (its head and its end, within the cap) has the line the server numbered.
    line = api(server, "GET", f"/api/v1/runs/{run['id']}/log/search?q=LAST-LINE")["matches"][0]
    check(line["line"] > 1000 and found.startswith(f"{line['line']}: ")
          and found.endswith("LAST-LINE-OF-THE-LOG"), f"the search shows {found[:200]!r}")
    history_page(server, panel, task["id"])


def history_page(server, panel, task_id):
    """History: each task's recent runs as bars coloured by outcome, and what fires in the next
    24 hours (a daily trigger added here is there)."""
    api(server, "POST", "/api/v1/triggers",
        {"task_id": task_id, "expression": "17 3 * * *", "timezone": "UTC"})
    panel.go("/history?project=default")
    wait_until(lambda: panel.css("#history-grid svg.history-bars rect"), "bars of recent runs")
    statuses = [r.get_attribute("data-status") for r in panel.css("#history-grid rect")]
    check("succeeded" in statuses, f"no succeeded run among the bars: {statuses}")
    colours = {r.get_attribute("data-status"): r.get_attribute("class")
               for r in panel.css("#history-grid rect")}
    check(colours.get("succeeded") == "bar-ok", f"a succeeded run is not drawn as such: {colours}")
    panel.wait_text("#history-next", "panel-long-log")
    check("03:17" in panel.text("#history-next") or "3:17" in panel.text("#history-next"),
          f"the daily fire is not listed: {panel.text('#history-next')!r}")
    panel.shoot("history")
    # The task's own page charts its runs the same way, with how many succeeded.
    panel.go(f"/tasks/{task_id}?project=default")
    panel.wait_text("#task-chart-summary", "1 of 1 succeeded")
    bars = [r.get_attribute("data-status") for r in panel.css("#task-chart rect")]
    check(bars == ["succeeded"], f"the task chart draws {bars}")


def upload_blob(server, data):
    """Uploads `data` (bytes) as a blob of the default project; returns {digest, size}."""
    req = urllib.request.Request(server.url + "/api/v1/blobs?project=default", data=data, method="POST")
    req.add_header("Authorization", "Bearer " + server.token)
    req.add_header("Content-Type", "application/octet-stream")
    with urllib.request.urlopen(req, timeout=10) as res:
        return json.loads(res.read())


def script_content(server, name, version):
    status, _, body = http(f"{server.url}/api/v1/scripts/{name}/content?version={version}", token=server.token)
    check(status == 200, f"the content of {name}@{version} answered {status}")
    return body.decode()


def diff_rows(panel, kind):
    """The texts of the diff's lines of one kind (diff-add, diff-del), without the sign."""
    return [r.find_element(By.CSS_SELECTOR, "td.diff-text").text[1:].strip()
            for r in panel.css(f"#script-diff tr.{kind}")]


def scripts_page(server, panel):
    """Scripts, signed in as the owner: a script made in the editor (line numbers beside it), saved
    twice (two versions, each the bytes typed), the diff of the two showing the changed line, a
    task pinned to the first version listed under Used by, and a push made meanwhile refused with
    a clear message instead of being overwritten."""
    panel.go("/scripts?project=default")
    panel.one("main table tbody td:not(.loading)")
    panel.button("New script").click()
    panel.fill("#script-name", "panel-hello")
    panel.fill("#script-file", "hello.sh")
    panel.fill("#script-editor", "echo one\necho two\necho three\n")
    wait_until(lambda: panel.text(".editor-gutter").split() == ["1", "2", "3", "4"],
               "line numbers 1-4 beside the text")
    panel.shoot("script-new")
    panel.one("#script-create").click()
    panel.wait_text("#script-saved", "Saved as version 1.")
    check(script_content(server, "panel-hello", 1) == "echo one\necho two\necho three\n",
          "version 1 does not hold the text typed")
    # An edit saved over the version shown is the next version.
    panel.fill("#script-editor", "echo one\necho 2\necho three\n")
    panel.one("#script-save").click()
    panel.wait_text("#script-saved", "Saved as version 2.")
    versions = api(server, "GET", "/api/v1/scripts/panel-hello/versions")["items"]
    check([v["version"] for v in versions] == [2, 1], f"the script has versions {[v['version'] for v in versions]}")
    check(script_content(server, "panel-hello", 2) == "echo one\necho 2\necho three\n",
          "version 2 does not hold the edited text")
    check(panel.one("#script-editor").get_attribute("value") == "echo one\necho 2\necho three\n",
          "the editor does not show the saved version")
    wait_until(lambda: len(panel.css("a.version-link")) == 2, "two versions in the history")

    # A task pinned to version 1 (made through the API) is listed under Used by with its pin.
    api(server, "POST", "/api/v1/tasks", {"name": "panel-script-task",
                                          "spec": {"command": {"kind": "script", "script": "panel-hello", "version": 1}}})
    panel.driver.refresh()
    panel.wait_text("main", "panel-script-task")
    used = [r.text for r in panel.css("main tbody tr") if "panel-script-task" in r.text]
    check(used and " 1" in used[0] and "older" in used[0], f"Used by does not show the pin to version 1: {used}")
    panel.shoot("script", show="#script-editor")

    # The diff of the two versions: the changed line removed and added, nothing else.
    panel.button("Show the diff").click()
    panel.one("#script-diff table.diff")
    check(diff_rows(panel, "diff-del") == ["echo two"] and diff_rows(panel, "diff-add") == ["echo 2"],
          f"the diff shows removed {diff_rows(panel, 'diff-del')} and added {diff_rows(panel, 'diff-add')}")
    panel.wait_text(".diff-count", "+1 −1")
    panel.shoot("script-diff")

    # Someone pushes meanwhile: saving over the version shown is refused, and says so.
    panel.go("/scripts/panel-hello?project=default")
    panel.wait_text("#script-shown-version", "2")
    other = upload_blob(server, b"echo pushed elsewhere\n")
    api(server, "POST", "/api/v1/scripts/panel-hello/versions",
        {"kind": "file", "files": [{"path": "hello.sh", "digest": other["digest"], "size": other["size"]}],
         "expected_latest": 2})
    panel.fill("#script-editor", "echo mine\n")
    panel.one("#script-save").click()
    message = alert_with(panel, "script_version_conflict")
    check("Not saved" in message and "version 2" in message, f"the conflict reads {message!r}")
    check(script_content(server, "panel-hello", 3) == "echo pushed elsewhere\n", "the other push was overwritten")
    panel.go("/scripts?project=default")
    wait_until(lambda: "panel-hello" in panel.text("table") and "file" in panel.text("table"),
               "the script in the list with its kind")
    panel.shoot("scripts")


def task_by_name(server, name):
    items = api(server, "GET", "/api/v1/tasks?limit=200")["items"]
    found = [t for t in items if t["name"] == name]
    check(found, f"no task {name} among {[t['name'] for t in items]}")
    return api(server, "GET", f"/api/v1/tasks/{found[0]['id']}")


def script_task_form(server, panel):
    """The task form with a script command, signed in as the owner. The task pinned to version 1
    opens with its script and version chosen; a save that changes only the timeout keeps the pin
    (and, on a cluster, the pool and worker labels given in the form); choosing Latest repins it;
    a new task made in the form runs the script with its arguments at the latest version."""
    latest = api(server, "GET", "/api/v1/scripts/panel-hello")["latest_version"]
    v1 = api(server, "GET", "/api/v1/scripts/panel-hello?version=1")["version"]["digest"]
    task = task_by_name(server, "panel-script-task")
    panel.go(f"/tasks/{task['id']}/edit?project=default")
    wait_until(lambda: panel.one("#task-kind").get_attribute("value") == "script", "the script kind chosen")
    check(panel.one("#task-script").get_attribute("value") == "panel-hello", "the task's script is not chosen")
    wait_until(lambda: panel.one("#task-script-version").get_attribute("value") == "1",
               "the pinned version 1 chosen")
    versions = [o.get_attribute("value") for o in Select(panel.one("#task-script-version")).options]
    check(versions == [""] + [str(v) for v in range(latest, 0, -1)],
          f"the version choices are {versions}, not Latest and {latest}..1")
    check(panel.one("#task-shell").is_displayed() is False, "the shell field shows for a script task")
    check(panel.one("#task-script-entry").is_displayed() is False, "a file script offers an entry choice")
    panel.fill("#task-timeout", "45")
    cluster = server.args.server == "cluster"
    if cluster:
        panel.fill("#task-pool", "panel-gpu")
        panel.fill("#task-worker-labels", "cuda=12")
    else:
        check(not panel.css("#task-placement"), "ql-local's task form asks where a run goes")
    panel.shoot("task-script-form", show="#task-kind")
    panel.one("#task-save").click()
    # The edit page's heading names the task too: the task's page is the one without /edit.
    wait_until(lambda: "/edit" not in panel.driver.current_url, "the task's page after the save")
    panel.wait_text("h1", "panel-script-task")
    saved = task_by_name(server, "panel-script-task")
    command = saved["spec"]["command"]
    check(command["kind"] == "script" and command["version"] == 1 and command["digest"] == v1,
          f"a save of the timeout changed the pin: {command}")
    check(saved["spec"]["timeoutMs"] == 45000, f"the timeout saved is {saved['spec'].get('timeoutMs')}")
    if cluster:
        check(saved["spec"].get("placement") == {"pool": "panel-gpu", "labels": {"cuda": "12"}},
              f"the placement saved is {saved['spec'].get('placement')}")
        panel.wait_text("#task-placement-fact", "pool panel-gpu · cuda=12")
    # The task's page says a newer version exists; its button repins the task (and keeps the rest).
    panel.wait_text("#task-repin", f"has version {latest}; this task runs version 1")
    panel.button(f"Repin to version {latest}").click()
    wait_until(lambda: task_by_name(server, "panel-script-task")["spec"]["command"]["version"] == latest,
               f"the task repinned to version {latest} by its page's button")
    repinned = task_by_name(server, "panel-script-task")
    check(repinned["spec"]["timeoutMs"] == 45000, f"the repin changed the timeout: {repinned['spec']}")
    if cluster:
        check(repinned["spec"].get("placement", {}).get("pool") == "panel-gpu", "the repin dropped the pool")
    wait_until(lambda: not panel.css("#task-repin"), "no repin offer once on the latest version")
    # A new version pushed meanwhile: Latest in the form repins to it; the pool and labels stay.
    newer = upload_blob(server, b"echo newer\n")
    api(server, "POST", "/api/v1/scripts/panel-hello/versions",
        {"kind": "file", "files": [{"path": "hello.sh", "digest": newer["digest"], "size": newer["size"]}],
         "expected_latest": latest})
    latest += 1
    panel.go(f"/tasks/{task['id']}/edit?project=default")
    wait_until(lambda: panel.one("#task-script-version").get_attribute("value") == str(latest - 1),
               f"version {latest - 1} chosen")
    Select(panel.one("#task-script-version")).select_by_value("")
    panel.one("#task-save").click()
    wait_until(lambda: task_by_name(server, "panel-script-task")["spec"]["command"]["version"] == latest,
               f"the task repinned to version {latest} in the form")
    # The form goes on to the task's page once saved: wait for it before going elsewhere.
    wait_until(lambda: "/edit" not in panel.driver.current_url, "the task's page after the save")
    panel.wait_text("h1", "panel-script-task")
    if cluster:
        check(task_by_name(server, "panel-script-task")["spec"].get("placement", {}).get("pool") == "panel-gpu",
              "a repin in the form dropped the pool")
    # A new task running the script with arguments, from the script's page.
    panel.go("/scripts/panel-hello?project=default")
    panel.button("New task running it").click()
    wait_until(lambda: panel.one("#task-kind").get_attribute("value") == "script", "the form opened as a script task")
    check(panel.one("#task-script").get_attribute("value") == "panel-hello", "the form did not choose the script")
    check("panel-hello" in [o.get_attribute("value") for o in Select(panel.one("#task-script")).options],
          "panel-hello is not among the scripts")
    wait_until(lambda: len(Select(panel.one("#task-script-version")).options) == latest + 1, "its versions listed")
    check(panel.one("#task-script-version").get_attribute("value") == "", "a new task does not start at Latest")
    panel.fill("#task-name", "panel-script-new")
    panel.fill("#task-script-args", "a\nb c")
    panel.one("#task-save").click()
    panel.wait_text("h1", "panel-script-new")
    made = task_by_name(server, "panel-script-new")["spec"]["command"]
    check(made["script"] == "panel-hello" and made["version"] == latest and made["args"] == ["a", "b c"]
          and made["interpreter"] == "sh", f"the new script task is {made}")
    # A tree script: the form offers its files as the entry, and an edit keeps the one chosen.
    one, two = upload_blob(server, b"echo one\n"), upload_blob(server, b"echo two\n")
    api(server, "POST", "/api/v1/scripts/panel-tree/versions",
        {"kind": "tree", "entry": "bin/one.sh",
         "files": [{"path": "bin/one.sh", "digest": one["digest"], "size": one["size"]},
                   {"path": "bin/two.sh", "digest": two["digest"], "size": two["size"]}]})
    panel.go("/scripts/panel-tree?project=default")
    panel.button("New task running it").click()
    wait_until(lambda: panel.one("#task-script-entry").is_displayed(), "the entry choice of a tree script")
    check(panel.one("#task-script-entry").get_attribute("value") == "bin/one.sh",
          "the tree's own entry is not chosen first")
    Select(panel.one("#task-script-entry")).select_by_value("bin/two.sh")
    panel.fill("#task-name", "panel-tree-task")
    panel.one("#task-save").click()
    panel.wait_text("h1", "panel-tree-task")
    tree = task_by_name(server, "panel-tree-task")
    check(tree["spec"]["command"]["entry"] == "bin/two.sh" and tree["spec"]["command"]["scriptKind"] == "tree",
          f"the tree task is {tree['spec']['command']}")
    panel.go(f"/tasks/{tree['id']}/edit?project=default")
    wait_until(lambda: panel.one("#task-script-entry").get_attribute("value") == "bin/two.sh",
               "the chosen entry shown when editing")


def workers_page(server, panel):
    """Workers, signed in as the owner. ql-local: the page says it runs every task itself. A
    cluster: its worker with state, pool, labels and slots, drained and resumed; the pools, one
    granted to a project and revoked; and a run that no worker's labels match says so on its page."""
    panel.go("/workers?project=default")
    if server.args.server == "local":
        panel.wait_text("#workers-local", "This server runs every task itself.")
        check(not panel.css("main [role=alert]:not([hidden])"), "the Workers page of ql-local shows an error")
        check(not panel.css("main table"), "the Workers page of ql-local shows tables")
        panel.shoot("workers-local")
        return
    panel.wait_text("#workers-table", "panel-worker")
    row = panel.text("#workers-table tbody tr")
    for words in ("active", "default", "zone=panel"):
        check(words in row, f"the worker's row lacks {words!r}: {row!r}")
    # The scenario's earlier tasks may keep a slot busy: any count of the worker's 4 slots.
    check(re.search(r"\b[0-4] / 4\b", row), f"the worker's row lacks its running / slots: {row!r}")
    check(panel.css("#workers-table .chip"), "the worker's labels are not chips")
    panel.wait_text("#pools-table", "every project")
    check("undefined" not in panel.main_text() and "null" not in panel.main_text(),
          f"the Workers page shows a missing value: {panel.main_text()!r}")
    panel.shoot("workers")
    panel.button("Drain").click()
    panel.button("Confirm drain").click()
    panel.wait_text("#workers-table", "drained")
    check(api(server, "GET", "/api/v1/workers/panel-worker")["drained"], "Drain did not drain the worker")
    panel.button("Resume").click()
    panel.button("Confirm resume").click()
    wait_until(lambda: "active" in panel.text("#workers-table tbody tr"), "the worker active again")
    check(not api(server, "GET", "/api/v1/workers/panel-worker")["drained"], "Resume did not resume the worker")
    # A pool granted to the project with a limit and a weight, then revoked.
    panel.fill("#grant-pool", "panel-gpu")
    Select(panel.one("#grant-project")).select_by_value("default")
    panel.fill("#grant-max", "2")
    panel.fill("#grant-weight", "3")
    panel.one("#grant-form button[type=submit]").click()
    panel.wait_text("#pools-table", "at most 2 running, weight 3")
    grants = api(server, "GET", "/api/v1/pools/panel-gpu")["grants"]
    check(len(grants) == 1 and grants[0]["max_running"] == 2 and grants[0]["weight"] == 3, f"the grant: {grants}")
    panel.shoot("workers-pools", show="#pools-table")
    panel.button("Revoke").click()
    panel.button("Confirm revoke").click()
    wait_until(lambda: not api(server, "GET", "/api/v1/pools/panel-gpu")["grants"], "the grant revoked")
    panel.wait_text("#pools-table", "no project")
    # A run asking for labels no worker has waits, and its page says for what.
    task = api(server, "POST", "/api/v1/tasks", {"name": "panel-nowhere", "spec": {
        "command": {"kind": "shell", "command": "true", "shell": "/bin/sh"},
        "placement": {"pool": "default", "labels": {"zone": "nowhere"}}}})
    run = api(server, "POST", "/api/v1/runs", {"task_id": task["id"], "idempotency_key": "panel-nowhere"})
    panel.go(f"/runs/{run['id']}?project=default")
    panel.wait_text("#run-waiting", "Waiting for a worker: pool default, labels zone=nowhere")
    check(" — " in panel.text("#run-waiting"), f"the waiting notice has no detail: {panel.text('#run-waiting')!r}")
    panel.shoot("run-waiting")
    api(server, "POST", f"/api/v1/runs/{run['id']}/cancel", {"reason": "panel test"})


def report_failure(panel, server, screenshots):
    """Prints what a failed browser test needs to be understood: the page's screenshot, address,
    text and console, and the server's logs."""
    if panel:
        try:
            panel.driver.save_screenshot(os.path.join(screenshots, "failure.png"))
            print("URL at failure:", panel.driver.current_url)
            print("page text:", panel.main_text()[:3000])
            for m in panel.driver.get_log("browser"):
                print("console:", m["message"])
        except WebDriverException:
            pass
    server.dump_logs()


def scenario(server, panel):
    check_headers(server)
    base = server.url
    sign_in_error_shown(panel)
    first_start_setup(server, panel)
    password_sign_in(server, panel)
    forced_password_change(server, panel)
    account_and_totp(server, panel)
    required_second_factor(server, panel)
    panel.collect_console()

    # Sign in: a wrong token shows the server's refusal; the owner's signs in.
    panel.go("/")
    panel.one("#token")
    panel.shoot("signin")
    panel.fill("#token", "not-a-token").send_keys(Keys.ENTER)
    panel.wait_text("[role=alert]", "unauthorized")
    sign_in(panel, server.token, "owner")
    panel.one("#status-tiles .tile")
    panel.shoot("dashboard")

    # Keyboard: the navigation is reachable with Tab alone.
    panel.go("/tasks?project=default")
    panel.one("#task-search")
    panel.driver.execute_script("document.activeElement.blur()")
    reached = set()
    # Enough presses to go once around the page (the navigation has 13 items for the owner).
    for _ in range(32):
        ActionChains(panel.driver).send_keys(Keys.TAB).perform()
        reached.add(panel.driver.execute_script("return document.activeElement.textContent.trim()"))
    for label in ("Dashboard", "Tasks", "Runs", "New task", "Sign out"):
        check(label in reached, f"{label!r} is not reachable with the keyboard (reached {sorted(reached)})")

    # A task through the form, with environment, timeout and a shell command.
    tick = create_task(panel, "panel-tick", 'echo "tick $GREETING $QL_RUN_ID"', env="GREETING=hello")
    check("GREETING=hello" in panel.main_text(), "the task page does not show its environment")
    panel.shoot("task")
    panel.go(f"/tasks/{tick}/edit?project=default")
    panel.one("#task-form")
    panel.shoot("task-form")

    # A trigger: a bad expression shows the server's own message, live and on save.
    panel.go(f"/triggers/new?task={tick}&project=default")
    panel.fill("#trigger-zone", "UTC")
    panel.fill("#trigger-expression", "61 * * * *")
    expected = api_error(server, "/api/v1/cron/next", {"expression": "61 * * * *", "timezone": "UTC"})
    panel.wait_text("#preview-error", expected["message"])
    check(expected["code"] in panel.text("#preview-error"), "the preview error lacks the server's code")
    panel.one("#trigger-save").click()
    panel.wait_text("#trigger-form [role=alert]", expected["message"])
    panel.shoot("trigger-form-error")
    panel.fill("#trigger-expression", "*/2 * * * * *")
    wait_until(lambda: len(panel.css("#preview ol.fire-times li")) == 5, "5 previewed fire times")
    panel.shoot("trigger-form")
    panel.one("#trigger-save").click()
    wait_until(lambda: "/triggers/" in panel.driver.current_url and "/new" not in panel.driver.current_url,
               "the trigger's page")
    panel.wait_text("main", "Next 5 occurrences")
    check(len(panel.css("ol.fire-times li")) == 5, "the trigger page does not list 5 fire times")
    panel.shoot("trigger")
    trigger = panel.driver.current_url.split("/triggers/")[1].split("?")[0]

    # Runs appear by themselves (the list refreshes every 2 s) and their log has the output.
    panel.go(f"/runs?task={tick}&project=default")
    wait_until(lambda: len(panel.css("a.run-link")) >= 2, "two cron runs in the list", timeout=40)
    wait_until(lambda: "succeeded" in panel.text("table"), "a succeeded run", timeout=40)
    panel.shoot("runs")
    panel.driver.find_element(By.XPATH, "//tr[.//span[normalize-space()='succeeded']]//a[contains(@class,'run-link')]").click()
    panel.wait_text("#log", "tick hello")
    panel.wait_text("#log-state", "end of log")
    panel.wait_text("main", "run.succeeded")

    # The dashboard now shows the trigger due next and the scheduler's lag from /metrics.
    overlap_and_concurrency(server, panel)

    panel.go("/?project=default")
    panel.wait_text("#lag", "Occurrences admitted")
    panel.wait_text("main", "panel-tick")
    panel.shoot("dashboard-busy")

    panel.go("/triggers?project=default")
    panel.one("a.trigger-link")
    panel.shoot("triggers")

    # A schedule is edited in place: the same trigger, its next revision, the new expression.
    before = api(server, "GET", f"/api/v1/triggers/{trigger}")
    panel.go(f"/triggers/{trigger}?project=default")
    panel.button("Change schedule…").click()
    panel.wait_text("#trigger-form", "next revision of this trigger")
    panel.fill("#trigger-expression", "*/3 * * * * *")
    panel.shoot("trigger-edit")
    panel.one("#trigger-save").click()
    wait_until(lambda: panel.driver.current_url.split("?")[0].endswith("/triggers/" + trigger),
               "the edited trigger's own page")
    panel.wait_text("main", "*/3 * * * * *")
    after = api(server, "GET", f"/api/v1/triggers/{trigger}")
    check(after["expression"] == "*/3 * * * * *", f"the edit did not reach the trigger: {after}")
    check(after["revision"] == before["revision"] + 1, "the edit is not the trigger's next revision")
    check(after["state"] == before["state"], "the edit changed whether the trigger is enabled")
    listed = api(server, "GET", f"/api/v1/triggers?task_id={tick}")["items"]
    check(len(listed) == 1, f"editing the schedule made {len(listed)} triggers")
    panel.go("/tasks?project=default")
    panel.one("a.task-link")
    panel.fill("#task-search", "tick")
    wait_until(lambda: len(panel.css("a.task-link")) == 1, "the search to keep one task")
    panel.shoot("tasks")

    # A long run: its log streams live without moving the page, then it is cancelled.
    long_task = create_task(panel, "panel-long", 'for i in $(seq 1 200); do echo "line $i"; sleep 0.25; done',
                            timeout_s="300")
    panel.button("Run now").click()
    wait_until(lambda: "/runs/" in panel.driver.current_url, "the new run's page")
    panel.wait_text("#log", "line 3", timeout=40)
    panel.wait_text("#log-state", "following")
    probe = "return [document.getElementById('log').textContent.length, " \
            "document.querySelector('section:last-of-type').getBoundingClientRect().top + window.scrollY]"
    first_len, first_top = panel.driver.execute_script(probe)
    time.sleep(1.5)
    second_len, second_top = panel.driver.execute_script(probe)
    check(second_len > first_len, f"the log did not grow while following ({first_len} -> {second_len})")
    check(abs(second_top - first_top) < 1, f"the page moved while the log streamed ({first_top} -> {second_top})")
    panel.shoot("run-streaming")
    panel.button("Cancel run").click()
    panel.button("Confirm cancel").click()
    panel.wait_text("#run-status", "cancelled", timeout=30)
    panel.button("Retry")
    panel.shoot("run-cancelled")

    # Projects, people and audit pages, and a viewer made through them.
    panel.go("/projects?project=default")
    panel.one("a.project-link")
    panel.shoot("projects")
    panel.go("/people?project=default")
    panel.fill("#principal-name", "vera")
    panel.one("#principal-form button[type=submit]").click()
    panel.wait_text("main", "vera")
    panel.go("/projects/default?project=default")
    panel.fill("#grant-principal", "vera")
    Select(panel.one("#grant-role")).select_by_value("viewer")
    panel.one("#grant-form button[type=submit]").click()
    wait_until(lambda: "vera" in panel.text("section.card:nth-of-type(2)") or "vera" in panel.main_text(),
               "vera among the members")
    panel.shoot("project")
    panel.go("/people?project=default")
    Select(panel.one("#token-principal")).select_by_value("vera")
    panel.one("#token-form button[type=submit]").click()
    viewer_token = wait_until(lambda: panel.one("#token-value").get_attribute("value"), "the new token")
    panel.shoot("people")
    panel.go("/audit?project=default")
    panel.wait_text("main", "binding.grant")
    panel.shoot("audit")
    panel.collect_console()
    approval_id = secrets_and_approvals(server, panel)
    panel.collect_console()
    scripts_page(server, panel)
    script_task_form(server, panel)
    workers_page(server, panel)
    panel.collect_console()
    if server.args.server == "local":
        resolve_recovery(server, panel)
        panel.collect_console()

    # The viewer: no edit control anywhere, and a forced write is refused.
    sign_out(panel)
    sign_in(panel, viewer_token, "viewer")
    run_id = None
    for route, ready in (("/", "#status-tiles .tile"), ("/tasks", "a.task-link"), (f"/tasks/{tick}", "h1"),
                         ("/triggers", "a.trigger-link"), (f"/triggers/{trigger}", "ol.fire-times"),
                         (f"/runs?task={long_task}", "a.run-link"), ("/projects/default", "h1"),
                         ("/approvals?status=all", "a.approval-link"), (f"/approvals/{approval_id}", "#approval-status"),
                         ("/secrets", "code.secret-name"), ("/scripts", "a.script-link"),
                         ("/scripts/panel-hello", "#script-editor"), ("/scripts/new", ".banner.warn"),
                         ("/notifications", "#notify-deliveries tbody td:not(.loading)"),
                         ("/tasks/new", ".banner.warn"), ("/triggers/new", ".banner.warn")):
        panel.go(route + ("&" if "?" in route else "?") + "project=default")
        panel.one(ready)
        time.sleep(0.3)
        controls = [e.text for e in panel.css("[data-needs]") if e.get_attribute("data-needs") != "self"]
        check(not controls, f"viewer sees edit controls on {route}: {controls}")
        if route.startswith("/runs"):
            run_id = panel.css("a.run-link")[0].get_attribute("title")
            panel.shoot("viewer-runs")
        if route == f"/tasks/{tick}":
            panel.shoot("viewer-task")
        if route == "/scripts/panel-hello":
            check(panel.one("#script-editor").get_attribute("readonly") is not None,
                  "a viewer's script editor is not read-only")
            check(not panel.css("#script-upload"), "a viewer is offered an upload")
    panel.go(f"/runs/{run_id}?project=default")
    panel.one("#run-status")
    check(not panel.css("[data-needs]"), "viewer sees run actions")
    panel.shoot("run")
    status, code, message = panel.driver.execute_async_script("""
        const done = arguments[arguments.length - 1];
        fetch('/api/v1/runs?project=default', {method: 'POST', headers: {
            'Authorization': 'Bearer ' + sessionStorage.getItem('ql.token'),
            'Content-Type': 'application/json'}, body: JSON.stringify({task_id: arguments[0]})})
          .then((r) => r.json().then((b) => done([r.status, b.code, b.message])))
          .catch((e) => done([0, 'fetch', String(e)]));""", tick)
    check(status == 403 and code == "permission_denied", f"forced run start as viewer: {status} {code} {message}")
    if server.args.server == "local":
        long_log_shows_its_end(server, panel)
    panel.collect_console()

    # No page broke the CSP or threw.
    bad = [m["message"] for m in panel.console
           if any(s in m["message"] for s in ("Content Security Policy", "Trusted Type", "Uncaught", "SyntaxError"))]
    check(not bad, "console errors: " + "\n".join(bad))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", choices=("local", "cluster"), required=True)
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--screenshots", required=True)
    parser.add_argument("--postgres", help="the throwaway_postgres helper (cluster)")
    parser.add_argument("--roles-sql", help="deploy/postgres/roles.sql (cluster)")
    args = parser.parse_args()
    os.makedirs(args.screenshots, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix=f"ql-panel-{args.server}-")
    server = Server(args, workdir)
    panel = None
    started = time.monotonic()
    try:
        server.start()
        panel = Panel(server.url, args.screenshots)
        scenario(server, panel)
    except Exception:  # noqa: BLE001 - report everything, then fail
        traceback.print_exc()
        report_failure(panel, server, args.screenshots)
        print(f"panel browser test ({args.server}): FAILED")
        return 1
    finally:
        if panel:
            panel.quit()
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"panel browser test ({args.server}): passed in {time.monotonic() - started:.0f} s; "
          f"screenshots in {args.screenshots}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
