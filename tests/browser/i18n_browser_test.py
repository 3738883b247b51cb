#!/usr/bin/env python3
"""The panel's languages, themes, phone navigation, loading states and live durations, in a real
headless browser (Debian chromium + chromedriver + python3-selenium) against `ql-local serve` on
a temporary data directory and a free port (the server helpers of panel_browser_test.py).

A browser whose language is Chinese (--lang=zh-CN, Accept-Language zh-CN) gets the panel in
Simplified Chinese: <html lang>, the navigation and a page's headings; the dashboard's tables say
they are loading before their first answer, never that there is nothing. The Tasks page is the
cron list (schedules in words with their zone, last run, next fire; the server's filters on text,
label and last status; Disable, Enable and Run now per row). The header's switch
turns it to English, which a reload keeps (localStorage). The theme switch turns the page dark and
light (the computed background changes) and "system" follows prefers-color-scheme. At 390 px
every navigation item is opened through the menu button, and no page scrolls sideways. A running
run's duration counts up on the run page and in the runs list (without refreshing the list)
within 2.5 s. The Notifications page adds a webhook channel posting to a receiver this test runs on
127.0.0.1 (ql-local runs with --notify-allow-loopback), sends a test message from it that the
Deliveries table shows delivered, adds a rule whose failed run is then delivered with its run
linked, and reads in Chinese. A script's page and the diff of two of its versions, and the Workers
page (ql-local: it runs every task itself) read in Chinese. Every page is saved as a screenshot in both languages and both themes, desktop and
390 px wide, into --screenshots. A missing browser or driver is a failure, never a skip.
"""

import argparse
import json
import os
import threading
import shutil
import sys
import tempfile
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from panel_browser_test import Panel, Server, api, check, report_failure, sign_in, upload_blob, wait_until

PHONE = (390, 844)

# The navigation in each language, in order (an installation owner sees every item).
NAV = {
    "zh-CN": ["仪表盘", "定时任务", "脚本", "触发器", "运行记录", "历史", "审批", "密钥", "通知", "项目",
              "成员与令牌", "工作节点", "审计"],
    "en": ["Dashboard", "Tasks", "Scripts", "Triggers", "Runs", "History", "Approvals", "Secrets",
           "Notifications", "Projects", "People & tokens", "Workers", "Audit"],
}
# Records, from before any script of the page runs, the order in which tables say "loading" or
# "empty": the dashboard must never say there is nothing before its data came.
WATCH_TABLES = """
window.__tableStates = [];
new MutationObserver((records) => {
  for (const r of records) for (const n of r.addedNodes) {
    if (n.nodeType !== 1) continue;
    for (const td of n.matches('td.empty, td.loading') ? [n] : n.querySelectorAll('td.empty, td.loading'))
      window.__tableStates.push([td.className.includes('loading') ? 'loading' : 'empty', td.textContent]);
  }
}).observe(document, {childList: true, subtree: true});
"""


# Returns every visible text on the page whose colour against its background has a contrast
# ratio below 4.5 (WCAG AA for normal text), as "tag.class "text" ratio".
LOW_CONTRAST = """
const parse = (c) => {
  const m = /rgba?\\(([^)]+)\\)/.exec(c);
  if (!m) return null;
  const p = m[1].split(/[\\s,\\/]+/).filter(Boolean).map(Number);
  return {r: p[0], g: p[1], b: p[2], a: p.length > 3 ? p[3] : 1};
};
const lum = ({r, g, b}) => {
  const f = (c) => ((c /= 255) <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4);
  return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
};
const background = (el) => {
  for (let e = el; e; e = e.parentElement) {
    const c = parse(getComputedStyle(e).backgroundColor);
    if (c && c.a > 0.5) return c;
  }
  return {r: 255, g: 255, b: 255};
};
const low = [];
for (const el of document.querySelectorAll('header *, main *')) {
  if (!el.getClientRects().length || el.closest('[hidden]')) continue;
  if (![...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim())) continue;
  if (el.matches(':disabled, :disabled *')) continue;
  const fg = parse(getComputedStyle(el).color);
  const bg = background(el);
  const [hi, lo] = [lum(fg), lum(bg)].sort((a, b) => b - a);
  const ratio = (hi + 0.05) / (lo + 0.05);
  if (ratio < 4.5) low.push(`${el.tagName}.${el.className} "${el.textContent.trim().slice(0, 30)}" ${ratio.toFixed(2)}`);
}
return low;
"""


