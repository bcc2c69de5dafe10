#!/usr/bin/env python3
"""Drives a module's talk through the gateway with the official Python MCP SDK (PyPI `mcp`):
progress, log messages, the module's elicitation and sampling, answered by this client's
callbacks. The module is the conformance fixture (tests/conformance/fixture_server.py)
behind the gateway with the prefix `fx`.

usage: python_relay_client.py URL TOKEN MODE
  MODE  legacy | auto   (auto negotiates 2026-07-28 with the gateway)

Prints one JSON line with what each call saw; exits non-zero on anything unexpected.
"""
import asyncio
import json
import sys

import mcp.types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


async def main() -> int:
    url, token, mode = sys.argv[1:4]
    logs, progress, elicited, sampled = [], [], [], []

    async def on_elicit(ctx, params):
        elicited.append(params.message)
        return types.ElicitResult(action="accept", content={"username": "ada", "email": "ada@example.com"})

    async def on_sample(ctx, params):
        sampled.append(params.max_tokens)
        return types.CreateMessageResult(role="assistant", model="interop",
                                         content=types.TextContent(type="text", text="sampled by python"))

    async def on_log(params):
        logs.append(str(params.data))

    async def on_progress(value, total, message):
        progress.append(value)

    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    transport = streamable_http_client(url, http_client=http)
    async with Client(transport, mode=mode, elicitation_callback=on_elicit,
                      sampling_callback=on_sample, logging_callback=on_log, log_level="debug") as client:
        version = getattr(client, "protocol_version", None) or getattr(getattr(client, "session", None), "protocol_version", None)
        texts = {}
        if mode == "legacy":
            await client.set_logging_level("debug")
        for tool, args in [("fx__test_tool_with_logging", {}), ("fx__test_elicitation", {"message": "who?"}),
                           ("fx__test_sampling", {"prompt": "hi"})]:
            result = await client.call_tool(tool, args)
            texts[tool] = [c.text for c in result.content if getattr(c, "type", "") == "text"]
        result = await client.call_tool("fx__test_tool_with_progress", {}, progress_callback=on_progress)
        texts["fx__test_tool_with_progress"] = [c.text for c in result.content if getattr(c, "type", "") == "text"]
        print(json.dumps({"protocol_version": str(version), "logs": logs, "progress": progress, "elicited": elicited,
                          "sampled": sampled, "texts": texts}))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
