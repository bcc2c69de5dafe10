"""Claude Code (`@anthropic-ai/claude-code`, `-p` headless mode) through the gateway.

Usage: claude_code.py CLAUDE GATEWAY_BASE AGENT_TOKEN HUMAN_TOKEN TOOL PATH [PROMPT_TOOL DECISION]

Claude Code talks to a scripted Messages API on loopback (ANTHROPIC_BASE_URL), which plays
the model: it asks for TOOL (the gateway's, as Claude Code names it: `mcp__gw__<tool>`)
with {"path": PATH, "content": ...}; when the tool result says the call is held, this
script, as the person, approves the confirmation over the gateway's REST API (HUMAN_TOKEN)
and the model asks for the identical call again — it cannot set `_meta`, so it knows no
confirmation id; then it ends the turn. Claude Code needs no other network.

With PROMPT_TOOL (the gateway's permission-prompt tool as Claude Code names it,
`mcp__gw__claude__approve`) the model asks for Claude Code's own Bash tool instead, running
`printf` into PATH; Claude Code asks the gateway through `--permission-prompt-tool`, and
this script, as the person, finds the held `claude__Bash` confirmation over the REST API
and answers it as DECISION says: `approve`, `edit` (approve with the command changed), or
`decline` with a note.

Prints one JSON line: the tool results Claude Code sent back, the approved id, and what
Claude Code printed.
"""

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from agent_host import (ScriptedModel, answer_messages, claude_home, held_id, report, respond,
                        serve, tool_results)

claude, base, agent_token, human_token, tool, path = sys.argv[1:7]
prompt_tool, decision = (sys.argv[7:9] + [None, None])[:2]
# "approve-after-12": the person takes 12 s to answer (longer than every internal timeout).
delay = 0
if decision and decision.startswith("approve-after-"):
    delay, decision = int(decision.rsplit("-", 1)[1]), "approve"
arguments = {"path": path, "content": "written by claude code"}
if prompt_tool:
    # Claude Code's own shell, asked about through the permission prompt.
    tool, arguments = "Bash", {"command": f"printf 'run by claude code' > {path}",
                               "description": "Write the file"}
results = []
approved = []
asked = []


def approve(eid):
    """The person answers the confirmation over the REST API: approves it, or with
    `decline` declines it with a note."""
    if decision == "decline":
        answer = {"confirmed": False, "note": "not on this machine"}
    elif decision == "edit":
        # The person approves other content than the model asked for.
        answer = {"confirmed": True, "arguments": dict(arguments, content="edited by a person")}
    else:
        answer = {"confirmed": True}
    respond(base, human_token, eid, answer)
    approved.append(eid)


def person_answers():
    """The person, on the REST API: waits for the held `claude__Bash` and answers it."""
    deadline = time.time() + 90
    while time.time() < deadline:
        request = urllib.request.Request(f"{base}/v1/mcp/elicitations?status=pending",
                                         headers={"authorization": f"Bearer {human_token}"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            listed = json.loads(answer.read())
        for item in listed.get("elicitations", []):
            if (item.get("tool_name") or item.get("tool")) == "claude__Bash":
                asked.append(item)
                time.sleep(delay)
                if decision == "approve":
                    body = {"confirmed": True}
                elif decision == "edit":
                    # The person approves a different command than the model asked for.
                    edited = dict(item["arguments"])
                    edited["command"] = edited["command"].replace("run by claude code",
                                                                  "edited by a person")
                    body = {"confirmed": True, "arguments": edited}
                else:
                    body = {"confirmed": False, "note": "not on this machine"}
                respond(base, human_token, item["id"], body)
                approved.append(item["id"])
                return
        time.sleep(0.2)


class Model(ScriptedModel):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
        if not self.path.startswith("/v1/messages") or self.path.startswith("/v1/messages/count_tokens"):
            self.reply_json({"input_tokens": 10})
            return
        names = [t.get("name", "") for t in body.get("tools") or []]
        if os.environ.get("CLAUDE_CODE_DEBUG_DUMP"):
            with open(os.environ["CLAUDE_CODE_DEBUG_DUMP"], "a") as dump:
                dump.write(json.dumps({"path": self.path, "tools": names, "n": len(body.get("messages") or [])}) + "\n")
        wanted = next((n for n in names if n == tool or n.endswith("__" + tool)), None)
        seen = tool_results(body)
        if wanted is None:
            # Not the agent's turn (a title, a summary): plain text.
            blocks, stop = [{"type": "text", "text": "ok"}], "end_turn"
        elif not seen:
            blocks, stop = [{"type": "tool_use", "id": "toolu_1", "name": wanted, "input": arguments}], "tool_use"
        else:
            results.append(seen[-1])
            eid = None if prompt_tool else held_id(seen[-1])
            if eid and not approved:
                approve(eid)
                blocks, stop = [{"type": "tool_use", "id": "toolu_2", "name": wanted, "input": arguments}], "tool_use"
            else:
                blocks, stop = [{"type": "text", "text": "Done."}], "end_turn"
        answer_messages(self, body, blocks, stop)



def main():
    server, model_url = serve(Model)
    home, config, env = claude_home(base, agent_token, model_url)
    if prompt_tool:
        # Bash is not allowed up front: Claude Code asks the gateway's tool about it.
        permissions = ["--permission-prompt-tool", prompt_tool]
        threading.Thread(target=person_answers, daemon=True).start()
    else:
        permissions = ["--allowedTools", f"mcp__gw__{tool}"]
    run = subprocess.run(
        [claude, "-p", "Write the file.", "--mcp-config", config, "--strict-mcp-config",
         *permissions, "--output-format", "json", "--max-turns", "6"],
        env=env, cwd=home, capture_output=True, text=True, timeout=150,
    )
    server.shutdown()
    report(run, results=results, approved=approved, asked=asked)


if __name__ == "__main__":
    main()