def nav_texts(panel):
    return [a.get_attribute("textContent").strip() for a in panel.css("#nav a")]


def active_item(panel):
    items = panel.css("#nav a.active")
    return items[0].get_attribute("textContent").strip() if items else ""


def html_lang(panel):
    return panel.driver.execute_script("return document.documentElement.lang")


def background(panel):
    return panel.driver.execute_script("return getComputedStyle(document.body).backgroundColor")


def theme(panel):
    return panel.driver.execute_script("return document.documentElement.dataset.theme")


def set_select(panel, selector, value):
    Select(panel.one(selector)).select_by_value(value)


def phone(panel, on):
    if on:
        panel.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": PHONE[0], "height": PHONE[1], "deviceScaleFactor": 1, "mobile": True})
    else:
        panel.driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    time.sleep(0.3)


def no_sideways_scroll(panel, where):
    width = panel.driver.execute_script("return document.documentElement.scrollWidth")
    check(width <= PHONE[0], f"{where} is {width} px wide at {PHONE[0]} px: it scrolls sideways")


def seed(server):
    """A task that runs 40 s (one run going on), one that fails (a failed run), and a trigger."""
    spec = lambda command: {"command": {"kind": "shell", "command": command, "shell": "/bin/sh"}}
    slow = api(server, "POST", "/api/v1/tasks?project=default", {"name": "nightly-backup", "spec": spec("sleep 300")})
    failing = api(server, "POST", "/api/v1/tasks?project=default", {"name": "report-mail", "spec": spec("exit 3"),
                                                                    "labels": {"team": "ops"}})
    trigger = api(server, "POST", "/api/v1/triggers?project=default", {
        "task_id": failing["id"], "expression": "30 2 * * *", "timezone": "Asia/Shanghai", "enabled": True,
        "mutation_id": "i18n-test-trigger"})
    failed = api(server, "POST", "/api/v1/runs?project=default", {"task_id": failing["id"], "idempotency_key": "i18n-f"})
    running = api(server, "POST", "/api/v1/runs?project=default", {"task_id": slow["id"], "idempotency_key": "i18n-r"})

    def state(run_id, wanted):
        return api(server, "GET", f"/api/v1/runs/{run_id}?project=default")["status"] in wanted

    wait_until(lambda: state(failed["id"], ("failed",)), "the failing run to fail")
    wait_until(lambda: state(running["id"], ("running",)), "the slow run to start")
    # A script with two versions, for the script page and the diff of the two.
    for version, text in ((1, b"#!/bin/sh\necho backup\ntar czf /tmp/b.tgz /etc\n"),
                          (2, b"#!/bin/sh\necho backup\ntar czf /tmp/b.tgz /etc /var\n")):
        blob = upload_blob(server, text)
        api(server, "POST", "/api/v1/scripts/backup/versions?project=default", {
            "kind": "file", "files": [{"path": "backup.sh", "digest": blob["digest"], "size": blob["size"]}],
            "expected_latest": version - 1})
    return {"task": slow["id"], "trigger": trigger["id"], "run": running["id"], "failed": failed["id"]}


def task_rows(panel):
    """The Tasks list's rows by task name."""
    rows = {}
    for row in panel.css("main tbody tr"):
        names = row.find_elements(By.CSS_SELECTOR, "a.task-link")
        if names:
            rows[names[0].text] = row
    return rows


