#!/usr/bin/env python3
"""Notifications against real receivers started here (DESIGN §14).

Starts ql-local on a temporary data directory and free ports, an HTTP receiver that checks
every X-QL-Signature with the signing secret (Python's hmac, not QingLong's code) and counts
Idempotency-Keys, and a real SMTP server (Debian's python3-aiosmtpd). Everything is set up with
the `ql` command line as a user would.

  storm       a task failing every second for five minutes, with rules failed + recovered:
              exactly one `failed` message, then (fixed) exactly one `recovered` message
              saying how many failures it covers; every signature verifies
  retries     a receiver that answers 503 twice, then 200: delivered on the third attempt,
              the same idempotency key all three times; `ql notify deliveries --json` shows
              status delivered, attempts 3, code 200
  dead        a receiver that never answers (max_attempts 2, 1 s timeout): dead, listed by
              `ql notify deliveries --failed`; `ql notify redeliver` sends it again
  smtp        `ql notify channel test` on an smtp channel: aiosmtpd receives the mail, with the
              subject, the body and the idempotency key header
  crash_before_send  the receiver is down when a run fails; ql-local is SIGKILLed while the
              row waits; receiver and daemon come back: the message arrives (never lost)
  crash_mid_send     the receiver holds the request open; ql-local is SIGKILLed mid-send and
              restarted: the message is sent again with the same idempotency key (repeats
              only with the same key)
  late_and_missing  a run running past a `late --after 2s` rule: one late message (phase
              running), however many sweeps pass; a `missing` rule without a task is refused
  log_tail    a failed run's message ends with its log's last 10 lines: colour codes dropped,
              the value of its secret environment masked as in the log
  approval    an approval rule: a request (run start of a guarded task) and its approval by
              another admin, a second request withdrawn with a reason — four messages, in
              order, with names (decided_by amy), the approved run's id and the reason
  chat_signed feishu and dingtalk channels with --signing-secret: the receivers check each
              bot's own signature scheme (Python's hmac and base64) and a fresh timestamp
  loopback    ql-local started without --notify-allow-loopback: a webhook aimed at its own API
              on 127.0.0.1 is refused before connecting, and the receiver sees nothing

With --server cluster (a throwaway PostgreSQL, two `ql-cluster serve` replicas A and B, no
worker, so runs stay queued):
  cluster_skipped    a task every second with overlap forbid: its first run waits, the next
              occurrences are skipped by the cluster's admission, which writes the `skipped`
              outbox row in its own (serializable) transaction: one message arrives
  cluster_once       60 test messages queued at once through both replicas: every one
              arrives exactly once (no key twice) and both replicas delivered some
  cluster_takeover   replica B stopped; replica A is SIGKILLed while it holds a message open
              at the receiver; replica B, started again, sends it once the lease runs out,
              with the same idempotency key, and records it delivered

Every case runs even when an earlier one failed; exits non-zero when any failed. A missing
binary or aiosmtpd is a failure, never a skip.

    /usr/bin/python3 tests/notify/notify_test.py --bin-dir build/bin
    /usr/bin/python3 tests/notify/notify_test.py --server cluster --bin-dir build/bin \\
        --postgres build/tests/throwaway_postgres --roles-sql deploy/postgres/roles.sql
"""

import argparse
import base64
import hashlib
import hmac
import http.client
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.parse

STORM_S = 300
SIGNING_KEY = "whsec-" + "k" * 26


class Failure(Exception):
    pass


def check(condition, message):
    if not condition:
        raise Failure(message)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(fn, what, timeout=20.0, every=0.1):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(every)
    raise Failure(f"{what}: not within {timeout} s (last: {last!r:.400})")


# ---------------------------------------------------------------- the HTTP receiver

