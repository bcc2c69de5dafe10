#!/usr/bin/env python3
"""Drives the gateway with the official Python MCP SDK (PyPI `mcp`), as a user's agent would.

usage: python_client.py URL TOKEN MODE SCENARIO PATH
  MODE      legacy | auto   (auto negotiates 2026-07-28 with the gateway)
  SCENARIO  accept | decline | cancel   the elicitation callback's answer to write_file(PATH)
            readonly                    read_text_file(PATH) with a callback that must not run
            held                        no callback: write_file(PATH) is held; prints the result
            confirmed:ID                no callback: write_file(PATH) with _meta.confirmation_id = ID

Prints one JSON line with what happened; exits non-zero on anything unexpected.
"""
import asyncio
import json
import sys

import mcp.types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


async def main() -> int:
    url, token, mode, scenario, path = sys.argv[1:6]
    asked = []

    async def on_elicit(ctx, params):
        asked.append({"request_id": str(ctx.request_id), "message": params.message,
                      "schema": params.requested_schema})
        if scenario == "accept":
            return types.ElicitResult(action="accept", content={"confirmed": True})
        if scenario == "decline":
            return types.ElicitResult(action="decline")
        if scenario == "cancel":
            return types.ElicitResult(action="cancel")
        return types.ElicitResult(action="cancel")

    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    transport = streamable_http_client(url, http_client=http)
    native = scenario in ("accept", "decline", "cancel", "readonly")
    callback = on_elicit if native else None
    async with Client(transport, mode=mode, elicitation_callback=callback) as client:
        version = getattr(client, "protocol_version", None) or getattr(getattr(client, "session", None), "protocol_version", None)
        content = {"path": path, "content": "written by the python sdk"}
        if scenario == "readonly":
            result = await client.call_tool("fs__read_text_file", {"path": path})
        elif scenario.startswith("confirmed:"):
            meta = {"confirmation_id": scenario.split(":", 1)[1]}
            result = await client.call_tool("fs__write_file", content, meta=meta)
        else:
            result = await client.call_tool("fs__write_file", content)
        out = {
            "protocol_version": str(version),
            "asked": asked,
            "is_error": bool(result.is_error),
            "structured": result.structured_content,
            "text": [c.text for c in result.content if getattr(c, "type", "") == "text"],
        }
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