def cron_list(panel):
    """The Tasks page is the cron list: schedules in words with their zone, enabled, the last run
    (status, when, a ticking duration while it runs), next fire; the server filters on text, label
    and last status; Disable, Enable and Run now per row."""
    panel.go("/tasks?project=default")
    panel.one("a.task-link")
    rows = task_rows(panel)
    check(set(rows) == {"nightly-backup", "report-mail"}, f"the task list holds {sorted(rows)}")
    mail, backup = rows["report-mail"].text, rows["nightly-backup"].text
    for words in ("每天 02:30", "Asia/Shanghai", "失败", "启用", "立即运行", "禁用"):
        check(words in mail, f"the report-mail row lacks {words!r}: {mail!r}")
    check("无定时" in backup and "运行中" in backup, f"the nightly-backup row: {backup!r}")
    check(rows["nightly-backup"].find_elements(By.CSS_SELECTOR, ".duration.live"),
          "the running task's last run has no ticking duration")
    for query, wanted in (("last_status=failed", {"report-mail"}), ("last_status=running", {"nightly-backup"}),
                          ("label=team%3Dops", {"report-mail"}), ("q=backup", {"nightly-backup"})):
        panel.go(f"/tasks?project=default&{query}")
        wait_until(lambda: set(task_rows(panel)) == wanted, f"the filter {query} to list {wanted}")
    panel.go("/tasks?project=default")
    panel.one("a.task-link")
    panel.fill("#task-search", "report")
    wait_until(lambda: set(task_rows(panel)) == {"report-mail"}, "typing in the search to keep report-mail")

    def mail_state():
        row = task_rows(panel).get("report-mail")
        badges = row.find_elements(By.CSS_SELECTOR, "[data-status]") if row else []
        return [b.get_attribute("data-status") for b in badges]

    def click_in_mail_row(text):
        row = task_rows(panel)["report-mail"]
        row.find_element(By.XPATH, f".//button[normalize-space()='{text}']").click()

    click_in_mail_row("禁用")
    click_in_mail_row("确认禁用")
    wait_until(lambda: "disabled" in mail_state(), "report-mail to show disabled")
    click_in_mail_row("启用")
    wait_until(lambda: "active" in mail_state(), "report-mail to show enabled again")
    click_in_mail_row("立即运行")
    panel.one("#run-status .badge")
    check("/runs/" in panel.driver.current_url, f"Run now opened {panel.driver.current_url}")


def pages(ids):
    """Every page worth a screenshot: (name, route, selector that shows it has loaded)."""
    return [
        ("dashboard", "/", "#status-tiles .tile"),
        ("tasks", "/tasks", "a.task-link"),
        ("task", f"/tasks/{ids['task']}", "#task-concurrency-limit"),
        ("task-form", "/tasks/new", "#task-form"),
        ("triggers", "/triggers", "a.trigger-link"),
        ("trigger", f"/triggers/{ids['trigger']}", "#trigger-overlap-policy"),
        ("trigger-form", "/triggers/new", "#trigger-form"),
        ("runs", "/runs", "a.run-link"),
        ("run", f"/runs/{ids['run']}", "#run-status .badge"),
        ("approvals", "/approvals", "#approvals-filters"),
        ("secrets", "/secrets", "#secret-form"),
        ("scripts", "/scripts", "a.script-link"),
        ("script", "/scripts/backup", "#script-editor"),
        ("script-diff", "/scripts/backup/diff?from=1&to=2", "#script-diff table.diff"),
        ("workers", "/workers", "#workers-local"),
        ("notifications", "/notifications", "#notify-channels tbody td:not(.loading)"),
        ("projects", "/projects", "a.project-link"),
        ("people", "/people", "#token-form"),
        ("audit", "/audit", "main table tbody tr td:not(.loading)"),
        ("account", "/account", "#account-name"),
    ]


