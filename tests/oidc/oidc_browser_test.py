#!/usr/bin/env python3
"""Single sign-on in a real headless browser (Debian chromium + chromedriver + python3-selenium).

Starts tests/oidc/provider.mjs as another site than the panel (its issuer is
http://localhost:PORT, QingLong is on http://127.0.0.1:PORT, so cookies and SameSite behave as
with a real provider) and `ql-local serve --oidc-config` on a temporary data directory, then:

  button     the sign-in screen offers "Sign in with Test SSO" (#signin-oidc)
  sign_in    a click on it, the provider's sign-in (#login, #password, #login-submit) and consent
             (#consent-submit) pages as alice: back on the panel signed in as alice, operator in
             project default from her group, the session in an HttpOnly SameSite=Strict cookie
             the page's script cannot read, the panel's pages load
  sign_out   Sign out: back on the sign-in screen, and the session is over on the server
  no_account mallory, whom no principal maps to: the sign-in screen says oidc_no_principal
             and what it means, and the address loses ?sign_in_error
  cancelled  cancelling at the provider: the sign-in screen says oidc_failed
  again      alice signs in once more (the provider remembers her: no pages to fill)
  disabled   alice disabled by the owner: the sign-in screen says principal_disabled

Every step is saved as a screenshot into --screenshots. A missing browser, driver, node or
binary is a failure, never a skip.

    /usr/bin/python3 tests/oidc/oidc_browser_test.py --bin-dir build/bin \\
        --screenshots build/panel-screenshots/oidc
"""

import argparse
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback

sys.dont_write_bytecode = True  # no __pycache__ in the source tree for the import below
from oidc_sign_in_test import (  # noqa: E402 - after the line above
    BEGIN_PATH, CALLBACK_PATH, HERE, SSO_NAME, Failure, Provider, Servers, check, free_port,
    http_json, write_config, write_secret)

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
DESKTOP = (1280, 1000)


def wait_until(fn, what, timeout=30.0):
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            value = fn()
            if value:
                return value
        except (StaleElementReferenceException, WebDriverException) as err:
            last = err
        time.sleep(0.2)
    raise Failure(f"timed out after {timeout:.0f} s waiting for {what}" + (f" ({last})" if last else ""))


class Browser:
    def __init__(self, shots):
        check(os.path.exists(CHROMIUM), f"{CHROMIUM} is missing: run scripts/install-deps.sh (package chromium)")
        check(os.path.exists(CHROMEDRIVER),
              f"{CHROMEDRIVER} is missing: run scripts/install-deps.sh (package chromium-driver)")
        try:
            from selenium import webdriver
            from selenium.webdriver.chrome.service import Service
            from selenium.webdriver.common.by import By
        except ImportError as err:
            raise Failure(f"python3-selenium is missing ({err}): run scripts/install-deps.sh") from err
        self.By = By
        self.shots = shots
        self.profile = tempfile.mkdtemp(prefix="ql-oidc-chromium-")
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                    "--no-first-run", "--disable-extensions", "--lang=en-US",
                    f"--window-size={DESKTOP[0]},{DESKTOP[1]}", f"--user-data-dir={self.profile}"):
            options.add_argument(arg)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        self.driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)

    def quit(self):
        try:
            self.driver.quit()
        finally:
            shutil.rmtree(self.profile, ignore_errors=True)

    def css(self, selector):
        return self.driver.find_elements(self.By.CSS_SELECTOR, selector)

    def one(self, selector, timeout=20):
        return wait_until(lambda: (self.css(selector) or [None])[0], selector, timeout)

    def text(self, selector):
        els = self.css(selector)
        return els[0].text if els else ""

    def wait_text(self, selector, needle, timeout=20):
        return wait_until(lambda: needle in self.text(selector),
                          f"{needle!r} in {selector} (now {self.text(selector)!r:.200})", timeout)

    def wait_url(self, prefix, timeout=20):
        return wait_until(lambda: self.driver.current_url.startswith(prefix),
                          f"the address to start with {prefix} (now {self.driver.current_url})",
                          timeout)

    def fill(self, selector, value):
        el = self.one(selector)
        el.clear()
        el.send_keys(value)
        return el

    def shoot(self, name, show=None):
        if show:
            self.driver.execute_script(
                "document.querySelector(arguments[0]).scrollIntoView({block: 'center'})", show)
        time.sleep(0.3)
        self.driver.save_screenshot(os.path.join(self.shots, f"oidc-{name}.png"))


def provider_sign_in(browser, issuer, login):
    """On the provider's pages (another site): sign in as `login`, then consent."""
    browser.wait_url(issuer + "/interaction/")
    browser.one("#login-form")
    browser.shoot(f"provider-login-{login}")
    browser.fill("#login", login)
    browser.fill("#password", "any password")
    browser.one("#login-submit").click()
    browser.one("#consent-submit")
    check(browser.driver.current_url.startswith(issuer + "/interaction/"),
          f"the consent page is at {browser.driver.current_url}")
    browser.shoot(f"provider-consent-{login}")
    browser.one("#consent-submit").click()


