"""Codex CLI (`@openai/codex`, `codex exec` headless mode) through the gateway.

Usage: codex.py CODEX GATEWAY_BASE AGENT_TOKEN HUMAN_TOKEN PATH DECISION

Codex talks to a scripted Responses API on loopback (a `model_providers` entry in an
isolated CODEX_HOME, `wire_api = "responses"`), which plays the model. Codex offers the
gateway's tools as a namespace `mcp__gw` of functions named as the gateway lists them
(`fs__write_file`); this script records them as `mcp__gw__fs__write_file`. The model asks
for the read-only `fs__list_allowed_directories`, then for `fs__write_file` with
{"path": PATH, "content": "written by codex"}; when the tool output says the call is held,
this script, as the person, answers the confirmation over the gateway's REST API
(HUMAN_TOKEN) as DECISION says, `approve` or `decline` with a note, and the model asks
for the identical call again — it cannot set `_meta`, so it knows no confirmation id;
then it ends the turn. Codex connects with AGENT_TOKEN (no `elicitations:respond`), so
the gateway never asks Codex itself, and needs no other network.

Codex shows the model a tool result's structuredContent when it has one (not its text),
after a "Wall time: ...\nOutput:\n" header: the held result is the `elicitation_required`
object, a declined re-call `{"user_rejected": true, "message": ..., "note": ...}`.

Prints one JSON line: the gateway tools Codex offered, the tool outputs Codex sent back,
the answered id, and what Codex printed.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from agent_host import ScriptedModel, decision_answer, held_id, report, respond, serve

codex, base, agent_token, human_token, path, decision = sys.argv[1:7]
assert decision in ("approve", "decline"), decision
NAMESPACE = "mcp__gw"
arguments = {"path": path, "content": "written by codex"}
tools = []
results = []
approved = []
answered = {}  # call_id of a tool output already seen -> the model's answer to it
lock = threading.Lock()


def gateway_tools(body):
    """The gateway's tools in the request, as `mcp__gw__<tool>`: Codex sends them as a
    `namespace` tool named `mcp__gw` (older versions: flat functions `mcp__gw__<tool>`)."""
    names = []
    for tool in body.get("tools") or []:
        if tool.get("type") == "namespace" and tool.get("name") == NAMESPACE:
            names += [f"{NAMESPACE}__{inner.get('name')}" for inner in tool.get("tools") or []]
        elif str(tool.get("name", "")).startswith(NAMESPACE + "__"):
            names.append(tool["name"])
    return names


def output_text(output):
    """A function_call_output's output as text (a string, or a list of content items)."""
    if isinstance(output, list):
        return " ".join(str(item.get("text", "")) for item in output if isinstance(item, dict))
    if isinstance(output, dict):
        return str(output.get("content", output))
    return str(output)


def last_output(body):
    """The last function_call_output in the request input: (call_id, text), or None."""
    found = None
    for item in body.get("input") or []:
        if isinstance(item, dict) and item.get("type") == "function_call_output":
            found = (item.get("call_id"), output_text(item.get("output")))
    return found


def answer(eid):
    """The person answers the confirmation over the REST API, as DECISION says."""
    respond(base, human_token, eid, decision_answer(decision))
    approved.append(eid)


def call(call_id, name, args):
    """A function_call output item for the gateway's tool `name`, in Codex's namespace."""
    return {"type": "function_call", "id": f"fc_{call_id}", "call_id": call_id,
            "namespace": NAMESPACE, "name": name, "arguments": json.dumps(args),
            "status": "completed"}


def message(text):
    return {"type": "message", "id": "msg_scripted", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def model_turn(body):
    """What the model answers to this request: one output item."""
    if not gateway_tools(body):
        # Not the agent's turn (a title, a summary): plain text.
        return message("ok")
    with lock:
        if not tools:
            tools.extend(gateway_tools(body))
        seen = last_output(body)
        if seen is None:
            return call("call_1", "fs__list_allowed_directories", {})
        call_id, text = seen
        if call_id in answered:
            # The same request again (a retry): the same answer, recorded once.
            return answered[call_id]
        results.append(text)
        if call_id == "call_1":
            item = call("call_2", "fs__write_file", arguments)
        elif call_id == "call_2" and held_id(text) and not approved:
            answer(held_id(text))
            item = call("call_3", "fs__write_file", arguments)
        else:
            item = message("Done.")
        answered[call_id] = item
        return item


def events(item):
    """A streamed Responses API answer with this one output item."""
    response = {"id": "resp_scripted", "object": "response", "status": "in_progress",
                "model": "scripted", "output": []}
    yield {"type": "response.created", "response": response}
    added = dict(item, status="in_progress")
    if item["type"] == "message":
        added["content"] = []
    elif item["type"] == "function_call":
        added["arguments"] = ""
    yield {"type": "response.output_item.added", "output_index": 0, "item": added}
    if item["type"] == "message":
        yield {"type": "response.output_text.delta", "item_id": item["id"], "output_index": 0,
               "content_index": 0, "delta": item["content"][0]["text"]}
    yield {"type": "response.output_item.done", "output_index": 0, "item": item}
    yield {"type": "response.completed", "response": dict(
        response, status="completed", output=[item],
        usage={"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
               "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
               "total_tokens": 15})}


class Model(ScriptedModel):
    def do_GET(self):
        # Nothing else of the API is offered (a models list, for one).
        self.send_response(404)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
        if os.environ.get("CODEX_DEBUG_DUMP"):
            with open(os.environ["CODEX_DEBUG_DUMP"], "a") as dump:
                dump.write(json.dumps({"path": self.path, "body": body}) + "\n")
        if not self.path.endswith("/responses"):
            self.do_GET()
            return
        item = model_turn(body)
        data = "".join(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n"
                       for event in events(item)).encode()
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()


def main():
    server, model_url = serve(Model)
    home = tempfile.mkdtemp(prefix="mcp-codex-")
    codex_home = os.path.join(home, ".codex")
    os.makedirs(codex_home)
    with open(os.path.join(codex_home, "config.toml"), "w") as f:
        f.write(f"""\
model = "scripted"
model_provider = "scripted"
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false

[analytics]
enabled = false

[feedback]
enabled = false

# The plugin marketplace (a git clone from github.com, api.github.com, chatgpt.com) and
# the connector apps are the only network Codex wants besides the model and the gateway.
[features]
plugins = false
remote_plugin = false
apps = false

[model_providers.scripted]
name = "scripted"
base_url = "{model_url}/v1"
wire_api = "responses"
env_key = "SCRIPTED_API_KEY"
request_max_retries = 0
stream_max_retries = 0

[mcp_servers.gw]
url = {json.dumps(base + "/mcp")}
bearer_token_env_var = "GW_AGENT_TOKEN"
default_tools_approval_mode = "approve"
""")
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": home,
        "CODEX_HOME": codex_home,
        "SCRIPTED_API_KEY": "sk-scripted",
        "GW_AGENT_TOKEN": agent_token,
        "NO_COLOR": "1",
    }
    run = subprocess.run(
        [codex, "exec", "--skip-git-repo-check", "--ephemeral",
         "--dangerously-bypass-approvals-and-sandbox", "--color", "never", "Write the file."],
        env=env, cwd=home, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=150,
    )
    server.shutdown()
    shutil.rmtree(home, ignore_errors=True)
    report(run, tools=tools, results=results, approved=approved)


if __name__ == "__main__":
    main()
