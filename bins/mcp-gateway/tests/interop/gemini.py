"""Gemini CLI (`@google/gemini-cli`, `-p` headless mode) through the gateway.

Usage: gemini.py GEMINI GATEWAY_BASE AGENT_TOKEN HUMAN_TOKEN PATH DECISION

Gemini CLI talks to a scripted Gemini API on loopback (GOOGLE_GEMINI_BASE_URL), which plays
the model: it asks for the read-only `fs__list_allowed_directories` (the gateway's, as Gemini
CLI names it: `mcp_gw_fs__list_allowed_directories`), then for `fs__write_file` with
{"path": PATH, "content": "written by gemini"}; when the tool result says the call is held,
this script, as the person, answers the confirmation over the gateway's REST API
(HUMAN_TOKEN) as DECISION says, `approve` or `decline` with a note, and the model asks for
the identical call again — it cannot set `_meta`, so it knows no confirmation id; then it
ends the turn. Gemini CLI connects with AGENT_TOKEN, which may call tools but not answer
confirmations, so the gateway never asks Gemini CLI itself. Its routing classifier and other
utility requests get plain answers; it needs no other network.

Prints one JSON line: the tools the model was offered, the tool results Gemini CLI sent
back, the answered id, and what Gemini CLI printed.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from agent_host import ScriptedModel, decision_answer, held_id, report, respond, serve

gemini, base, agent_token, human_token, path, decision = sys.argv[1:7]
arguments = {"path": path, "content": "written by gemini"}
tools = []
results = []
seen_calls = set()
approved = []
lock = threading.Lock()


def answer(eid):
    """The person answers the confirmation over the REST API, as DECISION says."""
    respond(base, human_token, eid, decision_answer(decision))
    approved.append(eid)


def function_responses(body):
    """The functionResponse parts of the last content, as (call id, tool name, text)."""
    contents = body.get("contents") or []
    if not contents:
        return []
    out = []
    for part in contents[-1].get("parts") or []:
        response = part.get("functionResponse")
        if not response:
            continue
        inner = response.get("response") or {}
        text = inner.get("output", inner.get("error", inner))
        out.append((response.get("id"), response.get("name", ""),
                    text if isinstance(text, str) else json.dumps(text)))
    return out


def from_schema(schema, name=""):
    """A plausible value for a JSON schema (the utility requests ask for JSON): the routing
    classifier hears the task is simple, the next-speaker check that the user speaks."""
    kind = str(schema.get("type", "object")).lower()
    if schema.get("enum"):
        return "user" if "user" in schema["enum"] else schema["enum"][0]
    if kind == "object":
        return {key: from_schema(value, key) for key, value in (schema.get("properties") or {}).items()}
    if kind == "array":
        return []
    if kind in ("integer", "number"):
        return 10
    if kind == "boolean":
        return False
    if name == "next_speaker":
        return "user"
    if name == "model_choice":
        return "flash"
    return "The request is simple."


def call(name, call_id, args):
    return {"functionCall": {"id": call_id, "name": name, "args": args}}


class Model(ScriptedModel):
    def do_GET(self):
        self.reply_json({})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
        config = body.get("generationConfig") or {}
        names = [d.get("name", "") for t in body.get("tools") or []
                 for d in t.get("functionDeclarations") or []]
        if os.environ.get("GEMINI_DEBUG_DUMP"):
            with open(os.environ["GEMINI_DEBUG_DUMP"], "a") as dump:
                dump.write(json.dumps({"path": self.path, "tools": names, "body": body}) + "\n")
        if ":countTokens" in self.path:
            self.reply_json({"totalTokens": 10})
            return
        listing = next((n for n in names if n.endswith("fs__list_allowed_directories")), None)
        write = next((n for n in names if n.endswith("fs__write_file")), None)
        if config.get("responseMimeType") == "application/json":
            # A utility request (routing classifier, next-speaker check): JSON text.
            schema = config.get("responseJsonSchema") or config.get("responseSchema") or {}
            parts = [{"text": json.dumps(from_schema(schema))}]
        elif not (listing and write):
            # Not the agent's turn (a summary, a title): plain text.
            parts = [{"text": "ok"}]
        else:
            with lock:
                parts = self.next_step(names, listing, write, function_responses(body))
        self.reply_content(parts)

    def next_step(self, names, listing, write, responses):
        """The scripted model: list, write, write again once the person answered, done."""
        if not responses:
            if not tools:
                tools.extend(names)
            return [call(listing, "call_1", {})]
        call_id, name, text = responses[-1]
        if call_id not in seen_calls:
            seen_calls.add(call_id)
            results.append(text)
        if name == listing:
            return [call(write, "call_2", arguments)]
        eid = held_id(text)
        if name == write and eid and not approved:
            answer(eid)
            return [call(write, "call_3", arguments)]
        return [{"text": "Done."}]

    def reply_content(self, parts):
        data = {"candidates": [{"content": {"role": "model", "parts": parts},
                                "finishReason": "STOP", "index": 0}],
                "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5,
                                  "totalTokenCount": 15},
                "modelVersion": "gemini-scripted"}
        if ":streamGenerateContent" in self.path:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.end_headers()
            self.wfile.write(f"data: {json.dumps(data)}\r\n\r\n".encode())
            self.wfile.flush()
        else:
            self.reply_json(data)



def main():
    server, model_url = serve(Model)
    home = tempfile.mkdtemp(prefix="mcp-gemini-")
    workdir = os.path.join(home, "work")
    os.makedirs(os.path.join(home, ".gemini"))
    os.makedirs(workdir)
    with open(os.path.join(home, ".gemini", "settings.json"), "w") as f:
        json.dump({
            "mcpServers": {"gw": {"httpUrl": f"{base}/mcp",
                                  "headers": {"Authorization": f"Bearer {agent_token}"},
                                  "trust": True}},
            "security": {"auth": {"selectedType": "gemini-api-key"}},
            "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            "ide": {"enabled": False},
        }, f)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": home,
        "GOOGLE_GEMINI_BASE_URL": model_url,
        "GEMINI_API_KEY": "scripted",
        # Headless in a folder it has never seen: trust it rather than refuse.
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
        "NO_COLOR": "1",
    }
    try:
        run = subprocess.run(
            [gemini, "-p", "Write the file.", "--yolo", "--output-format", "json"],
            env=env, cwd=workdir, capture_output=True, text=True, timeout=150,
        )
    finally:
        server.shutdown()
        shutil.rmtree(home, ignore_errors=True)
    report(run, tools=tools, results=results, approved=approved)


if __name__ == "__main__":
    main()