def screenshots(panel, ids, lang):
    """Every page in `lang`, light and dark, desktop and 390 px wide (no sideways scroll)."""
    for mode in ("light", "dark"):
        set_select(panel, "#theme-select", mode)
        wait_until(lambda: theme(panel) == mode, f"theme {mode}")
        for name, route, ready in pages(ids):
            panel.go(route + ("&" if "?" in route else "?") + "project=default")
            panel.one(ready)
            time.sleep(0.3)
            low = panel.driver.execute_script(LOW_CONTRAST)
            check(not low, f"text with too little contrast on {name} ({lang}, {mode}): {low}")
            base = os.path.join(panel.shots, f"{lang}-{mode}-{name}")
            panel.driver.save_screenshot(base + "-desktop.png")
            phone(panel, True)
            try:
                no_sideways_scroll(panel, f"{name} ({lang}, {mode})")
                panel.driver.save_screenshot(base + "-390.png")
                if name == "dashboard":
                    panel.one("#menu-toggle").click()
                    panel.one("#nav a")
                    panel.driver.save_screenshot(base + "-390-menu.png")
            finally:
                phone(panel, False)


def chinese(panel, server, ids):
    """The browser asks for Chinese: the panel speaks it, and loading comes before empty."""
    panel.driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": WATCH_TABLES})
    panel.go("/")
    panel.one("#token")
    check(html_lang(panel) == "zh-CN", f"<html lang> is {html_lang(panel)!r} for a Chinese browser")
    panel.wait_text("#signin-title", "登录")
    panel.driver.save_screenshot(os.path.join(panel.shots, "zh-CN-signin-desktop.png"))
    sign_in(panel, server.token, "所有者")
    panel.one("#status-tiles .tile")
    check(nav_texts(panel) == NAV["zh-CN"], f"the navigation in Chinese is {nav_texts(panel)}")
    check(panel.one("#nav").is_displayed() and not panel.one("#menu-toggle").is_displayed(),
          "on a desktop the navigation is not shown as it is, or the menu button shows")
    check(panel.text("#signout") == "退出", f"sign-out button reads {panel.text('#signout')!r}")
    main = panel.main_text()
    for words in ("仪表盘", "最近失败", "即将触发", "调度延迟", "运行记录"):
        check(words in main, f"the dashboard lacks {words!r}: {main[:400]!r}")
    check(panel.driver.title.startswith("仪表盘"), f"page title {panel.driver.title!r}")

    # The dashboard's tables said "loading" first; "empty" (if ever) only after. Reload with the
    # watcher in place from the first instant, on a fresh project with no failed run.
    api(server, "POST", "/api/v1/projects", {"slug": "empty-one", "name": "Empty"})
    panel.go("/?project=empty-one")
    panel.driver.refresh()
    panel.wait_text("main", "没有失败的运行。")
    states = panel.driver.execute_script("return window.__tableStates")
    check(states and states[0][0] == "loading", f"the dashboard's tables did not say loading first: {states}")
    first_empty = next((i for i, s in enumerate(states) if s[0] == "empty"), len(states))
    check(sum(1 for s in states[:first_empty] if s[0] == "loading") >= 2,
          f"a dashboard table claimed to be empty before its data came: {states}")
    check(all(s[1] == "加载中…" for s in states if s[0] == "loading"), f"loading text: {states}")
    cron_list(panel)
    panel.go("/?project=default")
    panel.one("#status-tiles .tile")

    # A page: the runs list with its column headers and a translated status badge.
    panel.go("/runs?project=default")
    panel.one("a.run-link")
    headers = [th.get_attribute("textContent") for th in panel.css("main th")]
    check(headers[:3] == ["运行", "任务", "状态"], f"runs table headers {headers}")
    check("运行中" in panel.main_text() and "失败" in panel.main_text(), "run statuses are not in Chinese")

    # An API error code stays visible; a known code's message is in Chinese.
    panel.go("/triggers/new?project=default")
    panel.fill("#trigger-expression", "61 * * * *")
    panel.one("#preview-error")
    preview = panel.text("#preview-error")
    check(preview.startswith("cron_invalid:") or ":" in preview, f"the preview error shows no code: {preview!r}")

    # The script page, its diff and the Workers page of ql-local in Chinese.
    panel.go("/scripts/backup?project=default")
    panel.one("#script-editor")
    for words in ("使用者", "历史", "单文件", "保存", "第 2 版（最新）"):
        check(words in panel.main_text(), f"the script page lacks {words!r}")
    panel.go("/scripts/backup/diff?from=1&to=2&project=default")
    panel.one("#script-diff table.diff")
    check("修改" in panel.text("#script-diff") and "/var" in panel.text("#script-diff tr.diff-add"),
          f"the diff in Chinese: {panel.text('#script-diff')!r}")
    panel.go("/workers?project=default")
    panel.wait_text("#workers-local", "此服务器自己运行所有任务")
    screenshots(panel, ids, "zh-CN")