class Receiver:
    """Records every POST; `mode` decides the answer: ok, fail:N (503 N times, then 200),
    hang (never answers), down (not listening)."""

    def __init__(self):
        self.port = free_port()
        self.requests = []  # dicts: path, key, signature_ok, body
        self.mode = "ok"
        self.failures_left = 0
        self.delay = 0.0  # seconds before each answer
        self.lock = threading.Lock()
        self.release = threading.Event()
        self.server = None
        self.thread = None
        self.start()

    def start(self):
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                sig = self.headers.get("X-QL-Signature", "")
                ok = False
                if sig.startswith("t="):
                    parts = dict(p.split("=", 1) for p in sig.split(",") if "=" in p)
                    want = hmac.new(SIGNING_KEY.encode(), (parts.get("t", "") + ".").encode() + body,
                                    hashlib.sha256).hexdigest()
                    ok = hmac.compare_digest(want, parts.get("v1", ""))
                    ok = ok and abs(time.time() - int(parts.get("t", "0"))) < 300
                with receiver.lock:
                    receiver.requests.append({"path": self.path,
                                              "key": self.headers.get("Idempotency-Key"),
                                              "signature": sig, "signature_ok": ok,
                                              "body": json.loads(body or b"{}")})
                    mode = receiver.mode
                    fail = False
                    if mode == "fail" and receiver.failures_left > 0:
                        receiver.failures_left -= 1
                        fail = True
                if mode == "hang":
                    receiver.release.wait(60)
                    return
                if receiver.delay:
                    time.sleep(receiver.delay)
                self.send_response(503 if fail else 200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                # What every chat API answers on success (Telegram, Feishu, DingTalk, WeCom).
                self.wfile.write(b'{"ok":true,"code":0,"errcode":0}')

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.release.set()
        if self.server:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def url(self, path):
        return f"http://127.0.0.1:{self.port}{path}"

    def at(self, path):
        with self.lock:
            return [r for r in self.requests if r["path"] == path]


# ---------------------------------------------------------------- the daemon and the CLI

class Server:
    """What ql-local and a ql-cluster replica share: readiness, the log, `ql` against it."""

    port = 0
    proc = None
    log = ""
    name = "server"

    def wait_ready(self):
        def ready():
            if self.proc.poll() is not None:
                raise Failure(f"{self.name} exited {self.proc.returncode}: {self.tail()}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                conn.request("GET", "/readyz")
                return conn.getresponse().status == 200
            except OSError:
                return False
        wait_for(ready, f"{self.name} ready", timeout=60)

    def tail(self):
        try:
            with open(self.log, "rb") as f:
                return f.read()[-3000:].decode(errors="replace")
        except OSError:
            return "(no log)"

    def ql_env(self):
        raise NotImplementedError

    def ql(self, *argv, expect=0, stdin=None):
        done = subprocess.run([os.path.join(self.bin_dir, "ql"), *argv], env=self.ql_env(),
                              input=stdin, capture_output=True, text=True, timeout=60)
        if expect is not None:
            check(done.returncode == expect,
                  f"[{self.name}] ql {' '.join(argv)} exited {done.returncode}, wanted "
                  f"{expect}: {done.stdout[-800:]} {done.stderr[-800:]}")
        return done

    def deliveries(self, *extra):
        answer = json.loads(self.ql("--json", "notify", "deliveries", "--limit", "1000",
                                    *extra).stdout)
        return answer["items"] if isinstance(answer, dict) else answer

    def delivery(self, delivery_id):
        for d in self.deliveries():
            if d["id"] == delivery_id:
                return d
        return None


class Daemon(Server):
    def __init__(self, args, workdir, name):
        self.args = args
        self.bin_dir = args.bin_dir
        self.name = "ql-local"
        self.workdir = workdir
        self.data = os.path.join(workdir, name)
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc = None
        self.log = os.path.join(workdir, name + ".log")

    def start(self, allow_loopback=True):
        argv = [os.path.join(self.args.bin_dir, "ql-local"), "serve", "--data", self.data,
                "--listen", f"127.0.0.1:{self.port}", "--shutdown-wait", "2",
                "--notify-retry-base", "300", "--notify-timeout", "1000",
                "--public-url", "https://ql.example.test"]
        if allow_loopback:
            argv.append("--notify-allow-loopback")
        log = open(self.log, "ab")
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        self.wait_ready()

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def ql_env(self):
        return dict(os.environ, QL_DATA_DIR=self.data)


def test_id(output):
    """The delivery id `ql notify channel test` printed (the first UUID in its output)."""
    for word in output.replace(",", " ").split():
        word = word.strip()
        if len(word) == 36 and word.count("-") == 4:
            return word
    raise Failure(f"no delivery id in {output!r}")


# ---------------------------------------------------------------- the cases

def case_storm(d, rx, storm_s):
    d.ql("secret", "set", "hook_key", stdin=SIGNING_KEY)
    d.ql("notify", "channel", "add", "hooks", "--type", "webhook", "--url", rx.url("/storm"),
         "--signing-secret", "hook_key")
    d.ql("task", "add", "flaky", "--shell", "exit 3")
    d.ql("trigger", "add", "flaky", "--cron", "* * * * * *", "--tz", "UTC")
    d.ql("notify", "rule", "add", "--channel", "hooks", "--on", "failed", "--task", "flaky")
    d.ql("notify", "rule", "add", "--channel", "hooks", "--on", "recovered")
    time.sleep(storm_s)
    failed_runs = json.loads(d.ql("--json", "run", "list", "--task", "flaky", "--status",
                                  "failed", "--limit", "1000").stdout)
    failed_runs = failed_runs["items"] if isinstance(failed_runs, dict) else failed_runs
    check(len(failed_runs) >= storm_s // 2,
          f"only {len(failed_runs)} failed runs in {storm_s} s")
    got = rx.at("/storm")
    events = [r["body"]["event"] for r in got]
    check(events == ["failed"], f"a storm of {len(failed_runs)} failures sent {events}")
    check(all(r["signature_ok"] for r in got), f"bad signature: {got[0]['signature']!r}")
    check(got[0]["key"] == got[0]["body"]["id"], "the Idempotency-Key is the delivery id")
    check(got[0]["body"]["facts"]["task_name"] == "flaky", f"facts: {got[0]['body']['facts']}")
    check("exit code 3" in got[0]["body"]["text"], f"text: {got[0]['body']['text']!r}")
    # Fixed: one recovered message covering every failure since the first.
    d.ql("task", "edit", "flaky", "--shell", "true")
    wait_for(lambda: len(rx.at("/storm")) >= 2, "the recovered message")
    time.sleep(3)
    got = rx.at("/storm")
    events = [r["body"]["event"] for r in got]
    check(events == ["failed", "recovered"], f"after the fix: {events}")
    check(got[1]["body"]["facts"]["failures"] >= len(failed_runs),
          f"recovered says {got[1]['body']['facts']['failures']} failures")
    check(all(r["signature_ok"] for r in got), "every signature verifies")
    check(len({r["key"] for r in got}) == 2, "two messages, two keys")
    d.ql("trigger", "rm", "flaky", expect=None)
    d.ql("task", "rm", "flaky", expect=None)


def case_retries(d, rx):
    d.ql("notify", "channel", "add", "retrying", "--type", "webhook", "--url",
         rx.url("/retry"), "--signing-secret", "hook_key")
    with rx.lock:
        rx.mode = "fail"
        rx.failures_left = 2
    delivery_id = test_id(d.ql("notify", "channel", "test", "retrying").stdout)
    wait_for(lambda: (d.delivery(delivery_id) or {}).get("status") == "delivered",
             "delivered after two 503s")
    row = d.delivery(delivery_id)
    check(row["attempts"] == 3, f"attempts {row['attempts']}")
    check(row["last_status_code"] == 200, f"code {row['last_status_code']}")
    keys = [r["key"] for r in rx.at("/retry")]
    check(keys == [delivery_id] * 3, f"keys seen: {keys}")
    with rx.lock:
        rx.mode = "ok"


def case_dead(d, rx):
    d.ql("notify", "channel", "add", "silent", "--type", "webhook", "--url", rx.url("/hang"),
         "--max-attempts", "2")
    with rx.lock:
        rx.mode = "hang"
    try:
        delivery_id = test_id(d.ql("notify", "channel", "test", "silent").stdout)
        wait_for(lambda: (d.delivery(delivery_id) or {}).get("status") == "dead",
                 "dead after two unanswered attempts", timeout=30)
        failed = [x["id"] for x in d.deliveries("--failed")]
        check(delivery_id in failed, f"--failed lists {failed}")
        row = d.delivery(delivery_id)
        check(row["attempts"] == 2 and row["last_error"], f"dead row: {row}")
        check(len(rx.at("/hang")) == 2, f"{len(rx.at('/hang'))} requests reached the receiver")
    finally:
        with rx.lock:
            rx.mode = "ok"
        rx.release.set()
    time.sleep(0.5)
    rx.release.clear()
    d.ql("notify", "redeliver", delivery_id)
    wait_for(lambda: (d.delivery(delivery_id) or {}).get("status") == "delivered",
             "redelivered")
    check(len(rx.at("/hang")) == 3, "the redelivery reached the receiver")
    check({r["key"] for r in rx.at("/hang")} == {delivery_id}, "one key throughout")


def case_smtp(d, workdir):
    from aiosmtpd.controller import Controller  # Debian's python3-aiosmtpd

    received = []

    class Handler:
        async def handle_DATA(self, server, session, envelope):
            received.append(envelope)
            return "250 OK"

    port = free_port()
    controller = Controller(Handler(), hostname="127.0.0.1", port=port)
    controller.start()
    try:
        d.ql("notify", "channel", "add", "mail", "--type", "smtp", "--host", "127.0.0.1",
             "--port", str(port), "--security", "none", "--from", "ql@example.test",
             "--to", "ops@example.test", "--to", "oncall@example.test", "--language", "zh-CN")
        delivery_id = test_id(d.ql("notify", "channel", "test", "mail").stdout)
        wait_for(lambda: received, "the mail")
        mail = received[0]
        check(sorted(mail.rcpt_tos) == ["oncall@example.test", "ops@example.test"],
              f"rcpt {mail.rcpt_tos}")
        check(mail.mail_from == "ql@example.test", f"from {mail.mail_from}")
        import email
        message = email.message_from_bytes(mail.original_content)
        subject = str(email.header.make_header(email.header.decode_header(message["Subject"])))
        check(subject == "[青龙] 测试通知", f"subject {subject!r}")
        check(message["X-QL-Idempotency-Key"] == delivery_id, "the key header")
        body = message.get_payload(decode=True).decode()
        check("mail" in body, f"body {body!r}")
        wait_for(lambda: (d.delivery(delivery_id) or {}).get("status") == "delivered",
                 "recorded as delivered")
    finally:
        controller.stop()


def case_crash_before_send(d, rx, args):
    d.ql("notify", "channel", "add", "later", "--type", "webhook", "--url", rx.url("/later"))
    d.ql("task", "add", "oops", "--shell", "exit 4")
    d.ql("notify", "rule", "add", "--channel", "later", "--on", "failed", "--task", "oops")
    rx.stop()  # the receiver is down: attempts fail and the row waits
    d.ql("run", "start", "oops", "--wait", expect=None)
    wait_for(lambda: any(x["event"] == "failed" and x["attempts"] >= 1
                         for x in d.deliveries("--failed")), "a failed attempt")
    d.kill()
    rx.start()
    d.start()
    wait_for(lambda: rx.at("/later"), "the message after the crash", timeout=30)
    time.sleep(1)
    got = rx.at("/later")
    check(len(got) == 1 and got[0]["body"]["event"] == "failed", f"got {got}")


def case_crash_mid_send(d, rx):
    d.ql("notify", "channel", "add", "held", "--type", "webhook", "--url", rx.url("/held"))
    with rx.lock:
        rx.mode = "hang"
    rx.release.clear()
    delivery_id = test_id(d.ql("notify", "channel", "test", "held").stdout)
    wait_for(lambda: rx.at("/held"), "the first attempt in flight")
    d.kill()  # after send, before the answer is recorded
    with rx.lock:
        rx.mode = "ok"
    rx.release.set()
    d.start()
    wait_for(lambda: (d.delivery(delivery_id) or {}).get("status") == "delivered",
             "delivered after the restart", timeout=30)
    keys = [r["key"] for r in rx.at("/held")]
    check(len(keys) == 2 and set(keys) == {delivery_id},
          f"a repeat only with the same key: {keys}")
    rx.release.clear()


def case_late_and_missing(d, rx):
    d.ql("notify", "channel", "add", "watch", "--type", "webhook", "--url", rx.url("/watch"))
    d.ql("task", "add", "slowpoke", "--shell", "sleep 9")  # overdue from 2 s: a sweep sees it
    d.ql("notify", "rule", "add", "--channel", "watch", "--on", "late", "--task", "slowpoke",
         "--after", "2s")
    d.ql("notify", "rule", "add", "--channel", "watch", "--on", "missing", "--task", "slowpoke",
         "--after", "30s")
    d.ql("run", "start", "slowpoke")
    wait_for(lambda: rx.at("/watch"), "the late message", timeout=15)
    late = rx.at("/watch")[0]["body"]
    check(late["event"] == "late" and late["facts"]["phase"] == "running", f"late: {late}")
    check("has been running for" in late["title"], f"title {late['title']!r}")
    time.sleep(10)  # the run ends (success) and more sweeps pass: still one late message
    events = [r["body"]["event"] for r in rx.at("/watch")]
    check(events == ["late"], f"after the run: {events}")
    # A missing rule without a task is refused: a dead-man's switch watches one task.
    refused = d.ql("notify", "rule", "add", "--channel", "watch", "--on", "missing", "--after",
                   "1h", expect=None)
    check(refused.returncode != 0 and "notify_task_required" in refused.stderr,
          f"missing without --task: {refused.returncode} {refused.stderr!r}")


def case_log_tail(d, rx):
    d.ql("secret", "set", "api_token", stdin="tok-" + "s3cr3t" * 4)
    d.ql("notify", "channel", "add", "tails", "--type", "webhook", "--url", rx.url("/tail"))
    d.ql("task", "add", "noisy", "--secret-env", "API_TOKEN=api_token", "--shell",
         'for i in $(seq 1 40); do echo "line-$i"; done; printf "\\033[31mred\\033[0m\\n"; '
         'echo "token is $API_TOKEN"; exit 5')
    d.ql("notify", "rule", "add", "--channel", "tails", "--on", "failed", "--task", "noisy")
    d.ql("run", "start", "noisy", "--wait", expect=None)
    wait_for(lambda: rx.at("/tail"), "the failed message")
    body = rx.at("/tail")[0]["body"]
    tail = body.get("log_tail", "")
    lines = tail.split("\n")
    check(len(lines) == 10, f"{len(lines)} lines: {tail!r}")
    check(lines[0] == "line-33" and lines[-3] == "line-40", f"the last lines: {lines}")
    check(lines[-2] == "red", f"colour codes stripped: {lines[-2]!r}")
    check("s3cr3t" not in tail and lines[-1].startswith("token is "),
          f"the secret value stays masked: {lines[-1]!r}")
    check(body["text"].endswith(tail), f"the text ends with the log: {body['text'][-200:]!r}")
    check("exit code 5" in body["text"], f"text: {body['text']!r}")


def case_approval(d, rx):
    d.ql("notify", "channel", "add", "asks", "--type", "webhook", "--url", rx.url("/approval"),
         "--signing-secret", "hook_key")
    d.ql("principal", "add", "amy")
    amy = d.ql("token", "create", "--principal", "amy").stdout.strip().splitlines()[-1]
    d.ql("role", "grant", "amy", "admin")
    d.ql("task", "add", "deploy", "--shell", "echo deployed", "--require-approval")
    d.ql("notify", "rule", "add", "--channel", "asks", "--on", "approval", "--task", "deploy",
         "--min-interval", "0s")

    def ask():
        start = d.ql("run", "start", "deploy", expect=13)
        at = start.stderr.find("request ")
        check(at >= 0, f"no request id: {start.stderr!r}")
        return start.stderr[at + len("request "):at + len("request ") + 36]

    def phases():
        return [(r["body"]["facts"]["phase"], r["body"]["facts"]["approval_id"])
                for r in rx.at("/approval")]

    first = ask()
    wait_for(lambda: phases() == [("requested", first)], "the request message")
    d.ql("--token", amy, "approval", "approve", first)
    wait_for(lambda: len(phases()) == 2, "the approval message")
    approved = rx.at("/approval")[1]["body"]
    check(phases()[1] == ("approved", first), f"phases {phases()}")
    check(approved["facts"]["decided_by"] == "amy", f"facts {approved['facts']}")
    check(approved["run_id"] and "approved by amy" in approved["title"], f"{approved}")
    second = ask()
    d.ql("approval", "reject", second, "--reason", "not during the freeze")
    wait_for(lambda: len(phases()) == 4, "the second request and its rejection")
    check(phases()[2:] == [("requested", second), ("rejected", second)], f"phases {phases()}")
    rejected = rx.at("/approval")[3]["body"]
    check("not during the freeze" in rejected["text"], f"text {rejected['text']!r}")
    got = rx.at("/approval")
    check(all(r["signature_ok"] for r in got), "every signature verifies")
    check(len({r["key"] for r in got}) == 4, "four messages, four keys")


def case_chat_signed(d, rx):
    secret = "SEC" + "f" * 61
    d.ql("secret", "set", "bot_sign", stdin=secret)
    d.ql("notify", "channel", "add", "lark", "--type", "feishu", "--url", rx.url("/feishu"),
         "--signing-secret", "bot_sign")
    d.ql("notify", "channel", "add", "ding", "--type", "dingtalk", "--url",
         rx.url("/dingtalk?access_token=abc"), "--signing-secret", "bot_sign")
    test_id(d.ql("notify", "channel", "test", "lark").stdout)
    test_id(d.ql("notify", "channel", "test", "ding").stdout)
    wait_for(lambda: rx.at("/feishu") and [r for r in rx.requests
                                            if r["path"].startswith("/dingtalk")],
             "both bots' messages")
    # Feishu: "timestamp" (seconds) and "sign" = base64(HMAC-SHA256(key "t\nsecret", "")).
    feishu = rx.at("/feishu")[0]["body"]
    want = base64.b64encode(hmac.new(f"{feishu['timestamp']}\n{secret}".encode(), b"",
                                     hashlib.sha256).digest()).decode()
    check(feishu.get("sign") == want, f"feishu sign {feishu.get('sign')!r}, wanted {want!r}")
    check(abs(time.time() - int(feishu["timestamp"])) < 300, "a fresh feishu timestamp")
    check(feishu["msg_type"] == "text" and "lark" in feishu["content"]["text"], f"{feishu}")
    # DingTalk: timestamp (ms) and sign = urlencode(base64(HMAC-SHA256(secret, "t\nsecret"))).
    ding = [r for r in rx.requests if r["path"].startswith("/dingtalk")][0]
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(ding["path"]).query)
    check(query.get("access_token") == ["abc"], f"the bot's own token kept: {ding['path']}")
    t = query["timestamp"][0]
    want = base64.b64encode(hmac.new(secret.encode(), f"{t}\n{secret}".encode(),
                                     hashlib.sha256).digest()).decode()
    check(query.get("sign") == [want], f"dingtalk sign {query.get('sign')}, wanted {want!r}")
    check(abs(time.time() * 1000 - int(t)) < 300_000, "a fresh dingtalk timestamp")


def case_loopback(d, rx):
    d.stop()
    d.start(allow_loopback=False)
    d.ql("notify", "channel", "add", "inward", "--type", "webhook", "--url",
         f"http://127.0.0.1:{d.port}/api/v1/tasks", "--max-attempts", "1")
    d.ql("notify", "channel", "add", "inward2", "--type", "webhook", "--url",
         f"http://localhost:{rx.port}/loop", "--max-attempts", "1")
    first = test_id(d.ql("notify", "channel", "test", "inward").stdout)
    second = test_id(d.ql("notify", "channel", "test", "inward2").stdout)
    for delivery_id in (first, second):
        wait_for(lambda: (d.delivery(delivery_id) or {}).get("status") == "dead",
                 "refused and dead")
        row = d.delivery(delivery_id)
        check("loopback" in (row["last_error"] or ""), f"why: {row['last_error']!r}")
        check(row["last_status_code"] is None, "no answer: never connected")
    check(not rx.at("/loop"), "the receiver saw nothing")


# ---------------------------------------------------------------- the cluster

class Replica(Server):
    def __init__(self, cluster, name):
        self.cluster = cluster
        self.bin_dir = cluster.args.bin_dir
        self.name = f"replica {name}"
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = os.path.join(cluster.workdir, f"ql-cluster-{name}.log")
        self.proc = None
        self.owner_name = f"replica-{name}"

    def start(self):
        c = self.cluster
        argv = [c.binary, "serve", "--database-url", c.urls["runtime"],
                "--admin-database-url", c.urls["admin"], "--listen", f"127.0.0.1:{self.port}",
                "--worker-listen", f"127.0.0.1:{free_port()}", "--secret-key-file", c.key_file,
                "--shutdown-wait", "2", "--owner", self.owner_name,
                "--notify-allow-loopback", "--notify-retry-base", "300",
                "--notify-timeout", "1000"]
        self.proc = subprocess.Popen(argv, env=c.env, stdout=open(self.log, "ab"),
                                     stderr=subprocess.STDOUT)
        self.wait_ready()

    def stop(self, sig=signal.SIGTERM):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def metric(self, needle):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        conn.request("GET", "/metrics")
        total = 0.0
        for line in conn.getresponse().read().decode().splitlines():
            if line.startswith("ql_notifications_total{") and needle in line:
                total += float(line.rsplit(" ", 1)[1])
        return total

    def ql_env(self):
        return dict(os.environ, QL_SERVER=self.base, QL_TOKEN=self.cluster.owner)


class Cluster:
    def __init__(self, args, workdir):
        self.args = args
        self.workdir = workdir
        self.binary = os.path.join(args.bin_dir, "ql-cluster")
        check(os.access(self.binary, os.X_OK), f"{self.binary} is missing: build ql-cluster")
        check(args.postgres and os.access(args.postgres, os.X_OK),
              f"--postgres {args.postgres!r}: the throwaway_postgres helper is missing")
        check(args.roles_sql and os.path.exists(args.roles_sql),
              f"--roles-sql {args.roles_sql!r} is missing")
        self.helper = subprocess.Popen([args.postgres, args.roles_sql], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.helper.stdout.readline()
        if not line:
            raise Failure("the throwaway PostgreSQL did not start: " +
                          self.helper.stderr.read()[-2000:])
        self.urls = json.loads(line)
        self.env = dict(os.environ, QL3_POSTGRES_ALLOW_INSECURE="true")
        self.tool([self.binary, "migrate", "--database-url", self.urls["migration"]])
        self.owner = self.tool([self.binary, "token", "create", "owner", "--database-url",
                                self.urls["admin"]])
        self.key_file = os.path.join(workdir, "secret.key")
        with open(os.open(self.key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
            f.write(os.urandom(32))
        self.a = Replica(self, "a")
        self.b = Replica(self, "b")

    def tool(self, argv):
        out = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=120)
        check(out.returncode == 0, f"{' '.join(argv[:3])} failed: {out.stderr[-2000:]}")
        return out.stdout.strip().splitlines()[-1]

    def stop(self):
        for r in (self.a, self.b):
            r.stop()
        if self.helper.poll() is None:
            self.helper.stdin.close()
            try:
                self.helper.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.helper.kill()


def case_cluster_skipped(c, rx):
    a = c.a
    a.ql("notify", "channel", "add", "skips", "--type", "webhook", "--url", rx.url("/skips"))
    a.ql("task", "add", "waits", "--shell", "true")
    a.ql("notify", "rule", "add", "--channel", "skips", "--on", "skipped", "--task", "waits")
    a.ql("trigger", "add", "waits", "--cron", "* * * * * *", "--tz", "UTC", "--overlap", "forbid")
    wait_for(lambda: rx.at("/skips"), "the skipped message", timeout=30)
    time.sleep(4)
    got = rx.at("/skips")
    check(len(got) == 1, f"{len(got)} skipped messages within the 60 s interval")
    check(got[0]["body"]["event"] == "skipped", f"{got[0]['body']}")
    check(got[0]["body"]["facts"]["error_code"] == "overlap", f"{got[0]['body']['facts']}")
    a.ql("trigger", "rm", "waits", expect=None)


def case_cluster_once(c, rx):
    for r in (c.a, c.b):
        r.ql("notify", "channel", "add", f"many-{r.owner_name}", "--type", "webhook", "--url",
             rx.url("/many"), "--rate-per-minute", "600")
    # A slow receiver keeps a replica busy with its batch, so the other takes the rest.
    rx.delay = 0.2
    ids = []
    for i in range(30):
        for r in (c.a, c.b):
            ids.append(test_id(r.ql("notify", "channel", "test", f"many-{r.owner_name}").stdout))
    wait_for(lambda: len(rx.at("/many")) >= len(ids), "every message", timeout=60)
    time.sleep(2)
    keys = [r["key"] for r in rx.at("/many")]
    check(sorted(keys) == sorted(ids), f"{len(keys)} requests for {len(ids)} messages; "
                                       f"repeated: {sorted(k for k in set(keys) if keys.count(k) > 1)}")
    rx.delay = 0.0
    by_a = c.a.metric('outcome="delivered"')
    by_b = c.b.metric('outcome="delivered"')
    check(by_a > 0 and by_b > 0, f"delivered by replica a: {by_a}, b: {by_b}")


def case_cluster_takeover(c, rx):
    c.b.stop()
    c.a.ql("notify", "channel", "add", "held", "--type", "webhook", "--url", rx.url("/held"))
    with rx.lock:
        rx.mode = "hang"
    rx.release.clear()
    delivery_id = test_id(c.a.ql("notify", "channel", "test", "held").stdout)
    wait_for(lambda: rx.at("/held"), "the attempt in flight at replica a")
    c.a.stop(signal.SIGKILL)
    with rx.lock:
        rx.mode = "ok"
    rx.release.set()
    c.b.start()
    wait_for(lambda: (c.b.delivery(delivery_id) or {}).get("status") == "delivered",
             "delivered by replica b", timeout=30)
    keys = [r["key"] for r in rx.at("/held")]
    check(keys == [delivery_id, delivery_id], f"a repeat only with the same key: {keys}")
    check(c.b.metric('outcome="delivered"') >= 1, "replica b recorded it")
    c.a.start()
    rx.release.clear()


def run_cluster(args):
    workdir = tempfile.mkdtemp(prefix="ql-notify-cluster-")
    rx = Receiver()
    failed = []
    cluster = None
    try:
        cluster = Cluster(args, workdir)
        cluster.a.start()
        cluster.b.start()
        for name, fn in (("cluster_skipped", lambda: case_cluster_skipped(cluster, rx)),
                         ("cluster_once", lambda: case_cluster_once(cluster, rx)),
                         ("cluster_takeover", lambda: case_cluster_takeover(cluster, rx))):
            started = time.monotonic()
            try:
                fn()
                print(f"ok   {name} ({time.monotonic() - started:.1f} s)", flush=True)
            except Exception as e:  # noqa: BLE001 - every case runs
                failed.append(name)
                print(f"FAIL {name}: {e}", flush=True)
                if not isinstance(e, Failure):
                    traceback.print_exc()
                for r in (cluster.a, cluster.b):
                    if r.proc is None or r.proc.poll() is not None:
                        try:
                            r.start()
                        except Exception as again:  # noqa: BLE001
                            print(f"     {r.name} did not come back: {again}")
    except Exception as e:  # noqa: BLE001
        failed.append("cluster_setup")
        print(f"FAIL cluster_setup: {e}")
    finally:
        if cluster:
            cluster.stop()
            if failed:
                print(f"---- replica a (tail)\n{cluster.a.tail()}\n---- replica b (tail)\n"
                      f"{cluster.b.tail()}")
        rx.stop()
        if args.keep or failed:
            print(f"work directory: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    if failed:
        print(f"FAILED: {', '.join(failed)}")
        return 1
    print("all cluster notification cases passed")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--server", choices=("local", "cluster"), default="local")
    parser.add_argument("--postgres", help="the throwaway_postgres helper (cluster)")
    parser.add_argument("--roles-sql", help="deploy/postgres/roles.sql (cluster)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--only", help="comma-separated case names")
    parser.add_argument("--storm-seconds", type=int, default=STORM_S,
                        help="how long the storm case's task fails (default five minutes)")
    args = parser.parse_args()
    if args.server == "cluster":
        if not os.path.exists(os.path.join(args.bin_dir, "ql")):
            print(f"FAIL: ql is missing in {args.bin_dir}")
            return 1
        return run_cluster(args)
    for binary in ("ql-local", "ql", "libql-notify.so"):
        if not os.path.exists(os.path.join(args.bin_dir, binary)):
            print(f"FAIL: {binary} is missing in {args.bin_dir}")
            return 1
    try:
        import aiosmtpd  # noqa: F401
    except ImportError:
        print("FAIL: python3-aiosmtpd is missing (scripts/install-deps.sh installs it)")
        return 1

    workdir = tempfile.mkdtemp(prefix="ql-notify-")
    rx = Receiver()
    d = Daemon(args, workdir, "data")
    cases = [("storm", lambda: case_storm(d, rx, args.storm_seconds)),
             ("retries", lambda: case_retries(d, rx)),
             ("dead", lambda: case_dead(d, rx)),
             ("smtp", lambda: case_smtp(d, workdir)),
             ("late_and_missing", lambda: case_late_and_missing(d, rx)),
             ("log_tail", lambda: case_log_tail(d, rx)),
             ("approval", lambda: case_approval(d, rx)),
             ("chat_signed", lambda: case_chat_signed(d, rx)),
             ("crash_before_send", lambda: case_crash_before_send(d, rx, args)),
             ("crash_mid_send", lambda: case_crash_mid_send(d, rx)),
             ("loopback", lambda: case_loopback(d, rx))]
    only = set(args.only.split(",")) if args.only else None
    failed = []
    try:
        d.start()
        for name, fn in cases:
            if only and name not in only:
                continue
            started = time.monotonic()
            try:
                fn()
                print(f"ok   {name} ({time.monotonic() - started:.1f} s)", flush=True)
            except Exception as e:  # noqa: BLE001 - every case runs
                failed.append(name)
                print(f"FAIL {name}: {e}", flush=True)
                if not isinstance(e, Failure):
                    traceback.print_exc()
                if d.proc is None or d.proc.poll() is not None:
                    try:
                        d.start()
                    except Exception as again:  # noqa: BLE001
                        print(f"     ql-local did not come back: {again}")
    finally:
        d.stop()
        rx.stop()
        if failed:
            print(f"---- ql-local log (tail)\n{d.tail()}")
        if args.keep or failed:
            print(f"work directory: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    if failed:
        print(f"FAILED: {', '.join(failed)}")
        return 1
    print("all notification cases passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
