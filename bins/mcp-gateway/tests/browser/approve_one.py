#!/usr/bin/env python3
"""A person approves one held call on the approvals page, in headless Chromium (Debian's),
driven by Playwright: signs in with their token, waits for the call to be listed, approves it.

usage: approve_one.py BASE_URL HUMAN_TOKEN CONFIRMATION_ID
Prints one JSON line of what happened; exits non-zero on anything else.
"""
import json
import sys

from playwright.sync_api import sync_playwright

BASE, HUMAN, EID = sys.argv[1:4]
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def main():
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page()
        page.goto(BASE + "/approvals")
        page.fill("#token", HUMAN)
        page.click("text=Sign in")
        page.wait_for_selector(f"#e-{EID}", timeout=15000)
        page.locator(f"#e-{EID}").get_by_role("button", name="Approve", exact=True).click()
        page.wait_for_selector("text=Approved.", timeout=15000)
        print(json.dumps({"approved": True, "at": page.url}))
        browser.close()


if __name__ == "__main__":
    main()
