#!/usr/bin/env python3
"""The official Python SDK as an OAuth client of the gateway: it gets a 401, discovers the
authorization server from the challenge's protected resource metadata, gets a token with
client_credentials (for the gateway's resource) and calls a tool.

usage: python_oauth_client.py URL ISSUER CLIENT_ID CLIENT_SECRET TOOL
Prints one JSON line with what happened.
"""
import asyncio
import json
import sys

from mcp import Client
from mcp.client.auth import TokenStorage
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken


class Memory(TokenStorage):
    def __init__(self):
        self.tokens = None
        self.client = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


async def main() -> int:
    url, issuer, client_id, secret, tool = sys.argv[1:6]
    storage = Memory()
    auth = ClientCredentialsOAuthProvider(
        server_url=url, storage=storage, client_id=client_id, client_secret=secret,
        scope="mcp.tools", issuer=issuer)
    http = create_mcp_http_client(auth=auth)
    async with Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
        tools = await client.list_tools()
        result = await client.call_tool(tool, {})
        print(json.dumps({
            "tools": [t.name for t in tools.tools],
            "is_error": bool(result.is_error),
            "text": [c.text for c in result.content if getattr(c, "type", "") == "text"],
            "got_token": storage.tokens is not None,
        }))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
