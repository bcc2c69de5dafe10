#!/usr/bin/env python3
"""The approvals page on a phone (390 px wide), in headless Chromium driven by Playwright.

usage: approvals_phone_browser.py BASE_URL HUMAN_TOKEN AGENT_TOKEN SANDBOX SCREENSHOT SERVICE_TOKEN

The agent writes a file twice through fs__write_file: the person approves the first call,
then sees what the second changed since (a diff beside it) and declines it with a note; then
approves a third call and allows the tool for a while. After each step the page is measured:
nothing may be wider than the screen, and every button must lie within it. Prints one JSON
line of what happened.
"""
import json

from playwright.sync_api import sync_playwright

# The same arguments as approvals_browser.py: its helpers read them.
from approvals_browser import ARGS, BASE, CHROMIUM, HUMAN, SANDBOX, SHOT, agent_call, held_id, step

WIDTH = 390


def measure(page):
    """How wide the page is, and the buttons that reach past the screen's edge."""
    return page.evaluate("""(width) => ({
        scroll: document.documentElement.scrollWidth,
        outside: Array.from(document.querySelectorAll('button'))
            .filter(b => b.offsetParent !== null)
            .map(b => b.getBoundingClientRect())
            .filter(r => r.right > width + 0.5 || r.left < -0.5).length,
    })""", WIDTH)


def main():
    out = {"measures": []}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        context = browser.new_context(viewport={"width": WIDTH, "height": 844},
                                      is_mobile=True, has_touch=True)
        page = context.new_page()
        page.goto(BASE + "/approvals")
        page.fill("#token", HUMAN)
        page.click("text=Sign in")
        page.wait_for_selector("text=Waiting for you (0)")
        out["measures"].append(measure(page))
        step("signed in on a phone")

        target = SANDBOX + "/phone.txt"
        first = held_id(agent_call(target, "first version of the notes"))
        page.wait_for_selector(f"#e-{first}", timeout=15000)
        item = page.locator(f"#e-{first}")
        out["first_since"] = item.locator(".since").count()
        out["measures"].append(measure(page))
        item.get_by_role("button", name="Approve", exact=True).tap()
        page.wait_for_selector("text=Approved.")
        out["first_call"] = agent_call(target, "first version of the notes", first)
        step("approved the first")

        second = held_id(agent_call(target, "second version of the notes"))
        page.wait_for_selector(f"#e-{second}", timeout=15000)
        item = page.locator(f"#e-{second}")
        out["since_text"] = item.locator(".since").inner_text()
        out["since_removed"] = item.locator(".since .removed").all_inner_texts()
        out["since_added"] = item.locator(".since .added").all_inner_texts()
        out["measures"].append(measure(page))
        page.screenshot(path=SHOT, full_page=True)
        page.locator(f"#n-{second}").fill("keep the first version")
        item.get_by_role("button", name="Decline", exact=True).tap()
        page.wait_for_selector("text=Declined.")
        out["declined_call"] = agent_call(target, "second version of the notes", second)
        step("declined the second with a note")

        other = SANDBOX + "/phone-other.txt"
        third = held_id(agent_call(other, "third"))
        page.wait_for_selector(f"#e-{third}", timeout=15000)
        item = page.locator(f"#e-{third}")
        out["measures"].append(measure(page))
        item.locator("select[name=grant_for]").select_option("15m")
        item.get_by_role("button", name="Approve and allow fs__write_file").tap()
        page.wait_for_selector("text=Approved, and allowed")
        out["granted_call"] = agent_call(other, "third", third)
        out["after_grant"] = agent_call(SANDBOX + "/phone-granted.txt", "granted")
        out["measures"].append(measure(page))
        step("granted")
        browser.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
