#!/usr/bin/env python3
"""A call two people must approve, one of them answering for a colleague away, in headless
Chromium driven by Playwright.

usage: approvals_quorum_browser.py BASE_URL HUMAN_TOKEN AGENT_TOKEN SANDBOX SCREENSHOT SERVICE_TOKEN BOB CAROL DAVE

The agent writes a file through fs__write_file, held for two people of `sre`. Bob (sre)
approves on the page: his approval is counted, the call still waits. Carol (sre) is away:
she hands her approvals to Dave (in no group) on the page. Dave sees the call as Carol's
delegate and approves it: the second approval, and the call runs. Prints one JSON line of
what happened.
"""
import json
import sys

from playwright.sync_api import sync_playwright

from approvals_browser import ARGS, BASE, CHROMIUM, SANDBOX, SHOT, agent_call, held_id, step

BOB, CAROL, DAVE = sys.argv[7:10]


def signed_in(browser, token):
    page = browser.new_context().new_page()
    page.goto(BASE + "/approvals")
    page.fill("#token", token)
    page.click("text=Sign in")
    page.wait_for_selector("text=Waiting for you")
    return page


def main():
    out = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        target = SANDBOX + "/quorum.txt"
        held = agent_call(target, "two people said yes")
        call = held_id(held)
        out["held_message"] = held["structuredContent"]["elicitation"]["message"]
        step("held for two")

        bob = signed_in(browser, BOB)
        bob.wait_for_selector(f"#e-{call}", timeout=15000)
        item = bob.locator(f"#e-{call}")
        out["tally_before"] = item.locator(".quorum").inner_text()
        out["bob_grant_or_edit"] = item.locator(".grant, .edit").count()
        item.get_by_role("button", name="Approve", exact=True).click()
        bob.wait_for_selector("text=Your approval is counted")
        item = bob.locator(f"#e-{call}")
        out["tally_after_bob"] = item.locator(".quorum").inner_text()
        out["bob_sees_approve"] = item.get_by_role("button", name="Approve", exact=True).count()
        out["after_one"] = agent_call(target, "two people said yes", call)
        step("bob approved: one of two")

        carol = signed_in(browser, CAROL)
        carol.fill("#delegate-to", "dave")
        carol.select_option("#delegate-for", "1d")
        carol.click("text=Hand over")
        carol.wait_for_selector("text=Handed over")
        out["carol_away"] = carol.locator("section[aria-labelledby=away]").inner_text()
        step("carol handed her approvals to dave")

        dave = signed_in(browser, DAVE)
        dave.wait_for_selector(f"#e-{call}", timeout=15000)
        item = dave.locator(f"#e-{call}")
        out["dave_sees"] = item.locator("h3").inner_text()
        out["dave_away"] = dave.locator("section[aria-labelledby=away]").inner_text()
        out["dave_grant_or_edit"] = item.locator(".grant, .edit").count()
        dave.screenshot(path=SHOT, full_page=True)
        item.get_by_role("button", name="Approve", exact=True).click()
        dave.wait_for_selector("text=Approved.")
        out["after_two"] = agent_call(target, "two people said yes", call)
        step("dave approved for carol: two of two")
        browser.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
