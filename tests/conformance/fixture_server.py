"""Fixture MCP server for the conformance tests.

A small "everything" server written with the official Python `mcp` SDK (2.3.0,
low-level `Server` API). It provides the tools, resources, prompts, completion
and logging that the server scenarios of `@modelcontextprotocol/conformance`
0.1.16 expect (modelled on the suite's examples/servers/typescript/
everything-server.ts). It is the upstream server that the gateway is tested in
front of, and it passes the 30 active scenarios when the suite is run against
it directly.

Usage: python fixture_server.py (--port PORT | --stdio) [--era legacy|both|both-asking-2025]
Serves Streamable HTTP (stateful sessions, SSE responses) at
http://127.0.0.1:PORT/mcp, or stdio with --stdio.

--era legacy (the default) serves 2025-11-25 only: a 2026-07-28 request (the
gateway's `server/discover` probe) gets the spec's -32022, so the gateway falls
back to `initialize`. --era both serves either era, as the SDK does: a
2026-07-28 request is served statelessly, its tools ask for input with
`input_required` (multi round-trip) instead of asking mid-call, and its log
messages follow the request's `_meta` log level. --era both-asking-2025 serves
either era too, but its tools ask the 2025 way in both (mid-call `elicitation/create`
and `sampling/createMessage`), as a server written for 2025-11-25 on a newer SDK
does: at 2026-07-28 the SDK refuses them ("no back-channel"), so only a 2025-era
session can answer them. Stops cleanly on SIGTERM or
SIGINT. Depends only on the `mcp` SDK (and its dependencies) and the standard
library.
"""

import argparse
import json
import signal
import sys

import anyio
import uvicorn

import mcp.types as types
from mcp import MCPError
from mcp.server.lowlevel import Server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

# 1x1 red PNG and a minimal WAV file, base64-encoded.
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
WAV = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="

NO_ARGS = {"type": "object", "properties": {}}


def string_args(**props: str) -> dict:
    return {
        "type": "object",
        "properties": {k: {"type": "string", "description": d} for k, d in props.items()},
        "required": list(props),
    }


TOOLS = [
    ("test_simple_text", "Returns a simple text content block", NO_ARGS),
    ("test_image_content", "Returns an image content block (PNG)", NO_ARGS),
    ("test_audio_content", "Returns an audio content block (WAV)", NO_ARGS),
    ("test_embedded_resource", "Returns an embedded text resource", NO_ARGS),
    ("test_multiple_content_types", "Returns text, image and resource content", NO_ARGS),
    ("test_tool_with_logging", "Sends three log notifications while running", NO_ARGS),
    ("test_tool_with_progress", "Sends three progress notifications while running", NO_ARGS),
    ("test_error_handling", "Always fails with an isError result", NO_ARGS),
    ("test_sampling", "Asks the client for an LLM completion", string_args(prompt="Prompt to send to the LLM")),
    ("test_elicitation", "Asks the user for a username and email", string_args(message="Message shown to the user")),
    ("test_elicitation_sep1034_defaults", "Elicits a form whose fields have defaults (SEP-1034)", NO_ARGS),
    ("test_elicitation_sep1330_enums", "Elicits a form with every enum variant (SEP-1330)", NO_ARGS),
    # Not a conformance fixture: the gateway's own interop test of list changes.
    ("grow_tools", "Adds the tool added_tool and announces it on the session's GET stream", NO_ARGS),
]

