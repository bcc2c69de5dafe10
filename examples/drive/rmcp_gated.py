#!/usr/bin/env python3
"""Drives the example rmcp_gated as its users would: the official Python SDK's client in both
eras, and a person approving on the mounted page in headless Chromium (Playwright).

usage: rmcp_gated.py BASE_URL
  1. A client that cannot answer (legacy, then 2026-07-28) calls delete_order: held, nothing
     deleted; the person approves each on BASE_URL/ops/approvals; the same call again runs.
  2. A client that answers in its own UI (legacy: elicitation/create on the session's stream;
     2026-07-28: input_required) accepts: the call runs at once. One that declines: refused.
Prints one JSON line of what happened; exits non-zero on anything else.
"""
import asyncio
import json
import sys

import mcp.types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from playwright.sync_api import sync_playwright

BASE = sys.argv[1]
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
MODES = {"legacy": "legacy", "modern": "2026-07-28"}


def call(mode, order, answer=None):
    async def run():
        asked = []

        async def on_elicit(ctx, params):
            asked.append(params.message)
            if answer == "accept":
                return types.ElicitResult(action="accept", content={"confirmed": True})
            return types.ElicitResult(action=answer)

        transport = streamable_http_client(BASE + "/mcp")
        callback = on_elicit if answer else None
        async with Client(transport, mode=MODES[mode], elicitation_callback=callback) as client:
            result = await client.call_tool("delete_order", {"order": order})
            return {"asked": len(asked), "is_error": bool(result.is_error),
                    "structured": result.structured_content,
                    "text": " ".join(c.text for c in result.content if getattr(c, "type", "") == "text")}
    return asyncio.run(run())


def fail(what, seen):
    print(json.dumps({"failed": what, "seen": seen}))
    sys.exit(1)


def main():
    out = {}
    held = {}
    for mode, order in (("legacy", 1042), ("modern", 1043)):
        first = call(mode, order)
        if not (first["structured"] or {}).get("elicitation_required"):
            fail(f"{mode}: the first call is held", first)
        held[mode] = (order, first["structured"]["elicitation"]["id"])
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page()
        page.goto(BASE + "/ops/approvals")
        for mode, (order, eid) in held.items():
            page.wait_for_selector(f"#e-{eid}", timeout=15000)
            page.locator(f"#e-{eid}").get_by_role("button", name="Approve", exact=True).click()
            page.wait_for_selector("text=Approved.")
            out[f"{mode}_approved_at"] = page.url
        browser.close()
    for mode, (order, eid) in held.items():
        again = call(mode, order)
        if again["text"] != f"deleted order {order}":
            fail(f"{mode}: the approved call runs", again)
        out[f"{mode}_held_then_ran"] = again["text"]
    for mode, order in (("legacy", 7), ("modern", 8)):
        native = call(mode, order, "accept")
        if native["text"] != f"deleted order {order}" or native["asked"] != 1:
            fail(f"{mode}: asked in the client, accepted, run", native)
        out[f"{mode}_asked_natively"] = native["text"]
        declined = call(mode, order + 100, "decline")
        if not declined["is_error"] or "deleted" in declined["text"]:
            fail(f"{mode}: declined in the client, refused", declined)
        out[f"{mode}_declined"] = declined["text"][:60]
    print(json.dumps(out))


main()
