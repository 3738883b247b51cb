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
within 2.5 s. Every page is saved as a screenshot in both languages and both themes, desktop and
390 px wide, into --screenshots. A missing browser or driver is a failure, never a skip.
"""

import argparse
import os
import shutil
import sys
import tempfile
import time
import traceback

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from panel_browser_test import Panel, Server, api, check, report_failure, sign_in, wait_until

PHONE = (390, 844)

# The navigation in each language, in order (an installation owner sees every item).
NAV = {
    "zh-CN": ["仪表盘", "定时任务", "触发器", "运行记录", "历史", "审批", "密钥", "项目", "成员与令牌",
              "审计"],
    "en": ["Dashboard", "Tasks", "Triggers", "Runs", "History", "Approvals", "Secrets", "Projects",
           "People & tokens", "Audit"],
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


def scenario(server, panel, shots):
    ids = seed(server)
    chinese(panel, server, ids)
    english_remembered(panel)
    themes(panel)
    phone_navigation(panel)
    live_durations(panel, ids)
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
