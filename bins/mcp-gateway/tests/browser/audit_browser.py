#!/usr/bin/env python3
"""The approvals page's Audit view in a real browser: headless Chromium (Debian's), driven by
Playwright.

usage: audit_browser.py BASE_URL AUDITOR_TOKEN SCREENSHOT DOWNLOAD_PATH

A reviewer whose token holds audit:read alone signs in, opens Audit from the page, reads the
trail, filters it by outcome and by tool with the page's form, pages to older events, and
downloads the filtered events as JSON lines. Prints one JSON line of what the page showed;
exits non-zero on anything else.
"""
import json
import sys

from playwright.sync_api import sync_playwright

BASE, AUDITOR, SHOT, DOWNLOAD = sys.argv[1:5]
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def step(what):
    """Progress on stderr: a run that stalls shows where."""
    print(f"browser: {what}", file=sys.stderr, flush=True)


def rows(page):
    """Each row of the table as [when, event, caller, tool, detail]."""
    return [[cell.inner_text() for cell in row.locator("td").all()]
            for row in page.locator("table.audit tbody tr").all()]


def main():
    out = {}
    dialogs = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        context = browser.new_context(accept_downloads=True)
        page = context.new_page()
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(BASE + "/approvals")
        page.fill("#token", AUDITOR)
        page.click("text=Sign in")
        page.wait_for_selector("nav a[href='/approvals/audit']")
        out["waiting_shown"] = page.locator("#waiting").count()
        step("signed in")

        page.click("nav a[href='/approvals/audit']")
        page.wait_for_selector("table.audit")
        out["all"] = rows(page)
        out["holds"] = page.locator(".holds").inner_text()
        page.screenshot(path=SHOT, full_page=True)
        step("trail shown")

        page.select_option("select[name=outcome]", "rejected")
        page.click("button:has-text('Filter')")
        page.wait_for_url("**/approvals/audit?*outcome=rejected*")
        out["rejected"] = rows(page)
        step("filtered by outcome")

        page.select_option("select[name=outcome]", "")
        page.fill("input[name=tool]", "notes__*")
        page.fill("input[name=caller]", "alice")
        page.click("button:has-text('Filter')")
        page.wait_for_url("**/approvals/audit?*tool=notes*")
        out["notes"] = rows(page)
        out["older_link"] = page.locator("a.older").count()
        if out["older_link"]:
            page.click("a.older")
            page.wait_for_url("**cursor=*")
            out["older"] = rows(page)
        step("filtered by tool and caller")

        with page.expect_download() as info:
            page.click("a.download")
        info.value.save_as(DOWNLOAD)
        out["download_name"] = info.value.suggested_filename
        step("downloaded")

        page.fill("input[name=since]", "yesterday")
        page.click("button:has-text('Filter')")
        page.wait_for_selector(".error")
        out["bad_since"] = page.locator(".error").inner_text()
        out["dialogs"] = dialogs
        browser.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