def english_remembered(panel):
    """The language switch: English at once, and still after a reload."""
    panel.go("/?project=default")
    panel.one("#status-tiles .tile")
    set_select(panel, "#lang-select", "en")
    wait_until(lambda: html_lang(panel) == "en" and nav_texts(panel) == NAV["en"], "the panel in English")
    panel.driver.refresh()
    panel.one("#status-tiles .tile")
    check(html_lang(panel) == "en", "the language was not remembered over a reload")
    check(nav_texts(panel) == NAV["en"], f"after a reload the navigation reads {nav_texts(panel)}")
    check(panel.driver.execute_script("return localStorage.getItem('ql.lang')") == "en",
          "the language choice is not in localStorage")
    check(panel.driver.execute_script("return localStorage.getItem('ql.token')") is None,
          "the token is in localStorage")
    check("Recent failures" in panel.main_text(), "the dashboard is not in English")


def themes(panel):
    """Dark and light change the page's colours; "system" follows prefers-color-scheme."""
    panel.go("/?project=default")
    panel.one("#status-tiles .tile")
    set_select(panel, "#theme-select", "light")
    wait_until(lambda: theme(panel) == "light", "the light theme")
    light = background(panel)
    set_select(panel, "#theme-select", "dark")
    wait_until(lambda: theme(panel) == "dark", "the dark theme")
    dark = background(panel)
    check(light != dark, f"the background stayed {light} in the dark theme")
    panel.driver.refresh()
    panel.one("#status-tiles .tile")
    check(theme(panel) == "dark" and background(panel) == dark, "the dark theme was not remembered")
    set_select(panel, "#theme-select", "system")
    for scheme, want in (("dark", dark), ("light", light)):
        panel.driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {
            "features": [{"name": "prefers-color-scheme", "value": scheme}]})
        wait_until(lambda: background(panel) == want, f"the system theme to follow {scheme}")
    panel.driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
    set_select(panel, "#theme-select", "light")


def phone_navigation(panel):
    """At 390 px every navigation item opens through the menu button, without sideways scroll."""
    phone(panel, True)
    try:
        panel.go("/?project=default")
        panel.one("#status-tiles .tile")
        check(not panel.one("#nav").is_displayed(), "the navigation is not folded at 390 px")
        no_sideways_scroll(panel, "the dashboard")
        for index, label in enumerate(NAV["en"]):
            toggle = panel.one("#menu-toggle")
            check(toggle.is_displayed(), "no menu button at 390 px")
            toggle.click()
            wait_until(lambda: panel.one("#nav").is_displayed(), "the menu to open")
            check(toggle.get_attribute("aria-expanded") == "true", "the menu button is not aria-expanded")
            link = panel.css("#nav a")[index]
            check(link.text.strip() == label, f"menu item {index} reads {link.text!r}, expected {label!r}")
            rect = panel.driver.execute_script(
                "const r = arguments[0].getBoundingClientRect(); return [r.left, r.right, r.height];", link)
            check(rect[0] >= 0 and rect[1] <= PHONE[0] and rect[2] >= 40,
                  f"menu item {label!r} is not fully on screen or too small to tap: {rect}")
            no_sideways_scroll(panel, "the open menu")
            link.click()
            wait_until(lambda: active_item(panel) == label, f"page {label!r} to open from the menu")
            wait_until(lambda: not panel.css("main td.loading"), f"page {label!r} to load")
            check(not panel.one("#nav").is_displayed(), f"the menu stayed open on {label!r}")
            no_sideways_scroll(panel, f"page {label!r}")
    finally:
        phone(panel, False)