# Form schemas for the elicitation tools.
USER_SCHEMA = {
    "type": "object",
    "properties": {
        "username": {"type": "string", "description": "User's response"},
        "email": {"type": "string", "description": "User's email address"},
    },
    "required": ["username", "email"],
}
DEFAULTS_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "User name", "default": "John Doe"},
        "age": {"type": "integer", "description": "User age", "default": 30},
        "score": {"type": "number", "description": "User score", "default": 95.5},
        "status": {
            "type": "string",
            "description": "User status",
            "enum": ["active", "inactive", "pending"],
            "default": "active",
        },
        "verified": {"type": "boolean", "description": "Verification status", "default": True},
    },
    "required": [],
}
OPTIONS = ["option1", "option2", "option3"]
TITLED = [{"const": f"value{i}", "title": t} for i, t in enumerate(["First", "Second", "Third"], 1)]
ENUMS_SCHEMA = {
    "type": "object",
    "properties": {
        "untitledSingle": {"type": "string", "description": "Select one option", "enum": OPTIONS},
        "titledSingle": {"type": "string", "description": "Select one option with titles", "oneOf": TITLED},
        "legacyEnum": {
            "type": "string",
            "description": "Select one option (legacy)",
            "enum": ["opt1", "opt2", "opt3"],
            "enumNames": ["Option One", "Option Two", "Option Three"],
        },
        "untitledMulti": {
            "type": "array",
            "description": "Select multiple options",
            "minItems": 1,
            "maxItems": 3,
            "items": {"type": "string", "enum": OPTIONS},
        },
        "titledMulti": {
            "type": "array",
            "description": "Select multiple options with titles",
            "minItems": 1,
            "maxItems": 3,
            "items": {"anyOf": TITLED},
        },
    },
    "required": [],
}


def text(s: str) -> dict:
    return {"type": "text", "text": s}


def image() -> dict:
    return {"type": "image", "data": PNG, "mimeType": "image/png"}


def embedded(uri: str, mime: str, body: str) -> dict:
    return {"type": "resource", "resource": {"uri": uri, "mimeType": mime, "text": body}}


def answer(ctx, result: dict, cacheable: bool = False) -> dict:
    """A result as the request's era wants it: 2026-07-28 results say they are complete, and
    lists and reads carry their caching hints."""
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        result.setdefault("resultType", "complete")
        if cacheable:
            result.setdefault("ttlMs", 0)
            result.setdefault("cacheScope", "private")
    return result


async def list_tools(ctx, params):
    return answer(ctx, {"tools": [{"name": n, "description": d, "inputSchema": s} for n, d, s in TOOLS]}, True)


def plain(answer):
    """An input response as a dict (the SDK may hand it over as a model)."""
    if hasattr(answer, "model_dump"):
        return answer.model_dump(mode="json", by_alias=True, exclude_none=True)
    return answer


# Whether tools ask mid-call at either era (--era both-asking-2025).
ASKING_2025 = False


class InputRequired(Exception):
    """A 2026-07-28 call needs the client's input first: answered `input_required`."""

    def __init__(self, key: str, method: str, request: dict):
        self.result = {
            "resultType": "input_required",
            "inputRequests": {key: {"method": method, "params": request}},
            "requestState": f"asked:{key}",
        }


async def call_tool(ctx, params: types.CallToolRequestParams):
    try:
        return answer(ctx, await run_tool(ctx, params))
    except InputRequired as asked:
        return asked.result


