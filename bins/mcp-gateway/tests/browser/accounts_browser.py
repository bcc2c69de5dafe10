#!/usr/bin/env python3
"""Connected accounts on the approvals page in a real browser (Debian's Chromium, Playwright).

usage: accounts_browser.py BASE_URL PERSON_TOKEN MODULE ACTION [LOGIN] [LINK]

The person signs in to the page with their token and opens LINK (the Connect link an agent
was given) or the Accounts view. ACTION "connect": Connect on MODULE's row, through the
module's authorization server's own login and consent pages as LOGIN, back to the Accounts
view. ACTION "disconnect": Disconnect on MODULE's row. Prints one JSON line of what the
page showed; exits non-zero on anything else.
"""
import json
import sys

from playwright.sync_api import sync_playwright

BASE, PERSON, MODULE, ACTION = sys.argv[1:5]
LOGIN = sys.argv[5] if len(sys.argv) > 5 else ""
LINK = sys.argv[6] if len(sys.argv) > 6 else BASE + "/approvals/accounts"
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def step(what):
    print(f"browser: {what}", file=sys.stderr, flush=True)


def main():
    out = {}
    dialogs = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_context().new_page()
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(BASE + "/approvals")
        page.fill("#token", PERSON)
        page.click("text=Sign in")
        page.wait_for_selector("nav a[href='/approvals/accounts']", timeout=15000)
        step("signed in")
        page.goto(LINK)
        row = page.locator(f"tr[data-module='{MODULE}']")
        row.wait_for(timeout=15000)
        out["before"] = row.inner_text()
        out["marked"] = (row.get_attribute("class") or "") == "marked"
        if ACTION == "connect":
            row.get_by_role("button", name="Connect").click()
            try:
                page.wait_for_selector("input[name=login]", timeout=15000)
            except Exception:
                print(f"not at the login page: {page.url} {page.locator('body').inner_text()[:500]}",
                      file=sys.stderr)
                raise
            out["login_page_host"] = page.url.split("/")[2]
            step("at the authorization server")
            page.fill("input[name=login]", LOGIN)
            page.fill("input[name=password]", "any password")
            page.click("button[type=submit]")
            consent = page.locator("button:has-text('Continue')")
            consent.wait_for(timeout=15000)
            consent.click()
            page.wait_for_url("**/approvals/accounts?done=connected", timeout=15000)
            step("connected")
        else:
            row.get_by_role("button", name="Disconnect").click()
            page.wait_for_url("**/approvals/accounts?done=disconnected", timeout=15000)
            step("disconnected")
        out["notice"] = page.locator(".notice").inner_text()
        out["after"] = page.locator(f"tr[data-module='{MODULE}']").inner_text()
        out["dialogs"] = dialogs
        browser.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
