#!/usr/bin/env python3
"""Single sign-on for the approvals page, in a real browser (Debian's Chromium, Playwright).

usage: approvals_sso_browser.py BASE_URL AGENT_TOKEN

The agent (a client_credentials token of the person "alice" from the identity provider)
calls demo__delete_note and is held. The person opens the page, signs in through the
identity provider's own login pages as alice, sees the held call, approves it; the agent's
re-call runs. Sign-out ends the session here and at the provider. Prints one JSON line.
"""
import json
import sys
import urllib.request

from playwright.sync_api import sync_playwright

BASE, AGENT = sys.argv[1:3]
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def agent_call(name, arguments, confirmation=None):
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}
    if confirmation:
        meta["confirmation_id"] = confirmation
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": name, "arguments": arguments, "_meta": meta}}
    request = urllib.request.Request(BASE + "/mcp", data=json.dumps(body).encode(), method="POST", headers={
        "authorization": "Bearer " + AGENT, "content-type": "application/json",
        "accept": "application/json", "mcp-protocol-version": "2026-07-28",
        "mcp-method": "tools/call", "mcp-name": name})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())["result"]


def main():
    out = {}
    held = agent_call("demo__delete_note", {"number": 1})
    held_id = held["structuredContent"]["elicitation"]["id"]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page()
        page.goto(BASE + "/approvals")
        page.click("a.sso")
        # The identity provider's own login and consent pages.
        try:
            page.wait_for_selector("input[name=login]", timeout=15000)
        except Exception:
            print(f"not at the login page: {page.url} {page.locator('body').inner_text()[:500]}", file=sys.stderr)
            raise
        out["login_page_host"] = page.url.split("/")[2]
        page.fill("input[name=login]", "alice")
        page.fill("input[name=password]", "any password")
        page.click("button[type=submit]")
        consent = page.locator("button:has-text('Continue')")
        consent.wait_for(timeout=15000)
        consent.click()
        page.wait_for_selector(f"#e-{held_id}", timeout=15000)
        out["signed_in_text"] = page.locator("body").inner_text()[:600]
        page.locator(f"#e-{held_id}").get_by_role("button", name="Approve").click()
        page.wait_for_selector("text=Approved.")
        out["approved_call"] = agent_call("demo__delete_note", {"number": 1}, held_id)
        # Sign-out: here, then at the provider, which sends the person back to the page.
        page.click("text=Sign out")
        page.wait_for_selector("button[name=logout]", timeout=15000)
        page.click("button[name=logout]")
        page.wait_for_selector("a.sso", timeout=15000)
        page.goto(BASE + "/approvals")
        out["signed_out"] = page.locator("a.sso").count() == 1
        browser.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