def scenario(args, servers, browser, workdir, steps):
    node = args.node or shutil.which("node")
    check(node, "node is not installed: run scripts/install-oidc-provider.sh")
    check(os.path.isdir(os.path.join(HERE, "node_modules", "oidc-provider")),
          "tests/oidc/node_modules is missing: run scripts/install-oidc-provider.sh")
    ql_local = os.path.join(args.bin_dir, "ql-local")
    check(os.access(ql_local, os.X_OK), f"{ql_local} is missing: build ql-local")
    check(os.path.exists(os.path.join(args.bin_dir, "libql-oidc.so")),
          f"{args.bin_dir}/libql-oidc.so is missing: build ql-oidc")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    redirect_uri = base + CALLBACK_PATH
    provider = Provider(node, [redirect_uri], workdir, issuer_host="localhost")
    servers.provider = provider
    issuer = provider.issuer
    check(issuer.startswith("http://localhost:"), f"the provider's issuer is {issuer}")
    print(f"provider: {issuer}; ql-local: {base}")
    config = write_config(workdir, "oidc.json", issuer, redirect_uri, write_secret(workdir))
    data = os.path.join(workdir, "data")
    proc = servers.spawn("ql-local", [ql_local, "serve", "--data", data, "--listen",
                                      f"127.0.0.1:{port}", "--shutdown-wait", "2",
                                      "--oidc-config", config])
    servers.wait_ready(base, proc, "ql-local")
    with open(os.path.join(data, "owner.token")) as f:
        owner = f.read().strip()
    status, answer = http_json("POST", base + "/api/v1/principals", token=owner, body={"name": "alice"})
    check(status == 201 or status == 200, f"creating alice answered {status}: {answer!r:.300}")

    def step(name, fn):
        print(f"step {name}: ...", flush=True)
        try:
            fn()
        except Failure as err:
            raise Failure(f"step {name}: {err}") from err
        steps.append(name)
        print(f"step {name}: ok", flush=True)

    def button():
        browser.driver.get(base + "/#/")
        browser.one("#signin-name")
        link = browser.one("#signin-oidc")
        check(link.text == f"Sign in with {SSO_NAME}", f"the single sign-on button says {link.text!r}")
        check(link.get_attribute("href") == base + BEGIN_PATH,
              f"the single sign-on button goes to {link.get_attribute('href')}")
        browser.shoot("sign-in-screen")

    def sign_in():
        browser.one("#signin-oidc").click()
        provider_sign_in(browser, issuer, "alice")
        browser.wait_url(base + "/")
        browser.wait_text("#identity", "alice")
        check(browser.text("#account-link") == "alice", f"the header names {browser.text('#account-link')!r}")
        check(browser.text("#role") == "operator",
              f"alice's role shown is {browser.text('#role')!r}, expected operator (group ops)")
        check("sign_in_error" not in browser.driver.current_url,
              f"signed in, yet the address is {browser.driver.current_url}")
        cookie = browser.driver.get_cookie("ql_session")
        check(cookie is not None and cookie.get("httpOnly") and cookie.get("sameSite") == "Strict",
              f"the session cookie is {cookie!r}")
        check("ql_session" not in browser.driver.execute_script("return document.cookie"),
              "the page's script can read the session cookie")
        check(browser.driver.execute_script("return sessionStorage.getItem('ql.token')") is None,
              "single sign-on left an API token in sessionStorage")
        check(browser.driver.execute_script("return sessionStorage.getItem('ql.csrf')"),
              "the panel kept no CSRF token for the cookie session")
        # The panel's pages work with the session: the task list loads.
        browser.driver.get(base + "/#/tasks?project=default")
        browser.wait_text("#identity", "alice")
        wait_until(lambda: browser.css("main h1"), "the tasks page")
        wait_until(lambda: "No task yet" in browser.text("main") or browser.css("main table tbody tr"),
                   "the task list")
        errors = [e.text for e in browser.css("main .banner.error, main [role=alert]")
                  if e.is_displayed() and e.text.strip()]
        check(not errors, f"the tasks page shows an error: {errors}")
        browser.shoot("signed-in-alice")
        state["session"] = cookie["value"]

    def sign_out():
        browser.one("#signout").click()
        browser.one("#signin-name")
        browser.one("#signin-oidc")
        browser.shoot("signed-out")
        deadline = time.monotonic() + 4
        status = None
        while time.monotonic() < deadline:
            status, _ = http_json("GET", base + "/api/v1/whoami", cookie=f"ql_session={state['session']}")
            if status == 401:
                break
            time.sleep(0.2)
        check(status == 401, f"the signed-out session still answers whoami with {status}")

    def forget_provider_session():
        # Another person at the provider: its cookies (site localhost) go.
        browser.driver.get(issuer + "/.well-known/openid-configuration")
        browser.driver.delete_all_cookies()

    def no_account():
        forget_provider_session()
        browser.driver.get(base + "/#/")
        browser.one("#signin-oidc").click()
        provider_sign_in(browser, issuer, "mallory")
        browser.wait_url(base + "/")
        browser.wait_text("#signin-form [role=alert]", "oidc_no_principal")
        browser.wait_text("#signin-form [role=alert]", "no QingLong account is linked")
        wait_until(lambda: "sign_in_error" not in browser.driver.current_url,
                   "the address to lose ?sign_in_error")
        check(not browser.css("#identity"), "mallory appears signed in")
        browser.shoot("error-no-principal", "#signin-form")

    def cancelled():
        forget_provider_session()
        browser.driver.get(base + "/#/")
        browser.one("#signin-oidc").click()
        browser.wait_url(issuer + "/interaction/")
        browser.one("#abort").click()
        browser.wait_url(base + "/")
        browser.wait_text("#signin-form [role=alert]", "oidc_failed")
        browser.wait_text("#signin-form [role=alert]", "Single sign-on did not succeed")
        wait_until(lambda: "sign_in_error" not in browser.driver.current_url,
                   "the address to lose ?sign_in_error")
        browser.shoot("error-cancelled", "#signin-form")

    def again():
        browser.driver.get(base + "/#/")
        browser.one("#signin-oidc").click()
        provider_sign_in(browser, issuer, "alice")
        browser.wait_text("#identity", "alice")
        # Signed out of QingLong only: the provider still knows alice, so no pages this time.
        browser.one("#signout").click()
        browser.one("#signin-oidc").click()
        browser.wait_text("#identity", "alice")
        check(browser.text("#role") == "operator", f"role shown {browser.text('#role')!r}")
        browser.shoot("signed-in-again")

    def disabled():
        # alice disabled by the owner: the provider still signs her in, QingLong does not.
        browser.one("#signout").click()
        browser.one("#signin-oidc")
        status, answer = http_json("POST", base + "/api/v1/principals/alice/disable", token=owner, body={})
        check(status == 200, f"disabling alice answered {status}: {answer!r:.300}")
        browser.one("#signin-oidc").click()
        browser.wait_url(base + "/")
        browser.wait_text("#signin-form [role=alert]", "principal_disabled")
        check(not browser.css("#identity"), "a disabled alice appears signed in")
        browser.shoot("error-disabled", "#signin-form")
        status, answer = http_json("POST", base + "/api/v1/principals/alice/enable", token=owner, body={})
        check(status == 200, f"enabling alice answered {status}: {answer!r:.300}")

    state = {}
    step("button", button)
    step("sign_in", sign_in)
    step("sign_out", sign_out)
    step("no_account", no_account)
    step("cancelled", cancelled)
    step("again", again)
    step("disabled", disabled)
    console = browser.driver.get_log("browser")
    bad = [m["message"] for m in console
           if any(s in m["message"] for s in ("Content Security Policy", "Uncaught", "SyntaxError"))]
    check(not bad, "console errors: " + "\n".join(bad))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--screenshots", required=True)
    parser.add_argument("--node", help="the node executable (default: node on PATH)")
    args = parser.parse_args()
    args.bin_dir = os.path.abspath(args.bin_dir)
    # Stopped from outside (a test timeout): still stop the servers and the provider.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    os.makedirs(args.screenshots, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="ql-oidc-browser-")
    servers = Servers(args, workdir)
    servers.provider = None
    browser = None
    steps = []
    started = time.monotonic()
    try:
        browser = Browser(args.screenshots)
        scenario(args, servers, browser, workdir, steps)
    except Exception as err:  # noqa: BLE001 - report everything, then fail
        if isinstance(err, Failure):
            print(f"FAIL: {err}")
        else:
            traceback.print_exc()
        if browser:
            try:
                browser.driver.save_screenshot(os.path.join(args.screenshots, "oidc-failure.png"))
                print("URL at failure:", browser.driver.current_url)
                print("page text:", browser.text("body")[:3000])
                for m in browser.driver.get_log("browser"):
                    print("console:", m["message"])
            except Exception:  # noqa: BLE001 - the browser may be gone
                pass
        servers.dump_logs()
        if servers.provider:
            print(f"---- provider.log (tail)\n{servers.provider.tail()}")
        print(f"oidc browser test: FAILED after {len(steps)} step(s) passed: {', '.join(steps) or 'none'}")
        return 1
    finally:
        if browser:
            browser.quit()
        servers.stop()
        if servers.provider:
            servers.provider.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"oidc browser test: passed ({', '.join(steps)}) in {time.monotonic() - started:.0f} s; "
          f"screenshots in {args.screenshots}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
