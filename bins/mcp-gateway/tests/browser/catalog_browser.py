#!/usr/bin/env python3
"""The approvals page's Tool changes section in a real browser: headless Chromium (Debian's),
driven by Playwright.

usage: catalog_browser.py BASE_URL OPERATOR_TOKEN SCREENSHOT READ_CHANGE PEEK_CHANGE WRITE_CHANGE

An operator whose token holds catalog:approve alone signs in. The module's changed `read`
carries an injected <script> in its description and the new `peek` a right-to-left override:
both must show as inert text. The operator approves `read` and rejects `write` with the
page's buttons. Prints one JSON line of what the page showed; exits non-zero on anything else.
"""
import json
import sys

from playwright.sync_api import sync_playwright

BASE, OPERATOR, SHOT, READ, PEEK, WRITE = sys.argv[1:7]
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def step(what):
    """Progress on stderr: a run that stalls shows where."""
    print(f"browser: {what}", file=sys.stderr, flush=True)


def main():
    out = {}
    dialogs = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_context().new_page()
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(BASE + "/approvals")
        page.fill("#token", OPERATOR)
        page.click("text=Sign in")
        page.wait_for_selector("#changes")
        out["signed_in"] = True
        out["heading"] = page.locator("#changes").inner_text()
        out["waiting_shown"] = page.locator("#waiting").count()
        step("signed in")

        read = page.locator(f"#change-{READ}")
        out["read_text"] = read.inner_text()
        out["read_added"] = [l.inner_text() for l in read.locator(".added").all()]
        out["read_removed"] = [l.inner_text() for l in read.locator(".removed").all()]
        peek = page.locator(f"#change-{PEEK}")
        out["peek_text"] = peek.inner_text()
        section = page.locator("section[aria-labelledby=changes]")
        out["script_tags_in_section"] = section.locator("script, img, iframe").count()
        out["page_html_has_raw_script"] = "<script>alert(1)" in page.content()
        page.screenshot(path=SHOT, full_page=True)
        step("changes shown")

        read.get_by_role("button", name="Approve change", exact=True).click()
        page.wait_for_selector("text=Change approved")
        out["after_approve"] = page.locator("#changes").inner_text()
        out["read_still_shown"] = page.locator(f"#change-{READ}").count()
        step("approved")

        page.locator(f"#change-{WRITE}").get_by_role("button", name="Reject", exact=True).click()
        page.wait_for_selector("text=Change rejected")
        out["write_still_shown"] = page.locator(f"#change-{WRITE}").count()
        out["peek_still_shown"] = page.locator(f"#change-{PEEK}").count()
        step("rejected")
        out["dialogs"] = dialogs
        browser.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
