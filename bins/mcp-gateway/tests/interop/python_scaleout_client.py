#!/usr/bin/env python3
"""One user's agent, through a balancer in front of several gateway instances, with the
official Python MCP SDK (PyPI `mcp`) in 2025-11-25 mode. Every request opens a new
connection (`Connection: close`), so a round-robin balancer spreads the steps of one session
over the instances.

usage: python_scaleout_client.py URL CLIENT_TOKEN HUMAN_TOKEN DIR

1. Session one (answers confirmations natively, "accept"): lists the tools, writes
   DIR/native.txt — held, asked through elicitation/create, approved.
2. Session two (no elicitation): writes DIR/held.txt — held; approves it over the REST API
   with HUMAN_TOKEN; writes again naming the confirmation — forwarded.
3. Prints "KILL" and waits for a line on stdin (the test kills an instance meanwhile).
4. Session one carries on: lists the tools, writes DIR/after.txt natively.

Prints one JSON line with what happened; exits non-zero on anything unexpected.
"""
import asyncio
import json
import sys

import httpx2
import mcp.types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def log(message):
    print(message, file=sys.stderr, flush=True)


def http_client(token):
    return create_mcp_http_client(headers={"Authorization": f"Bearer {token}", "Connection": "close"})


async def main() -> int:
    url, client_token, human_token, directory = sys.argv[1:5]
    base = url.rsplit("/mcp", 1)[0]
    asked = []

    async def on_elicit(ctx, params):
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"confirmed": True})

    out = {}
    one = Client(streamable_http_client(url, http_client=http_client(client_token)),
                 mode="legacy", elicitation_callback=on_elicit)
    async with one as first:
        tools = await first.list_tools()
        out["tools"] = sorted(t.name for t in tools.tools)
        log("session one: listed")
        native = await first.call_tool(
            "fs__write_file", {"path": f"{directory}/native.txt", "content": "native"})
        out["native"] = {"is_error": bool(native.is_error), "asked": len(asked),
                         "text": [c.text for c in native.content if getattr(c, "type", "") == "text"]}
        log("session one: wrote natively")

        two = Client(streamable_http_client(url, http_client=http_client(client_token)), mode="legacy")
        async with two as second:
            args = {"path": f"{directory}/held.txt", "content": "held"}
            held = await second.call_tool("fs__write_file", args)
            elicitation = (held.structured_content or {}).get("elicitation", {})
            out["held"] = {"is_error": bool(held.is_error), "id": elicitation.get("id")}
            log("session two: held")
            async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {human_token}",
                                                   "Connection": "close"}) as rest:
                answer = await rest.post(f"{base}/v1/mcp/elicitations/{elicitation.get('id')}/respond",
                                         json={"confirmed": True})
                out["rest_status"] = answer.status_code
            log("session two: approved over REST")
            again = await second.call_tool("fs__write_file", args,
                                           meta={"confirmation_id": elicitation.get("id")})
            out["recalled"] = {"is_error": bool(again.is_error),
                               "text": [c.text for c in again.content if getattr(c, "type", "") == "text"]}
            log("session two: re-called")

        print("KILL", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        log("session one: carrying on")
        tools = await first.list_tools()
        out["tools_after"] = len(tools.tools)
        after = await first.call_tool(
            "fs__write_file", {"path": f"{directory}/after.txt", "content": "after"})
        out["after"] = {"is_error": bool(after.is_error), "asked": len(asked),
                        "text": [c.text for c in after.content if getattr(c, "type", "") == "text"]}
        log("session one: wrote natively after the kill")
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
