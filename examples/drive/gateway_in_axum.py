#!/usr/bin/env python3
"""Drives the example gateway_in_axum as its users would: the service's own route, the
official Python SDK's client in both eras as the service's user alice, the REST API and the
page (headless Chromium) mounted under /gateway, and a stranger refused.

usage: gateway_in_axum.py BASE_URL
Prints one JSON line of what happened; exits non-zero on anything else.
"""
import asyncio
import json
import sys
import urllib.error
import urllib.request

from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from playwright.sync_api import sync_playwright

BASE = sys.argv[1]
AGENT = "alice-agent"   # may call tools
TOKEN = "alice-secret"  # Alice herself: answers
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def call(mode, path):
    async def run():
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {AGENT}"})
        transport = streamable_http_client(BASE + "/gateway/mcp", http_client=http)
        async with Client(transport, mode=mode) as client:
            result = await client.call_tool("files__delete_file", {"path": path})
            return {"structured": result.structured_content,
                    "text": " ".join(c.text for c in result.content if getattr(c, "type", "") == "text")}
    return asyncio.run(run())


def http(method, path, body=None, token=TOKEN):
    headers = {"content-type": "application/json"}
    if token:
        headers["authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(BASE + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def fail(what, seen):
    print(json.dumps({"failed": what, "seen": seen}))
    sys.exit(1)


def held_id(result, what):
    structured = result["structured"] or {}
    if not structured.get("elicitation_required"):
        fail(what, result)
    return structured["elicitation"]["id"]


def main():
    out = {}
    status, text = http("GET", "/health", token=None)
    if status != 200 or text != "the service's own route":
        fail("the service's own route", [status, text])
    status, _ = http("GET", "/gateway/v1/mcp/elicitations", token="someone-else")
    if status != 401:
        fail("a stranger is refused", status)
    # The agent may call, never answer.
    # Held (2026-07-28), approved through the REST API, run by a legacy client's same call.
    first = held_id(call("2026-07-28", "/srv/a"), "the 2026-07-28 call is held")
    status, _ = http("POST", f"/gateway/v1/mcp/elicitations/{first}/respond", {"confirmed": True}, token=AGENT)
    if status != 403:
        fail("the agent cannot approve its own call", status)
    status, text = http("POST", f"/gateway/v1/mcp/elicitations/{first}/respond", {"confirmed": True})
    if status != 200:
        fail("approved through the mounted REST API", [status, text])
    ran = call("legacy", "/srv/a")
    if ran["text"] != 'deleted "/srv/a"':
        fail("the approved call runs, once", ran)
    out["rest_then_legacy"] = ran["text"]
    # Held (legacy), approved on the mounted page by the signed-in user, run (2026-07-28).
    second = held_id(call("legacy", "/srv/b"), "the legacy call is held")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        context = browser.new_context(extra_http_headers={"Authorization": f"Bearer {TOKEN}"})
        page = context.new_page()
        page.goto(BASE + "/gateway/approvals")
        page.wait_for_selector(f"#e-{second}", timeout=15000)
        page.locator(f"#e-{second}").get_by_role("button", name="Approve", exact=True).click()
        page.wait_for_selector("text=Approved.")
        out["page_url"] = page.url
        stranger = browser.new_context(extra_http_headers={"Authorization": "Bearer nobody"}).new_page()
        stranger.goto(BASE + "/gateway/approvals")
        out["stranger_page"] = stranger.inner_text("body")[:80]
        browser.close()
    if "Sign in to the service first" not in out["stranger_page"]:
        fail("a stranger sees no approvals", out)
    ran = call("2026-07-28", "/srv/b")
    if ran["text"] != 'deleted "/srv/b"':
        fail("the call approved on the page runs", ran)
    out["page_then_modern"] = ran["text"]
    print(json.dumps(out))


main()