def live_durations(panel, ids):
    """A running run's duration counts up every second: on its page, and in the runs list with
    refreshing off (no request in between)."""
    panel.go(f"/runs/{ids['run']}?project=default")
    panel.wait_text("#run-status", "running")
    first = panel.text(".duration.live")
    check(first, "the run page shows no live duration")
    wait_until(lambda: panel.text(".duration.live") not in ("", first), "the run page's duration to change",
               timeout=2.5, interval=0.1)

    panel.go("/runs?project=default&live=0")
    panel.one("a.run-link")
    count = "return performance.getEntriesByType('resource').filter((e) => e.name.includes('/api/v1/runs')).length"
    requests = panel.driver.execute_script(count)
    first = panel.text(".duration.live")
    check(first, "the runs list shows no live duration")
    wait_until(lambda: panel.text(".duration.live") not in ("", first), "the runs list's duration to change",
               timeout=2.5, interval=0.1)
    check(panel.driver.execute_script(count) == requests, "the runs list asked the server again")


class Receiver:
    """A tiny webhook receiver on 127.0.0.1: answers 200 to every POST and keeps what came."""

    def __init__(self):
        self.received = []
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - the name http.server calls
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                received.append({"path": self.path, "headers": dict(self.headers), "body": body})
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hook"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def shoot_sections(panel, name, width):
    """Saves the page scrolled to each of its three sections (channels, rules, deliveries)."""
    for index, part in enumerate(("channels", "rules", "deliveries")):
        panel.driver.execute_script(
            "document.querySelectorAll('main section.card')[arguments[0]].scrollIntoView({block: 'start'})", index)
        time.sleep(0.2)
        panel.driver.save_screenshot(os.path.join(panel.shots, f"{name}-{part}-{width}.png"))


def delivery_rows(panel):
    """The Deliveries table's rows as {status, event, text, run link}."""
    rows = []
    for row in panel.css("#notify-deliveries tbody tr"):
        status = row.find_elements(By.CSS_SELECTOR, ".badge[data-status]")
        if not status:
            continue
        runs = row.find_elements(By.CSS_SELECTOR, "a.run-link")
        rows.append({"status": status[0].get_attribute("data-status"), "text": row.text,
                     "run": runs[0].get_attribute("title") if runs else None})
    return rows


