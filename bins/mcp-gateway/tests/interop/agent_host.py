"""What the agent-host drivers (claude_code.py, codex.py, gemini.py) share: reading the
confirmation a held result names, however the host shows a tool result to its model, and
the person answering it over the gateway's REST API."""

import json
import urllib.request

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
