"""The conformance suite's server scenarios, as a 2026-07-28 client runs them.

`@modelcontextprotocol/conformance` 0.1.16 is a 2025-11-25 client only, so the 2026-07-28
column of `cargo xtask conformance`'s matrix runs this driver instead: the official Python
SDK's `Client` (it negotiates 2026-07-28 with a dual-era server by `server/discover`),
with the suite's own checks for each scenario that exists at 2026-07-28, and the suite's
canned answers (elicitation: accept with content; sampling: a text reply).

Scenarios of the suite that 2026-07-28 removed are reported as not applicable, with why:
`server-initialize` (no handshake: `server-discover` instead), `ping`, `logging-set-level`
(the level rides each request's `_meta`: `tools-call-with-logging` sets it there),
`server-sse-multiple-streams` (no sessions), `resources-subscribe` / `-unsubscribe` (no
such methods: `resources-listen` subscribes on a `subscriptions/listen` stream instead).

Usage: python modern_client.py --url http://127.0.0.1:PORT/mcp
Prints one line a scenario (`✓ name: …`, `✗ name: …`, `- name: not applicable: …`), then
`Total: N passed, M failed`; exits 1 when any scenario failed.
"""

import argparse
import http.client
import json
import sys
import traceback
import urllib.parse

import anyio

import mcp.types as types
from mcp import Client

MODERN = "2026-07-28"

NOT_APPLICABLE = {
    "server-initialize": "2026-07-28 has no initialize handshake (server-discover runs instead)",
    "ping": "ping was removed in 2026-07-28",
    "logging-set-level": "logging/setLevel was removed in 2026-07-28 (the level rides each request's _meta)",
    "server-sse-multiple-streams": "2026-07-28 has no sessions and no standalone streams",
    "resources-subscribe": "resources/subscribe was removed in 2026-07-28 (resources-listen instead)",
    "resources-unsubscribe": "resources/unsubscribe was removed in 2026-07-28 (resources-listen instead)",
}

USER_FIELDS = {"username", "email"}


class Failed(Exception):
    pass


def check(condition: bool, message: str) -> None:
    if not condition:
        raise Failed(message)


def texts(result) -> list[str]:
    return [c.text for c in result.content if isinstance(c, types.TextContent)]


class Seen:
    """What the client's callbacks saw during one scenario."""

    def __init__(self) -> None:
        self.elicitations: list[types.ElicitRequestParams] = []
        self.samplings: list[types.CreateMessageRequestParams] = []
        self.logs: list[types.LoggingMessageNotificationParams] = []
        self.progress: list[float] = []


def client(url: str, seen: Seen, **options) -> Client:
    async def on_elicit(ctx, params):
        seen.elicitations.append(params)
        return types.ElicitResult(action="accept", content={"username": "testuser", "email": "test@example.com"})

    async def on_sample(ctx, params):
        seen.samplings.append(params)
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text="This is a test response from the client"),
            model="test-model",
            stop_reason="endTurn",
        )

    async def on_log(params):
        seen.logs.append(params)

    return Client(
        url,
        elicitation_callback=on_elicit,
        sampling_callback=on_sample,
        logging_callback=on_log,
        client_info=types.Implementation(name="conformance-modern-client", version="1.0.0"),
        cache=None,
        **options,
    )


async def server_discover(c: Client, seen: Seen) -> str:
    check(c.protocol_version == MODERN, f"negotiated {c.protocol_version!r}, not {MODERN}")
    return f"negotiated {c.protocol_version}"


async def tools_list(c: Client, seen: Seen) -> str:
    tools = (await c.list_tools()).tools
    check(tools, "no tools listed")
    for tool in tools:
        check(bool(tool.name and tool.description and tool.input_schema), f"tool {tool.name!r} lacks name, description or inputSchema")
    return f"{len(tools)} tools"


def content_call(name: str, kinds: set[str], **extra):
    async def scenario(c: Client, seen: Seen) -> str:
        result = await c.call_tool(name, {})
        check(not result.is_error, f"{name} answered an error: {texts(result)}")
        got = {item.type for item in result.content}
        check(kinds <= got, f"{name} returned {sorted(got)}, wanted {sorted(kinds)}")
        for item in result.content:
            if item.type == "audio":
                check(item.mime_type == "audio/wav", f"audio mimeType {item.mime_type!r}")
            if item.type == "image":
                check(bool(item.data and item.mime_type), "image without data or mimeType")
            if item.type == "resource":
                check(bool(str(item.resource.uri)), "embedded resource without uri")
        return ", ".join(sorted(got))

    return scenario


async def tools_call_error(c: Client, seen: Seen) -> str:
    result = await c.call_tool("test_error_handling", {})
    check(result.is_error is True, "isError is not true")
    check(texts(result), "no error text")
    return "isError true"


