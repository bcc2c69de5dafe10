#!/usr/bin/env python3
"""The approvals page in a real browser: headless Chromium (Debian's), driven by Playwright.

usage: approvals_browser.py BASE_URL HUMAN_TOKEN AGENT_TOKEN SANDBOX SCREENSHOT SERVICE_TOKEN

The agent (plain HTTP, 2026-07-28 requests) calls fs__write_file; the person signs in on the
page, sees the held call appear without reloading, approves one call and declines another;
hostile arguments must stay inert text; a cross-site form post must be refused; sign-out must
end the session. Prints one JSON line of what happened; exits non-zero on anything else.
"""
import asyncio
import hashlib
import json
import os
import queue
import sys
import threading
import urllib.request

import mcp.types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from playwright.sync_api import sync_playwright

BASE, HUMAN, AGENT, SANDBOX, SHOT, SERVICE = sys.argv[1:7]
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def agent_call(path, content, confirmation=None):
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}
    if confirmation:
        meta["confirmation_id"] = confirmation
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "fs__write_file", "arguments": {"path": path, "content": content}, "_meta": meta}}
    request = urllib.request.Request(BASE + "/mcp", data=json.dumps(body).encode(), method="POST", headers={
        "authorization": "Bearer " + AGENT, "content-type": "application/json",
        "accept": "application/json, text/event-stream", "mcp-protocol-version": "2026-07-28",
        "mcp-method": "tools/call", "mcp-name": "fs__write_file"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())["result"]


def service(method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(BASE + path, data=data, method=method, headers={
        "authorization": "Bearer " + SERVICE, "content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        raw = response.read()
        return json.loads(raw) if response.headers.get("content-type", "").startswith("application/json") else raw


def agent_tool(name):
    """A 2025-era request of the agent's for a tool without arguments (its client cannot elicit)."""
    body = {"jsonrpc": "2.0", "id": 9, "method": "tools/call",
            "params": {"name": name, "arguments": {}, "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {}}}}
    request = urllib.request.Request(BASE + "/mcp", data=json.dumps(body).encode(), method="POST", headers={
        "authorization": "Bearer " + AGENT, "content-type": "application/json",
        "accept": "application/json", "mcp-protocol-version": "2026-07-28",
        "mcp-method": "tools/call", "mcp-name": name})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())["result"]


def held_id(result):
    return result["structuredContent"]["elicitation"]["id"]


def step(what):
    """Progress on stderr: a run that stalls shows where."""
    print(f"browser: {what}", file=sys.stderr, flush=True)


def url_mode_call(path, urls):
    """A session client of the official Python SDK whose token may not answer: the gateway
    sends it the page's URL (URL mode); it hands the URL to the person and waits."""
    async def run():
        async def on_elicit(ctx, params):
            url = getattr(params, "url", None)
            if not url:
                return types.ElicitResult(action="cancel")
            urls.put(url)
            return types.ElicitResult(action="accept")

        http = create_mcp_http_client(headers={"Authorization": f"Bearer {AGENT}"})
        transport = streamable_http_client(BASE + "/mcp", http_client=http)
        async with Client(transport, mode="legacy", elicitation_callback=on_elicit) as client:
            result = await client.call_tool("fs__write_file", {"path": path, "content": "via url mode"})
            return {"is_error": bool(result.is_error), "structured": result.structured_content,
                    "text": [c.text for c in result.content if getattr(c, "type", "") == "text"]}
    return asyncio.run(run())


def main():
    out = {}
    dialogs = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        context = browser.new_context()
        # A background tab whose person allowed notifications: what the page would show is
        # recorded (document.hidden and Notification as the browser would give them).
        context.add_init_script("""
            window.__notes = [];
            Object.defineProperty(document, "hidden", { get: function () { return true; } });
            window.Notification = function (title, options) {
                window.__notes.push({ title: title, body: options && options.body });
            };
            window.Notification.permission = "granted";
            window.Notification.requestPermission = function () { return Promise.resolve("granted"); };
        """)
        page = context.new_page()
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(BASE + "/approvals")
        page.fill("#token", HUMAN)
        page.click("text=Sign in")
        page.wait_for_selector("text=Waiting for you (0)")
        out["signed_in"] = True
        step("signed in")

        # A held call appears without a reload.
        hostile = "<script>alert(1)</script><img src=x onerror=alert(2)> \u202eevil"
        target = SANDBOX + "/approved.txt"
        first = held_id(agent_call(target, hostile))
        page.wait_for_selector(f"#e-{first}", timeout=15000)
        item = page.locator(f"#e-{first}")
        out["arguments_text"] = item.locator("pre").inner_text()
        out["title_waiting"] = page.title()
        out["notes"] = page.evaluate("window.__notes")
        out["script_tags_in_item"] = item.locator("script, img").count()
        page.screenshot(path=SHOT, full_page=True)

        step("held call shown")
        # Approve: the agent's re-call runs once.
        item.get_by_role("button", name="Approve", exact=True).click()
        page.wait_for_selector("text=Approved.")
        out["approved_call"] = agent_call(target, hostile, first)
        out["approved_again"] = agent_call(target, hostile, first)

        step("approved")
        # Decline: the re-call is rejected, with the person's note.
        declined_target = SANDBOX + "/declined.txt"
        second = held_id(agent_call(declined_target, "no"))
        page.wait_for_selector(f"#e-{second}", timeout=15000)
        # With a note (markup in it is text), which the agent hears.
        page.locator(f"#n-{second}").fill("use <b>staging</b> instead")
        page.locator(f"#e-{second}").get_by_role("button", name="Decline", exact=True).click()
        page.wait_for_selector("text=Declined.")
        out["declined_call"] = agent_call(declined_target, "no", second)

        step("declined")
        # The page updates in place: a note being typed, and the field's focus, survive a
        # new arrival.
        typing_target = SANDBOX + "/typing.txt"
        typing = held_id(agent_call(typing_target, "typing"))
        page.wait_for_selector(f"#e-{typing}", timeout=15000)
        page.locator(f"#n-{typing}").fill("half a tho")
        arrival_target = SANDBOX + "/arrival.txt"
        arrival = held_id(agent_call(arrival_target, "arrival"))
        page.wait_for_selector(f"#e-{arrival}", timeout=15000)
        out["note_kept"] = page.locator(f"#n-{typing}").input_value()
        out["focus_kept"] = page.evaluate("document.activeElement && document.activeElement.id") == f"n-{typing}"
        page.keyboard.type("ught")
        page.locator(f"#e-{typing}").get_by_role("button", name="Decline", exact=True).click()
        page.wait_for_selector("text=Declined.")
        out["typing_declined"] = agent_call(typing_target, "typing", typing)

        step("typing survived an arrival")
        # Approve and allow the tool for two more calls, from the page.
        item = page.locator(f"#e-{arrival}")
        item.locator("select[name=grant_for]").select_option("15m")
        item.locator("input[name=grant_uses]").fill("2")
        item.get_by_role("button", name="Approve and allow fs__write_file").click()
        page.wait_for_selector("text=Approved, and allowed")
        out["granted_approved_call"] = agent_call(arrival_target, "arrival", arrival)
        out["granted_calls"] = [agent_call(SANDBOX + f"/granted-{n}.txt", f"granted {n}") for n in (1, 2)]
        third_target = SANDBOX + "/granted-3.txt"
        after = agent_call(third_target, "granted 3")
        out["after_grant"] = after
        # Approve and allow this call: the same call runs again without asking, until the
        # person revokes the grant from the page's Grants section.
        held = held_id(after)
        page.wait_for_selector(f"#e-{held}", timeout=15000)
        page.locator(f"#e-{held}").get_by_role("button", name="Approve and allow this call").click()
        page.wait_for_selector("text=Approved, and allowed")
        out["call_grant_approved"] = agent_call(third_target, "granted 3", held)
        out["call_grant_reused"] = agent_call(third_target, "granted 3")
        row = page.locator("#grants").locator("xpath=..").locator("tr", has_text="the same call")
        out["grant_row"] = row.inner_text()
        row.get_by_role("button", name="Revoke").click()
        page.wait_for_selector("text=Revoked.")
        out["after_revoke"] = agent_call(third_target, "granted 3")
        out["grants_after_revoke"] = page.locator("#grants").locator("xpath=..").inner_text()

        step("granted and revoked")
        # Edit arguments: a mistake is shown in place with what was typed; the edit then
        # approved is what the module writes.
        asked_target = SANDBOX + "/asked.txt"
        edit = held_id(agent_call(asked_target, "the agent's"))
        page.wait_for_selector(f"#e-{edit}", timeout=15000)
        page.locator(f"#e-{edit} details.edit summary").click()
        broken = '{"path": "' + SANDBOX + '/edited.txt", "content": '
        page.locator(f"#a-{edit}").fill(broken)
        page.locator(f"#e-{edit}").get_by_role("button", name="Approve with these arguments").click()
        page.wait_for_selector(f"#e-{edit} .error")
        out["edit_error"] = page.locator(f"#e-{edit} .error").inner_text()
        out["edit_kept"] = page.locator(f"#a-{edit}").input_value()
        bad_type = json.dumps({"path": 7})
        page.locator(f"#a-{edit}").fill(bad_type)
        page.locator(f"#e-{edit}").get_by_role("button", name="Approve with these arguments").click()
        page.wait_for_selector(f"#e-{edit} .error")
        out["edit_schema_error"] = page.locator(f"#e-{edit} .error").inner_text()
        page.locator(f"#a-{edit}").fill(json.dumps({"path": SANDBOX + "/edited.txt", "content": "the <i>person's</i>"}))
        page.locator(f"#e-{edit}").get_by_role("button", name="Approve with these arguments").click()
        page.wait_for_selector("text=Approved with your arguments.")
        out["edited_call"] = agent_call(asked_target, "the agent's", edit)

        step("edited")
        # A form on another site posting an approval is refused, and changes nothing.
        third = held_id(agent_call(SANDBOX + "/forged.txt", "forged"))
        page.wait_for_selector(f"#e-{third}", timeout=15000)
        evil = browser.new_page()
        evil.set_content(f'<form id="f" method="post" action="{BASE}/approvals/{third}/respond">'
                         '<input name="decision" value="approve"></form>')
        with evil.expect_navigation():
            evil.evaluate("document.getElementById('f').submit()")
        out["cross_site_status_text"] = evil.content()[:400]
        out["forged_still_waiting"] = service("GET", f"/v1/mcp/elicitations/{third}")["status"] == "pending"

        step("cross-site refused")
        # A module's question (its client cannot elicit) waits on the page; the person's
        # choice reaches the module.
        box = {}
        worker = threading.Thread(daemon=True, target=lambda: box.update(result=agent_tool("chatty__ask_choice")))
        worker.start()
        page.wait_for_selector("text=Which colour?", timeout=15000)
        question = page.locator("article.item", has_text="Which colour?")
        question.get_by_label("green").check()
        question.get_by_role("button", name="Submit").click()
        worker.join(30)
        out["module_answer"] = json.loads(box["result"]["content"][0]["text"])

        step("module question answered")
        # An invalid answer is shown next to the question with the tries left.
        asked = service("POST", "/v1/mcp/elicitations", {"message": "A name of 5+ characters",
                        "response": {"type": "string_input", "min_length": 5}})
        page.wait_for_selector(f"#e-{asked['id']}", timeout=15000)
        item = page.locator(f"#e-{asked['id']}")
        item.locator("input[name=value]").evaluate("e => e.removeAttribute('minlength')")
        item.locator("input[name=value]").fill("ab")
        item.get_by_role("button", name="Submit").click()
        page.wait_for_selector("text=tries left")
        out["invalid_shown"] = page.locator(f"#e-{asked['id']} .error").inner_text()
        page.locator(f"#e-{asked['id']} input[name=value]").fill("long enough")
        page.locator(f"#e-{asked['id']}").get_by_role("button", name="Submit").click()
        page.wait_for_selector("text=Answered.")
        out["invalid_then_valid"] = service("GET", f"/v1/mcp/elicitations/{asked['id']}")

        step("invalid answer shown")
        # A file asked for by a backend service, uploaded in the page, round-trips.
        asked = service("POST", "/v1/mcp/elicitations",
                        {"message": "The signed contract, please", "response": {"type": "file_upload"}})
        page.wait_for_selector(f"#e-{asked['id']}", timeout=15000)
        contract = os.path.join(SANDBOX, "contract.pdf")
        content = os.urandom(4096) + b"%PDF-1.7 signed"
        with open(contract, "wb") as f:
            f.write(content)
        out["upload_sha256"] = hashlib.sha256(content).hexdigest()
        page.set_input_files(f"#f-{asked['id']}", contract)
        page.locator(f"#e-{asked['id']}").get_by_role("button", name="Upload").click()
        page.wait_for_selector("text=Uploaded.")
        out["upload"] = service("GET", f"/v1/mcp/elicitations/{asked['id']}?wait=5s")
        downloaded = service("GET", "/v1/mcp/uploads/" + out["upload"]["response"]["upload_id"])
        out["downloaded_same"] = downloaded == content

        step("upload done")
        # A URL-mode client: the person follows its link, approves there, and the client's
        # call completes.
        urls = queue.Queue()
        box = {}
        worker = threading.Thread(daemon=True, target=lambda: box.update(result=url_mode_call(SANDBOX + "/url-mode.txt", urls)))
        worker.start()
        link = urls.get(timeout=60)
        step("url mode link: " + link)
        out["url_mode_link"] = link
        # The person opens the link in a new tab (the list's own tab reloads by itself when
        # the confirmation appears, which would abort a navigation in it).
        tab = context.new_page()
        tab.goto(link)
        tab.get_by_role("button", name="Approve", exact=True).click()
        tab.wait_for_selector("text=Approved.")
        tab.close()
        worker.join(60)
        out["url_mode_call"] = box.get("result")

        step("url mode done")
        # Sign-out ends the session.
        page.click("text=Sign out")
        page.wait_for_selector("text=Sign in")
        page.goto(BASE + "/approvals")
        out["signed_out"] = page.locator("#token").count() == 1
        out["dialogs"] = dialogs
        browser.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
