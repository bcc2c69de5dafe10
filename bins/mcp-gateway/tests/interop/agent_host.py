"""What the agent-host drivers (claude_code.py, codex.py, gemini.py) share: reading the
confirmation a held result names, however the host shows a tool result to its model, and
the person answering it over the gateway's REST API."""

import json
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