async def run_tool(ctx, params: types.CallToolRequestParams):
    name, args = params.name, params.arguments or {}
    session = ctx.session
    related = ServerMessageMetadata(related_request_id=ctx.request_id)
    modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
    asks_modern = modern and not ASKING_2025

    async def ask(key: str, method: str, request: dict, result_type):
        """Asks the client: mid-call in a legacy session, by `input_required` at 2026-07-28."""
        if not asks_modern:
            if method == "elicitation/create":
                return await session.elicit_form(request["message"], request["requestedSchema"], related_request_id=ctx.request_id)
            return await session.send_request(
                types.CreateMessageRequest(params=types.CreateMessageRequestParams.model_validate(request)),
                result_type,
                metadata=related,
            )
        answer = (params.input_responses or {}).get(key)
        if answer is None:
            raise InputRequired(key, method, request)
        return result_type.model_validate(plain(answer))

    async def log(message: str) -> None:
        # Request-scoped, so it rides this call's SSE stream before the result.
        note = types.LoggingMessageNotification(
            params=types.LoggingMessageNotificationParams(level="info", logger="fixture", data=message)
        )
        await session.send_notification(note, related_request_id=ctx.request_id)

    async def elicit(message: str, schema: dict) -> list[dict]:
        request = {"mode": "form", "message": message, "requestedSchema": schema}
        r = await ask("fixture:elicit", "elicitation/create", request, types.ElicitResult)
        return [text(f"Elicitation result: action={r.action}, content={json.dumps(r.content or {})}")]

    if name == "grow_tools":
        if not any(t[0] == "added_tool" for t in TOOLS):
            TOOLS.append(("added_tool", "Added by grow_tools", NO_ARGS))
        # Not related to this request: it goes out on the session's GET stream.
        await session.send_tool_list_changed()
        return {"content": [text("grown")]}
    if name == "test_simple_text":
        content = [text("This is a simple text response for testing.")]
    elif name == "test_image_content":
        content = [image()]
    elif name == "test_audio_content":
        content = [{"type": "audio", "data": WAV, "mimeType": "audio/wav"}]
    elif name == "test_embedded_resource":
        content = [embedded("test://embedded-resource", "text/plain", "This is an embedded resource content.")]
    elif name == "test_multiple_content_types":
        content = [
            text("Multiple content types test:"),
            image(),
            embedded("test://mixed-content-resource", "application/json", '{"test": "data", "value": 123}'),
        ]
    elif name == "test_tool_with_logging":
        for i, message in enumerate(["Tool execution started", "Tool processing data", "Tool execution completed"]):
            if i:
                await anyio.sleep(0.05)
            await log(message)
        content = [text("Tool with logging executed successfully")]
    elif name == "test_tool_with_progress":
        for step in (0, 50, 100):
            if step:
                await anyio.sleep(0.05)
            await session.report_progress(step, 100, f"Completed step {step} of 100")
        content = [text("Tool with progress executed successfully")]
    elif name == "test_error_handling":
        return {"content": [text("This tool intentionally returns an error for testing")], "isError": True}
    elif name == "test_sampling":
        request = {
            "messages": [{"role": "user", "content": text(args.get("prompt", ""))}],
            "maxTokens": 100,
        }
        r = await ask("fixture:sample", "sampling/createMessage", request, types.CreateMessageResult)
        reply = r.content.text if isinstance(r.content, types.TextContent) else str(r.content)
        content = [text(f"LLM response: {reply}")]
    elif name == "test_elicitation":
        content = await elicit(args.get("message", "Please provide your information"), USER_SCHEMA)
    elif name == "test_elicitation_sep1034_defaults":
        content = await elicit("Please review and update the form fields with defaults", DEFAULTS_SCHEMA)
    elif name == "test_elicitation_sep1330_enums":
        content = await elicit("Please select options from the enum fields", ENUMS_SCHEMA)
    else:
        return {"content": [text(f"Unknown tool: {name}")], "isError": True}
    return {"content": content}


RESOURCES = {
    "test://static-text": ("static-text", "text/plain", "text", "This is the content of the static text resource."),
    "test://static-binary": ("static-binary", "image/png", "blob", PNG),
    "test://watched-resource": ("watched-resource", "text/plain", "text", "Watched resource content"),
}
TEMPLATE_PREFIX, TEMPLATE_SUFFIX = "test://template/", "/data"


async def list_resources(ctx, params):
    return answer(ctx, {
        "resources": [
            {"uri": uri, "name": name, "description": f"Test resource {name}", "mimeType": mime}
            for uri, (name, mime, _, _) in RESOURCES.items()
        ]
    }, True)


async def list_resource_templates(ctx, params):
    template = {"uriTemplate": "test://template/{id}/data", "name": "template", "mimeType": "application/json"}
    return answer(ctx, {"resourceTemplates": [template]}, True)


async def read_resource(ctx, params: types.ReadResourceRequestParams):
    uri = str(params.uri)
    if uri in RESOURCES:
        _, mime, field, body = RESOURCES[uri]
        return answer(ctx, {"contents": [{"uri": uri, "mimeType": mime, field: body}]}, True)
    if uri.startswith(TEMPLATE_PREFIX) and uri.endswith(TEMPLATE_SUFFIX):
        id_ = uri[len(TEMPLATE_PREFIX) : -len(TEMPLATE_SUFFIX)]
        body = json.dumps({"id": id_, "templateTest": True, "data": f"Data for ID: {id_}"})
        return answer(ctx, {"contents": [{"uri": uri, "mimeType": "application/json", "text": body}]}, True)
    raise MCPError(code=-32002, message=f"Resource not found: {uri}", data={"uri": uri})


async def subscribe(ctx, params):
    return {}


