#!/usr/bin/env python3
"""Single sign-on for the approvals page, in a real browser (Debian's Chromium, Playwright).

usage: approvals_sso_browser.py BASE_URL AGENT_TOKEN

The agent (a client_credentials token of the person "alice" from the identity provider)
calls demo__delete_note, held under a four-eyes rule for the group "sre". Alice signs in
through the identity provider's own login pages: she sees the call waiting for the group
and cannot approve it. Bob (in "sre") signs in, sees it for alice and approves; the agent's
re-call runs. Sign-out ends each session here and at the provider. Prints one JSON line.
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


def sign_in(page, login):
    """Through the identity provider's own login and consent pages."""
    page.goto(BASE + "/approvals")
    page.click("a.sso")
    try:
        page.wait_for_selector("input[name=login]", timeout=15000)
    except Exception:
        print(f"not at the login page: {page.url} {page.locator('body').inner_text()[:500]}", file=sys.stderr)
        raise
    host = page.url.split("/")[2]
    page.fill("input[name=login]", login)
    page.fill("input[name=password]", "any password")
    page.click("button[type=submit]")
    consent = page.locator("button:has-text('Continue')")
    consent.wait_for(timeout=15000)
    consent.click()
    page.wait_for_selector("text=Sign out", timeout=15000)
    return host


def sign_out(page):
    """Here, then at the provider, which sends the person back to the page."""
    page.click("text=Sign out")
    page.wait_for_selector("button[name=logout]", timeout=15000)
    page.click("button[name=logout]")
    page.wait_for_selector("a.sso", timeout=15000)


def main():
    out = {}
    held = agent_call("demo__delete_note", {"number": 1})
    held_id = held["structuredContent"]["elicitation"]["id"]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page()
        # Alice, whose agent made the call: four eyes, so she sees it waiting for the group
        # and cannot approve it, even by posting the form herself.
        out["login_page_host"] = sign_in(page, "alice")
        page.wait_for_selector(f"#e-{held_id}", timeout=15000)
        item = page.locator(f"#e-{held_id}")
        out["caller_sees"] = item.inner_text()
        out["caller_buttons"] = item.get_by_role("button", name="Approve", exact=True).count()
        out["caller_forged_status"] = page.evaluate(
            """async (id) => {
                const csrf = document.querySelector('input[name=csrf]').value;
                const r = await fetch('/approvals/' + id + '/respond', {method: 'POST',
                    headers: {'content-type': 'application/x-www-form-urlencoded'},
                    body: 'csrf=' + encodeURIComponent(csrf) + '&decision=approve'});
                return r.status;
            }""", held_id)
        out["held_after_caller"] = agent_call("demo__delete_note", {"number": 1}, held_id)
        sign_out(page)
        # Bob, of the sre group: sees it for alice, approves; the agent's re-call runs.
        sign_in(page, "bob")
        page.wait_for_selector(f"#e-{held_id}", timeout=15000)
        out["approver_sees"] = page.locator(f"#e-{held_id}").inner_text()
        page.locator(f"#e-{held_id}").get_by_role("button", name="Approve", exact=True).click()
        page.wait_for_selector("text=Approved.")
        out["approved_call"] = agent_call("demo__delete_note", {"number": 1}, held_id)
        sign_out(page)
        page.goto(BASE + "/approvals")
        out["signed_out"] = page.locator("a.sso").count() == 1
        browser.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
