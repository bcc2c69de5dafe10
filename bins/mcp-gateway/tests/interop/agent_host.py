"""What the agent-host drivers (claude_code.py, claude_trifecta.py, codex.py, gemini.py)
share: reading the confirmation a held result names, however the host shows a tool result to
its model, the person answering it over the gateway's REST API, and the Messages API's
streamed answer and tool results (Claude Code's)."""

import atexit
import json
import os
import shutil
import tempfile
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MARKER = "approve confirmation "


def held_id(text):
    """The confirmation a held result names, or None for any other result. The host shows
    the model the result's structured content (Claude Code, Codex: after a "Wall time: ...
    Output:" header) or its text (Gemini CLI: inside `<untrusted_context>`)."""
    inner = text.split("Output:\n", 1)[-1].strip()
    if inner.startswith("<untrusted_context>"):
        inner = inner[len("<untrusted_context>"):].rsplit("</untrusted_context>", 1)[0]
    try:
        held = json.loads(inner)
        if isinstance(held, dict) and held.get("elicitation_required"):
            return held["elicitation"]["id"]
    except (ValueError, KeyError, TypeError):
        pass
    if MARKER in text:
        start = text.index(MARKER) + len(MARKER)
        return text[start:start + 36]
    return None


def respond(base, human_token, eid, answer):
    """The person posts `answer` ({"confirmed": ..., "note"?, "arguments"?}) for
    confirmation `eid` over the REST API."""
    request = urllib.request.Request(
        f"{base}/v1/mcp/elicitations/{eid}/respond",
        data=json.dumps(answer).encode(),
        headers={"authorization": f"Bearer {human_token}", "content-type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as done:
        assert done.status == 200, done.status


def decision_answer(decision):
    """What the person answers for `approve` or `decline` (with a note)."""
    if decision == "decline":
        return {"confirmed": False, "note": "not on this machine"}
    return {"confirmed": True}


class ScriptedModel(BaseHTTPRequestHandler):
    """A scripted model API's request handler: quiet, and able to answer JSON."""

    def log_message(self, *args):
        pass

    def reply_json(self, value):
        data = json.dumps(value).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def serve(handler):
    """The scripted model on a free loopback port: the server and its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def report(run, **seen):
    """The one JSON line a driver prints: what it saw, and how the host ended."""
    print(json.dumps(dict(seen, exit=run.returncode,
                          stdout=run.stdout[-2000:], stderr=run.stderr[-2000:])))


def tool_results(body):
    """The tool_result blocks of the last user message, as text."""
    messages = body.get("messages") or []
    if not messages or messages[-1].get("role") != "user":
        return []
    content = messages[-1].get("content")
    if not isinstance(content, list):
        return []
    out = []
    for block in content:
        if block.get("type") != "tool_result":
            continue
        inner = block.get("content")
        if isinstance(inner, list):
            inner = " ".join(b.get("text", "") for b in inner if isinstance(b, dict))
        out.append(str(inner))
    return out


def events(blocks, stop_reason):
    """A streamed Messages API answer with these content blocks."""
    yield "message_start", {"type": "message_start", "message": {
        "id": "msg_scripted", "type": "message", "role": "assistant", "model": "claude-scripted",
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 1}}}
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            yield "content_block_start", {"type": "content_block_start", "index": index,
                                          "content_block": {"type": "text", "text": ""}}
            yield "content_block_delta", {"type": "content_block_delta", "index": index,
                                          "delta": {"type": "text_delta", "text": block["text"]}}
        else:
            yield "content_block_start", {"type": "content_block_start", "index": index,
                                          "content_block": {"type": "tool_use", "id": block["id"],
                                                            "name": block["name"], "input": {}}}
            yield "content_block_delta", {"type": "content_block_delta", "index": index,
                                          "delta": {"type": "input_json_delta",
                                                    "partial_json": json.dumps(block["input"])}}
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    yield "message_delta", {"type": "message_delta",
                            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                            "usage": {"output_tokens": 5}}
    yield "message_stop", {"type": "message_stop"}


def answer_messages(handler, body, blocks, stop):
    """`handler`'s answer to a Messages API request `body`: `blocks`, streamed when it asked."""
    if body.get("stream"):
        handler.send_response(200)
        handler.send_header("content-type", "text/event-stream")
        handler.end_headers()
        for name, data in events(blocks, stop):
            handler.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
        handler.wfile.flush()
    else:
        handler.reply_json({"id": "msg_scripted", "type": "message", "role": "assistant",
                            "model": "claude-scripted", "content": blocks, "stop_reason": stop,
                            "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 5}})


def claude_home(base, token, model_url):
    """A fresh home for Claude Code with the gateway as its one MCP server (`token`), and the
    environment that points it at the scripted model on `model_url`: (home, config, env)."""
    home = tempfile.mkdtemp(prefix="mcp-claude-code-")
    # Gone when the script ends, however it ends short of being killed.
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    config = os.path.join(home, "mcp.json")
    with open(config, "w") as f:
        json.dump({"mcpServers": {"gw": {"type": "http", "url": f"{base}/mcp",
                                          "headers": {"Authorization": f"Bearer {token}"}}}}, f)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": home,
        "ANTHROPIC_BASE_URL": model_url,
        "ANTHROPIC_API_KEY": "sk-scripted",
        "DISABLE_TELEMETRY": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        # MCP tools in the request itself, not deferred behind ToolSearch.
        "ENABLE_TOOL_SEARCH": "false",
    }
    return home, config, env
