#!/usr/bin/env python3
"""One caller of a virtual server with the official Python MCP SDK (PyPI `mcp`): lists the
tools it is offered, then makes calls, with no elicitation callback (a held call comes back
as the held result).

usage: python_servers_client.py URL TOKEN MODE CALLS
  MODE   legacy | auto   (auto negotiates 2026-07-28 with the gateway)
  CALLS  a JSON list of [tool, arguments, confirmation id or null]

Prints one JSON line: the protocol version, the tools listed, and each call's result (or the
JSON-RPC error it got).
"""
import asyncio
import json
import sys

from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


async def main() -> int:
    url, token, mode, calls = sys.argv[1:5]
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    transport = streamable_http_client(url, http_client=http)
    async with Client(transport, mode=mode) as client:
        version = getattr(client, "protocol_version", None) or getattr(
            getattr(client, "session", None), "protocol_version", None)
        listed = await client.list_tools()
        results = []
        for tool, arguments, confirmation in json.loads(calls):
            meta = {"confirmation_id": confirmation} if confirmation else None
            try:
                result = await client.call_tool(tool, arguments, meta=meta)
            except Exception as e:  # the gateway's JSON-RPC error, as the SDK raises it
                results.append({"error": str(e)})
                continue
            results.append({
                "is_error": bool(result.is_error),
                "structured": result.structured_content,
                "text": [c.text for c in result.content if getattr(c, "type", "") == "text"],
            })
        print(json.dumps({
            "protocol_version": str(version),
            "tools": sorted(t.name for t in listed.tools),
            "calls": results,
        }))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