async def tools_call_with_logging(c: Client, seen: Seen) -> str:
    result = await c.call_tool("test_tool_with_logging", {}, meta={"io.modelcontextprotocol/logLevel": "debug"})
    check(not result.is_error, f"error: {texts(result)}")
    check(len(seen.logs) >= 3, f"{len(seen.logs)} log messages during the call, wanted at least 3")
    return f"{len(seen.logs)} log messages"


async def tools_call_with_progress(c: Client, seen: Seen) -> str:
    async def on_progress(progress, total, message):
        seen.progress.append(progress)

    result = await c.call_tool("test_tool_with_progress", {}, progress_callback=on_progress)
    check(not result.is_error, f"error: {texts(result)}")
    check(len(seen.progress) >= 3, f"{len(seen.progress)} progress notifications, wanted at least 3")
    check(seen.progress == sorted(seen.progress), f"progress decreased: {seen.progress}")
    return f"progress {seen.progress}"


async def tools_call_sampling(c: Client, seen: Seen) -> str:
    result = await c.call_tool("test_sampling", {"prompt": "Test prompt for sampling"})
    check(len(seen.samplings) == 1, f"{len(seen.samplings)} sampling requests")
    asked = seen.samplings[0]
    check(bool(asked.messages) and asked.max_tokens > 0, "sampling request without messages or maxTokens")
    check(any("LLM response" in t for t in texts(result)), f"result {texts(result)}")
    return "sampled by input_required"


async def tools_call_elicitation(c: Client, seen: Seen) -> str:
    result = await c.call_tool("test_elicitation", {"message": "Please provide your information"})
    check(len(seen.elicitations) == 1, f"{len(seen.elicitations)} elicitations")
    schema = seen.elicitations[0].requested_schema
    check(USER_FIELDS <= set(schema.get("properties", {})), f"schema {schema}")
    check(any("action=accept" in t for t in texts(result)), f"result {texts(result)}")
    return "elicited by input_required"


async def elicitation_defaults(c: Client, seen: Seen) -> str:
    await c.call_tool("test_elicitation_sep1034_defaults", {})
    check(len(seen.elicitations) == 1, f"{len(seen.elicitations)} elicitations")
    props = seen.elicitations[0].requested_schema["properties"]
    wanted = {"name": "John Doe", "age": 30, "score": 95.5, "status": "active", "verified": True}
    for key, default in wanted.items():
        check(props.get(key, {}).get("default") == default, f"{key} default {props.get(key)}")
    check(props["status"].get("enum") == ["active", "inactive", "pending"], f"status {props['status']}")
    return "5 defaults"


async def elicitation_enums(c: Client, seen: Seen) -> str:
    await c.call_tool("test_elicitation_sep1330_enums", {})
    check(len(seen.elicitations) == 1, f"{len(seen.elicitations)} elicitations")
    props = seen.elicitations[0].requested_schema["properties"]
    check("enum" in props["untitledSingle"], "untitledSingle")
    check("oneOf" in props["titledSingle"] and "enum" not in props["titledSingle"], "titledSingle")
    legacy = props["legacyEnum"]
    check(len(legacy.get("enum", [])) == len(legacy.get("enumNames", [])) > 0, "legacyEnum")
    check("enum" in props["untitledMulti"].get("items", {}), "untitledMulti")
    check("anyOf" in props["titledMulti"].get("items", {}), "titledMulti")
    check(list(props) == ["untitledSingle", "titledSingle", "legacyEnum", "untitledMulti", "titledMulti"],
          f"the form's fields reached the client in another order: {list(props)}")
    return "5 enum forms"


async def resources_list(c: Client, seen: Seen) -> str:
    resources = (await c.list_resources()).resources
    for r in resources:
        check(bool(str(r.uri) and r.name), f"resource {r}")
    return f"{len(resources)} resources"


async def resources_read_text(c: Client, seen: Seen) -> str:
    contents = (await c.read_resource("test://static-text")).contents
    check(len(contents) == 1 and getattr(contents[0], "text", None), f"contents {contents}")
    return "text"


async def resources_read_binary(c: Client, seen: Seen) -> str:
    contents = (await c.read_resource("test://static-binary")).contents
    check(len(contents) == 1 and getattr(contents[0], "blob", None), f"contents {contents}")
    return "blob"


async def resources_templates_read(c: Client, seen: Seen) -> str:
    templates = (await c.list_resource_templates()).resource_templates
    check(any(t.uri_template == "test://template/{id}/data" for t in templates), f"templates {templates}")
    contents = (await c.read_resource("test://template/123/data")).contents
    check("123" in getattr(contents[0], "text", ""), f"contents {contents}")
    return "substituted"


async def resources_listen(c: Client, seen: Seen) -> str:
    async with c.listen(resources_list_changed=True, resource_subscriptions=["test://watched-resource"]) as sub:
        honoured = list(sub.honored.resource_subscriptions or [])
    check(honoured == ["test://watched-resource"], f"honoured {honoured}")
    return "subscribed on subscriptions/listen"