PROMPTS = [
    {"name": "test_simple_prompt", "description": "A simple prompt without arguments"},
    {
        "name": "test_prompt_with_arguments",
        "description": "A prompt with required arguments",
        "arguments": [
            {"name": "arg1", "description": "First test argument", "required": True},
            {"name": "arg2", "description": "Second test argument", "required": True},
        ],
    },
    {
        "name": "test_prompt_with_embedded_resource",
        "description": "A prompt that includes an embedded resource",
        "arguments": [{"name": "resourceUri", "description": "URI of the resource to embed", "required": True}],
    },
    {"name": "test_prompt_with_image", "description": "A prompt that includes image content"},
]


async def list_prompts(ctx, params):
    return answer(ctx, {"prompts": PROMPTS}, True)


async def get_prompt(ctx, params: types.GetPromptRequestParams):
    args = params.arguments or {}
    if params.name == "test_simple_prompt":
        contents = [text("This is a simple prompt for testing.")]
    elif params.name == "test_prompt_with_arguments":
        contents = [text(f"Prompt with arguments: arg1='{args.get('arg1')}', arg2='{args.get('arg2')}'")]
    elif params.name == "test_prompt_with_embedded_resource":
        uri = args.get("resourceUri", "test://example-resource")
        contents = [
            embedded(uri, "text/plain", "Embedded resource content for testing."),
            text("Please process the embedded resource above."),
        ]
    elif params.name == "test_prompt_with_image":
        contents = [image(), text("Please analyze the image above.")]
    else:
        raise MCPError(code=-32602, message=f"Unknown prompt: {params.name}")
    return answer(ctx, {"messages": [{"role": "user", "content": c} for c in contents]})


async def complete(ctx, params: types.CompleteRequestParams):
    candidates = ["paris", "park", "party"] if params.argument.name == "arg1" else []
    values = [v for v in candidates if v.startswith(params.argument.value)]
    return answer(ctx, {"completion": {"values": values, "total": len(values), "hasMore": False}})


async def set_level(ctx, params: types.SetLevelRequestParams):
    return {}


def build_server() -> Server:
    server = Server(
        "mcp-conformance-fixture",
        version="1.0.0",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_resource_templates,
        on_read_resource=read_resource,
        on_subscribe_resource=subscribe,
        on_unsubscribe_resource=subscribe,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
        on_completion=complete,
        # 2026-07-28 list changes and resource subscriptions ride subscriptions/listen.
        on_subscriptions_listen=ListenHandler(InMemorySubscriptionBus()),
    )
    # Registered this way (not on_set_logging_level=) to avoid the SDK's deprecation warning;
    # its presence is what advertises the `logging` capability.
    server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, set_level)
    return server


def legacy_only(app):
    """Refuses 2026-07-28 requests (by their MCP-Protocol-Version header) with -32022."""

    async def wrapped(scope, receive, send):
        if scope["type"] == "http":
            version = dict(scope["headers"]).get(b"mcp-protocol-version", b"").decode("latin-1")
            if version == "2026-07-28":
                body = json.dumps({
                    "jsonrpc": "2.0", "id": None,
                    "error": {"code": -32022, "message": "Unsupported protocol version",
                              "data": {"supported": ["2025-11-25"], "requested": version}},
                }).encode()
                await send({"type": "http.response.start", "status": 400,
                            "headers": [(b"content-type", b"application/json")]})
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return wrapped


async def serve_stdio(server: Server) -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int)
    parser.add_argument("--stdio", action="store_true")
    parser.add_argument("--era", choices=["legacy", "both", "both-asking-2025"], default="legacy")
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args()
    global ASKING_2025
    ASKING_2025 = args.era == "both-asking-2025"
    if args.stdio:
        # The gateway opens every stdio module with `initialize`, so --era does not change
        # what it meets there: the SDK serves either era on one process.
        anyio.run(serve_stdio, build_server())
        return
    if args.port is None:
        parser.error("--port or --stdio is required")
    app = build_server().streamable_http_app(host=args.host)
    if args.era == "legacy":
        app = legacy_only(app)
    # uvicorn catches SIGTERM/SIGINT and shuts down (the short graceful timeout ends open SSE
    # streams), then re-raises the signal; these handlers turn that into exit status 0.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: sys.exit(0))
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level="warning", timeout_graceful_shutdown=1)
    uvicorn.Server(config).run()


if __name__ == "__main__":
    main()