def notifications(server, panel, ids):
    """The Notifications page in English: a webhook channel to a receiver on 127.0.0.1 added in
    its form (the type's own fields only), a test sent from its row is delivered (the receiver got
    it with the delivery's id as Idempotency-Key), a rule added in its form sends a failed run of
    report-mail (its run linked); then the page in Chinese."""
    receiver = Receiver()
    try:
        panel.go("/notifications?project=default")
        panel.wait_text("#notify-channels", "No channel yet.")
        panel.wait_text("#notify-deliveries", "Nothing sent yet.")
        # Only the chosen type's fields show; secret fields ask for a secret's name.
        check(panel.one("#notify-url").is_displayed() and not panel.one("#notify-smtp-host").is_displayed(),
              "a webhook channel's form does not show just the URL fields")
        set_select(panel, "#notify-channel-type", "smtp")
        check(panel.one("#notify-smtp-host").is_displayed() and not panel.one("#notify-url").is_displayed(),
              "an smtp channel's form does not show the mail server's fields")
        check("never its value" in panel.text("#notify-smtp-password-secret-hint"),
              "the password secret's hint does not say it takes a secret's name")
        set_select(panel, "#notify-channel-type", "telegram")
        check(panel.one("#notify-chat-id").is_displayed() and panel.one("#notify-token-secret").is_displayed(),
              "a telegram channel's form lacks the chat id or the token secret")
        set_select(panel, "#notify-channel-type", "webhook")
        check(not panel.css("#notify-channel-form input[type=password]"), "the channel form asks for a secret value")

        panel.fill("#notify-channel-name", "ops-hook")
        panel.fill("#notify-url", receiver.url)
        set_select(panel, "#notify-channel-language", "zh-CN")
        panel.one("#notify-channel-form button[type=submit]").click()
        panel.wait_text("#notify-saved", "Channel ops-hook added.")
        panel.wait_text("#notify-channels", receiver.url)
        channel = api(server, "GET", "/api/v1/notify/channels?project=default")["items"][0]
        check(channel["name"] == "ops-hook" and channel["type"] == "webhook"
              and channel["config"].get("url") == receiver.url and channel["config"].get("language") == "zh-CN",
              f"the channel made by the form: {channel}")

        # Send test: the queued delivery is named, and it turns delivered in the table by itself.
        row = panel.one("#notify-channels tbody tr")
        row.find_element(By.XPATH, ".//button[normalize-space()='Send test']").click()
        panel.wait_text("#notify-saved", "queued as delivery")
        wait_until(lambda: any(r["status"] == "delivered" for r in delivery_rows(panel)),
                   "the test delivery to show delivered", timeout=40)
        test = api(server, "GET", "/api/v1/notify/deliveries?project=default")["items"][0]
        check(test["event"] == "test" and test["status"] == "delivered", f"the test delivery: {test}")
        check(test["id"][-8:] in panel.text("#notify-saved"), "the notice does not name the queued delivery")
        check(receiver.received, "the receiver got nothing")
        got = receiver.received[0]
        headers = {k.lower(): v for k, v in got["headers"].items()}
        check(headers.get("idempotency-key") == test["id"],
              f"the test message's Idempotency-Key is {headers.get('idempotency-key')!r}, not {test['id']}")
        check(json.loads(got["body"])["event"] == "test", f"the receiver got {got['body'][:200]!r}")
        delivered = next(r for r in delivery_rows(panel) if r["status"] == "delivered")
        check("test" in delivered["text"] and "ops-hook" in delivered["text"] and "200" in delivered["text"],
              f"the delivered row reads {delivered['text']!r}")
        check(panel.css("#notify-deliveries button") and
              panel.css("#notify-deliveries button")[0].text == "Redeliver", "a delivered row has no Redeliver")

        # A rule: every failure of report-mail goes to ops-hook; a failed run is then sent.
        panel.wait_text("#notify-rules", "No rule yet")
        set_select(panel, "#notify-rule-channel", "ops-hook")
        set_select(panel, "#notify-rule-event", "succeeded")
        check(not panel.one("#notify-rule-every").is_displayed(), "'every time' is offered for succeeded")
        set_select(panel, "#notify-rule-event", "failed")
        wait_until(lambda: Select(panel.one("#notify-rule-task")).select_by_visible_text("report-mail") or True,
                   "report-mail among the rule form's tasks")
        panel.one("#notify-rule-every").click()
        panel.one("#notify-rule-form button[type=submit]").click()
        panel.wait_text("#notify-saved", "Rule added.")
        panel.wait_text("#notify-rules", "report-mail")
        rules = api(server, "GET", "/api/v1/notify/rules?project=default")["items"]
        check(len(rules) == 1 and rules[0]["event"] == "failed" and rules[0]["mode"] == "every"
              and rules[0]["task_name"] == "report-mail" and rules[0]["channel"] == "ops-hook",
              f"the rule made by the form: {rules}")
        check("every time" in panel.text("#notify-rules"), f"the rule's mode reads {panel.text('#notify-rules')!r}")
        failing = next(t for t in api(server, "GET", "/api/v1/tasks?project=default")["items"]
                       if t["name"] == "report-mail")
        run = api(server, "POST", "/api/v1/runs?project=default",
                  {"task_id": failing["id"], "idempotency_key": "i18n-notify"})

        def failed_delivered():
            panel.one("#notify-refresh").click()
            time.sleep(0.5)
            return any(r["run"] == run["id"] and r["status"] == "delivered" for r in delivery_rows(panel))

        wait_until(failed_delivered, "the failed run's notification to be delivered", timeout=60, interval=1)
        link = panel.one(f"#notify-deliveries a.run-link[title='{run['id']}']")
        check(f"/runs/{run['id']}" in link.get_attribute("href"), "the delivery's run does not link to its page")
        panel.one("#notify-failed-only").click()
        panel.wait_text("#notify-deliveries", "No failed delivery.")
        panel.one("#notify-failed-only").click()
        wait_until(lambda: len(delivery_rows(panel)) == 2, "both deliveries listed again")

        # Desktop and 390 px (no sideways scroll), each section in view.
        shoot_sections(panel, "en-notifications", "desktop")
        phone(panel, True)
        try:
            no_sideways_scroll(panel, "the notifications page")
            shoot_sections(panel, "en-notifications", "390")
        finally:
            phone(panel, False)

        # The page in Chinese: headings, table headers, a status badge.
        set_select(panel, "#lang-select", "zh-CN")
        wait_until(lambda: html_lang(panel) == "zh-CN", "the panel in Chinese")
        panel.wait_text("h1", "通知")
        wait_until(lambda: len(delivery_rows(panel)) == 2, "the deliveries in Chinese")
        headings = [e.text for e in panel.css("main h2, main h3")]
        for words in ("通道", "规则", "投递记录", "添加通道", "添加规则"):
            check(words in headings, f"the Chinese page lacks the heading {words!r}: {headings}")
        check(active_item(panel) == "通知", f"the active navigation item reads {active_item(panel)!r}")
        headers = [th.get_attribute("textContent") for th in panel.css("#notify-deliveries th")]
        check(headers[:3] == ["时间", "通道", "事件"], f"deliveries table headers {headers}")
        check("已送达" in panel.text("#notify-deliveries") and "测试" in panel.text("#notify-deliveries"),
              f"the deliveries are not in Chinese: {panel.text('#notify-deliveries')!r}")
        check("每次" in panel.text("#notify-rules"), f"the rule's mode in Chinese: {panel.text('#notify-rules')!r}")
        shoot_sections(panel, "zh-CN-notifications", "desktop")
        phone(panel, True)
        try:
            no_sideways_scroll(panel, "the notifications page in Chinese")
            shoot_sections(panel, "zh-CN-notifications", "390")
        finally:
            phone(panel, False)
        set_select(panel, "#lang-select", "en")
        wait_until(lambda: html_lang(panel) == "en", "the panel in English again")
    finally:
        receiver.stop()


def scenario(server, panel, shots):
    ids = seed(server)
    chinese(panel, server, ids)
    english_remembered(panel)
    themes(panel)
    phone_navigation(panel)
    live_durations(panel, ids)
    notifications(server, panel, ids)
    screenshots(panel, ids, "en")
    errors = [m for m in panel.driver.get_log("browser") if m["level"] == "SEVERE" and "/api/" not in m["message"]
              and "favicon" not in m["message"]]
    check(not errors, f"console errors: {errors}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--screenshots", required=True)
    args = parser.parse_args()
    args.server = "local"
    os.makedirs(args.screenshots, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="ql-panel-i18n-")
    server = Server(args, workdir)
    panel = None
    started = time.monotonic()
    try:
        server.start()
        panel = Panel(server.url, args.screenshots, lang="zh-CN")
        scenario(server, panel, args.screenshots)
    except Exception:  # noqa: BLE001 - report everything, then fail
        traceback.print_exc()
        report_failure(panel, server, args.screenshots)
        print("panel languages and themes browser test: FAILED")
        return 1
    finally:
        if panel:
            panel.quit()
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"panel languages and themes browser test: passed in {time.monotonic() - started:.0f} s; "
          f"screenshots in {args.screenshots}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