async def prompts_list(c: Client, seen: Seen) -> str:
    prompts = (await c.list_prompts()).prompts
    for p in prompts:
        check(bool(p.name and p.description), f"prompt {p}")
    return f"{len(prompts)} prompts"


def prompt(name: str, args: dict | None, want):
    async def scenario(c: Client, seen: Seen) -> str:
        result = await c.get_prompt(name, args)
        check(result.messages, "no messages")
        want(result)
        return f"{len(result.messages)} messages"

    return scenario


def prompt_with_args(result) -> None:
    body = " ".join(m.content.text for m in result.messages if isinstance(m.content, types.TextContent))
    check("testValue1" in body and "testValue2" in body, f"text {body!r}")


def prompt_with(kind: str):
    def want(result) -> None:
        check(any(m.content.type == kind for m in result.messages), f"no {kind} message")

    return want


async def completion_complete(c: Client, seen: Seen) -> str:
    result = await c.complete(
        types.PromptReference(type="ref/prompt", name="test_prompt_with_arguments"),
        {"name": "arg1", "value": "par"},
    )
    check(isinstance(result.completion.values, list), "no completion values")
    return f"{len(result.completion.values)} values"


def dns_rebinding(url: str) -> str:
    target = urllib.parse.urlsplit(url)
    body = json.dumps({
        "jsonrpc": "2.0", "id": 1, "method": "server/discover",
        "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": MODERN,
                             "io.modelcontextprotocol/clientCapabilities": {}}},
    })

    def post(host: str, origin: str) -> int:
        conn = http.client.HTTPConnection(target.hostname, target.port, timeout=10)
        conn.request("POST", target.path, body, {
            "Host": host, "Origin": origin, "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": MODERN,
            "Mcp-Method": "server/discover",
        })
        status = conn.getresponse().status
        conn.close()
        return status

    evil = post("evil.example.com", "http://evil.example.com")
    check(400 <= evil < 500, f"a foreign Host and Origin got {evil}")
    local = post(target.netloc, f"http://{target.netloc}")
    check(200 <= local < 300, f"the real Host and Origin got {local}")
    return f"foreign {evil}, local {local}"


SCENARIOS = [
    ("server-discover", server_discover),
    ("completion-complete", completion_complete),
    ("tools-list", tools_list),
    ("tools-call-simple-text", content_call("test_simple_text", {"text"})),
    ("tools-call-image", content_call("test_image_content", {"image"})),
    ("tools-call-audio", content_call("test_audio_content", {"audio"})),
    ("tools-call-embedded-resource", content_call("test_embedded_resource", {"resource"})),
    ("tools-call-mixed-content", content_call("test_multiple_content_types", {"text", "image", "resource"})),
    ("tools-call-with-logging", tools_call_with_logging),
    ("tools-call-error", tools_call_error),
    ("tools-call-with-progress", tools_call_with_progress),
    ("tools-call-sampling", tools_call_sampling),
    ("tools-call-elicitation", tools_call_elicitation),
    ("elicitation-sep1034-defaults", elicitation_defaults),
    ("elicitation-sep1330-enums", elicitation_enums),
    ("resources-list", resources_list),
    ("resources-read-text", resources_read_text),
    ("resources-read-binary", resources_read_binary),
    ("resources-templates-read", resources_templates_read),
    ("resources-listen", resources_listen),
    ("prompts-list", prompts_list),
    ("prompts-get-simple", prompt("test_simple_prompt", None, lambda r: None)),
    ("prompts-get-with-args", prompt("test_prompt_with_arguments", {"arg1": "testValue1", "arg2": "testValue2"}, prompt_with_args)),
    ("prompts-get-embedded-resource", prompt("test_prompt_with_embedded_resource", {"resourceUri": "test://example-resource"}, prompt_with("resource"))),
    ("prompts-get-with-image", prompt("test_prompt_with_image", None, prompt_with("image"))),
]


async def run(url: str) -> int:
    passed = failed = 0
    for name, scenario in SCENARIOS:
        seen = Seen()
        try:
            # A new connection per scenario, as the suite makes.
            with anyio.fail_after(30):
                async with client(url, seen) as c:
                    detail = await scenario(c, seen)
            print(f"✓ {name}: {detail}")
            passed += 1
        except Exception as error:  # a scenario's failure is reported, the next one runs
            print(f"✗ {name}: {type(error).__name__}: {error}")
            if not isinstance(error, Failed):
                traceback.print_exc(file=sys.stderr)
            failed += 1
    try:
        print(f"✓ dns-rebinding-protection: {dns_rebinding(url)}")
        passed += 1
    except Exception as error:
        print(f"✗ dns-rebinding-protection: {error}")
        failed += 1
    for name, why in NOT_APPLICABLE.items():
        print(f"- {name}: not applicable: {why}")
    print(f"Total: {passed} passed, {failed} failed")
    return 1 if failed else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    args = parser.parse_args()
    sys.exit(anyio.run(run, args.url))


if __name__ == "__main__":
    main()
