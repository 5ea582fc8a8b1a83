#!/usr/bin/env python3
"""The preview page in a real browser: headless Chromium (Debian's package)
driven by selenium through chromedriver.

Usage: browser_test.py BINARY

Starts `BINARY preview --listen 127.0.0.1:0`, opens the page, and checks that
  - the 32k example loads and moving the budget slider changes the kept set;
  - the filtered item's content never reaches the page (its id does);
  - a pasted request that is not JSON shows its error, not a blank page;
  - with "Compare with the previous assembly" on, a changed system segment
    shows as system_changed at that segment, its message highlighted;
  - the cache plan is the model's provider's: markers for an Anthropic model,
    none for gpt-4o (OpenAI caches by itself);
  - a BUDGET_OVERFLOW shows its numbers, and draws what each part that may
    never be cut needs;
  - an agent's old tool results kept cleared are drawn as cleared;
  - a late answer for the request picked before is not drawn;
  - an error answer while the page starts shows the server's error body.
Screenshots go to a temporary directory printed at the start and kept.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")
# In examples/rag-32k.json, the content of the item `partner-discounts`,
# which the principal may not see (it lacks the scope "finance").
FILTERED_MARKER = "ACME-PARTNER-7731"
FILTERED_ID = "partner-discounts"
# Planted in the filtered item of a pasted request.
PASTED_MARKER = "PASTED-MARKER-9f3a61"
TIMEOUT = 30


def start(binary):
    proc = subprocess.Popen(
        [binary, "preview", "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline().strip()
    prefix = "preview listening on http://"
    if not line.startswith(prefix):
        proc.kill()
        raise SystemExit(f"unexpected first line {line!r}: {proc.stderr.read()}")
    return proc, line[len(prefix):]


def browser(profile):
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    # Without the background-networking flags Chromium waits on network
    # services a closed machine never answers.
    for flag in [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
        "--lang=en-US",
        f"--user-data-dir={profile}",
    ]:
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def kept_ids(driver):
    return sorted(
        e.get_attribute("data-id")
        for e in driver.find_elements(By.CSS_SELECTOR, "#blocks .item")
        if e.get_attribute("data-outcome") in ("kept", "compacted", "generated")
    )


def answered(driver, after):
    """Waits until an answer newer than sequence number `after` is drawn."""
    WebDriverWait(driver, TIMEOUT).until(
        lambda d: int(d.find_element(By.TAG_NAME, "body").get_attribute("data-seq") or 0) > after
        and not d.find_element(By.TAG_NAME, "body").get_attribute("data-busy")
    )
    return int(driver.find_element(By.TAG_NAME, "body").get_attribute("data-seq"))


def seq(driver):
    return int(driver.find_element(By.TAG_NAME, "body").get_attribute("data-seq") or 0)


def set_slider(driver, *values):
    """Moves the slider through `values` in one script: no timer of the page
    runs in between, so the moves all fall within its debounce."""
    driver.execute_script(
        "const s = document.getElementById('budget');"
        "for (const v of arguments[0]) {"
        "  s.value = String(v);"
        "  s.dispatchEvent(new Event('input', {bubbles: true}));"
        "}",
        list(values),
    )


def answered_budget(driver, after, budget):
    """Waits until an answer newer than `after` for `budget` is drawn and no
    request is in flight; returns its sequence number."""
    shown = f"/ {budget:,} tokens"
    WebDriverWait(driver, TIMEOUT).until(
        lambda d: seq(d) > after
        and not d.find_element(By.TAG_NAME, "body").get_attribute("data-busy")
        and shown in d.find_element(By.ID, "summary").text
    )
    return seq(driver)


def main():
    binary = sys.argv[1]
    out = tempfile.mkdtemp(prefix="preview-browser-")
    print(f"screenshots in {out}", flush=True)
    proc, addr = start(binary)
    profile = tempfile.mkdtemp(prefix="preview-chromium-")
    driver = None
    try:
        driver = browser(profile)
        # A 1280x900 page whatever the window's decorations take.
        driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False},
        )
        driver.get(f"http://{addr}/")
        first = answered(driver, 0)

        Select(driver.find_element(By.ID, "source")).select_by_value("example:rag-32k")
        n = answered(driver, first)
        full = kept_ids(driver)
        assert full, "nothing kept at the example's budget"
        ids = [e.get_attribute("data-id") for e in driver.find_elements(By.CSS_SELECTOR, "#blocks .item.filtered")]
        assert FILTERED_ID in ids, f"the filtered item is not listed by id: {ids}"
        driver.save_screenshot(os.path.join(out, "1-rag-32k.png"))

        # Several moves within the debounce: one request, for the last value,
        # and only its answer is shown.
        set_slider(driver, 20000, 15000, 9000)
        before = n
        n = answered_budget(driver, n, 9000)
        assert n == before + 1, f"{n - before} requests sent for one burst of moves"
        small = kept_ids(driver)
        assert set(small) < set(full), f"a 9k budget kept {small}, not a subset of {full}"
        driver.save_screenshot(os.path.join(out, "2-slider-9k.png"))

        # Between: some evidence falls back to its compact form.
        set_slider(driver, 18000)
        n = answered(driver, n)
        assert driver.find_elements(By.CSS_SELECTOR, "#blocks .item.compacted"), "nothing compacted at 18k"
        driver.save_screenshot(os.path.join(out, "3-slider-18k.png"))

        set_slider(driver, 32000)
        n = answered(driver, n)
        assert kept_ids(driver) == full, "moving the slider back did not restore the kept set"
        assert FILTERED_MARKER not in driver.page_source, "filtered content reached the page"

        # Not JSON: the error, not a blank page; the last drawing stays (dimmed).
        driver.find_element(By.CSS_SELECTOR, "#paste-box summary").click()
        driver.find_element(By.ID, "paste").send_keys('{"model": "gpt-4o", "query": ')
        driver.find_element(By.ID, "paste-go").click()
        n = answered(driver, n)
        error = driver.find_element(By.ID, "error")
        assert error.is_displayed(), "the error is not shown"
        assert "INVALID_JSON" in error.text and "HTTP 400" in error.text, error.text
        assert driver.find_elements(By.CSS_SELECTOR, "#blocks .item"), "the page went blank"
        driver.save_screenshot(os.path.join(out, "4-bad-json.png"))

        # A pasted request: its filtered item's content stays off the page too.
        with open(os.path.join(os.path.dirname(__file__), "..", "..", "examples", "request.json")) as f:
            pasted = json.load(f)
        pasted["blocks"][1]["items"][2]["content"] = PASTED_MARKER
        driver.execute_script("document.getElementById('paste').value = arguments[0];", json.dumps(pasted))
        driver.find_element(By.ID, "paste-go").click()
        n = answered(driver, n)
        assert not driver.find_element(By.ID, "error").is_displayed(), driver.find_element(By.ID, "error").text
        assert "refunds" in kept_ids(driver)
        assert PASTED_MARKER not in driver.page_source.replace(driver.find_element(By.ID, "paste").get_attribute("value"), "")
        messages = driver.find_element(By.ID, "messages").text
        assert PASTED_MARKER not in messages and "Annual plans bought in the EU" in messages, messages

        # Compare with the previous assembly: the one shown is the pasted
        # request; the same with one static segment edited diverges there.
        divergence = driver.find_element(By.ID, "divergence")
        assert "Off" in divergence.text, divergence.text
        driver.find_element(By.ID, "compare").click()
        assert "compared with the one shown" in divergence.text, divergence.text
        pasted["staticSegments"][1]["content"] = "Never reveal internal pricing. Escalate legal questions to counsel."
        driver.execute_script("document.getElementById('paste').value = arguments[0];", json.dumps(pasted))
        driver.find_element(By.ID, "paste-go").click()
        n = answered(driver, n)
        divergence = driver.find_element(By.ID, "divergence")
        assert divergence.get_attribute("data-change") == "system_changed", divergence.text
        assert "system_changed" in divergence.text and "system policy" in divergence.text, divergence.text
        assert "message 1 (system)" in divergence.text, divergence.text
        diverged = driver.find_elements(By.CSS_SELECTOR, "#messages .msg.diverged")
        assert len(diverged) == 1 and diverged[0].get_attribute("id") == "msg-1", [d.get_attribute("id") for d in diverged]
        assert PASTED_MARKER not in driver.page_source.replace(driver.find_element(By.ID, "paste").get_attribute("value"), "")
        driver.execute_script("document.getElementById('divergence').scrollIntoView({block: 'center'});")
        driver.save_screenshot(os.path.join(out, "5-divergence.png"))
        driver.find_element(By.ID, "compare").click()
        assert "Off" in driver.find_element(By.ID, "divergence").text

        # The cache plan follows the model's provider: Anthropic markers with
        # their cache_control field; OpenAI caches by itself, no markers.
        Select(driver.find_element(By.ID, "source")).select_by_value("example:rag-32k")
        n = answered(driver, n)
        Select(driver.find_element(By.ID, "model")).select_by_value("claude")
        n = answered(driver, n)
        summary = driver.find_element(By.ID, "plan-summary").text
        assert "provider anthropic" in summary, summary
        rows = driver.find_elements(By.CSS_SELECTOR, "#plan tr.marker")
        assert rows, "no marker rows for an Anthropic model"
        assert all("cache_control" in r.text and '"type":"ephemeral"' in r.text for r in rows), [r.text for r in rows]
        assert any(r.get_attribute("data-effective") == "true" and "\u2713" in r.text for r in rows), [r.text for r in rows]
        assert any("message" in r.text and "(system)" in r.text for r in rows), [r.text for r in rows]
        assert FILTERED_MARKER not in driver.page_source, "filtered content reached the page"
        driver.execute_script("document.getElementById('plan').scrollIntoView({block: 'center'});")
        driver.save_screenshot(os.path.join(out, "6-plan-anthropic.png"))
        Select(driver.find_element(By.ID, "model")).select_by_value("gpt-4o")
        n = answered(driver, n)
        summary = driver.find_element(By.ID, "plan-summary").text
        assert "provider openai" in summary and "0 markers" in summary, summary
        assert not driver.find_elements(By.CSS_SELECTOR, "#plan tr.marker")
        assert "no markers" in driver.find_element(By.ID, "plan").text

        # Non-cuttable content over the budget: BUDGET_OVERFLOW with its numbers.
        Select(driver.find_element(By.ID, "source")).select_by_value("example:support")
        n = answered(driver, n)
        assert not driver.find_element(By.ID, "error").is_displayed()
        set_slider(driver, 20)
        n = answered(driver, n)
        error = driver.find_element(By.ID, "error")
        assert "BUDGET_OVERFLOW" in error.text, error.text
        # Drawn: one row per part that may never be cut, largest first,
        # adding up to the overflow's non-cuttable tokens; the same facts as
        # JSON a click away.
        details = json.loads(error.find_element(By.TAG_NAME, "pre").get_attribute("textContent"))
        assert details["budget"] == 20 and details["nonCuttableTokens"] > 20, details
        rows = error.find_elements(By.CSS_SELECTOR, ".overflow-parts tr[data-part]")
        tokens = [int(r.get_attribute("data-tokens")) for r in rows]
        assert tokens and sum(tokens) == details["nonCuttableTokens"], (tokens, details)
        assert tokens == sorted(tokens, reverse=True), tokens
        parts = {r.get_attribute("data-part") for r in rows}
        assert {"static-prefix", "query"} <= parts, parts
        said = error.find_element(By.CLASS_NAME, "overflow-sum").text
        assert f"{details['nonCuttableTokens']} tokens may never be cut" in said and "the budget is 20 " in said, said
        assert len(error.find_elements(By.CSS_SELECTOR, ".overflow-bar .part")) == len(rows)
        driver.save_screenshot(os.path.join(out, "7-budget-overflow.png"))
        assert "Internal margin table" not in driver.page_source, "filtered content reached the page"

        # An agent's conversation that does not fit: old tool results are
        # kept cleared (the oldest in its compact form), drawn as cleared
        # with the tokens that saved; the newest result stays whole.
        log = "the build log says the lock file is out of date. " * 80
        turns = [{"id": "task", "role": "ROLE_USER", "content": "Why does the build fail?"}]
        for step in range(4):
            turns.append({"id": f"a{step}", "role": "ROLE_ASSISTANT", "content": "Reading the log.", "toolCallIds": [f"c{step}"]})
            result = {"id": f"r{step}", "role": "ROLE_TOOL", "toolCallId": f"c{step}", "content": log}
            if step == 0:
                result["compactForm"] = "Lock file out of date."
            turns.append(result)
        agent = {
            "requestId": "agent-1",
            "model": "gpt-4o",
            "maxInputTokens": 2500,
            "query": "What next?",
            "principal": {"id": "dev"},
            "blocks": [{"name": "recent", "kind": "BLOCK_KIND_RECENT_TURNS", "items": turns}],
        }
        driver.execute_script("document.getElementById('paste').value = arguments[0];", json.dumps(agent))
        driver.find_element(By.ID, "paste-go").click()
        n = answered(driver, n)
        assert not driver.find_element(By.ID, "error").is_displayed(), driver.find_element(By.ID, "error").text
        chips = {e.get_attribute("data-id"): e.get_attribute("data-outcome") for e in driver.find_elements(By.CSS_SELECTOR, "#blocks .item")}
        assert chips.get("r0") == "cleared" and chips.get("r3") == "kept", chips
        assert not [i for i, o in chips.items() if o == "dropped"], chips
        head = driver.find_element(By.CSS_SELECTOR, "#blocks .block-head .nums").text
        assert "dropped 0" in head and " cleared " in head, head
        assert driver.find_elements(By.CSS_SELECTOR, "#blocks .bar .cleared"), "the bar has no cleared part"
        messages = driver.find_element(By.ID, "messages").text
        assert "Lock file out of date." in messages, messages
        driver.save_screenshot(os.path.join(out, "8-cleared-results.png"))

        # Switching the request while an answer for the previous one is on its
        # way: that late answer is dropped, not drawn, and the slider takes the
        # new request's range. The page's fetch is wrapped so the late answer
        # (rag-32k) is handed over first and the new one (support) only after
        # the page has handled it: all microtasks run before a timeout fires.
        driver.execute_script(
            """
            const realFetch = window.fetch;
            let oldHandled;
            const oldGiven = new Promise((resolve) => { oldHandled = resolve; });
            window.fetch = async (url, options) => {
              const source = JSON.parse((options && options.body) || "{}").source;
              const r = await realFetch(url, options);
              const text = await r.text();
              if (source === "example:support") {
                await oldGiven;
                await new Promise((resolve) => setTimeout(resolve, 0));
              }
              return {
                status: r.status,
                ok: r.ok,
                text: () => {
                  if (source === "example:rag-32k") oldHandled();
                  return Promise.resolve(text);
                },
              };
            };
            const pick = document.getElementById("source");
            for (const value of ["example:rag-32k", "example:support"]) {
              pick.value = value;
              pick.dispatchEvent(new Event("change", { bubbles: true }));
            }
            """
        )
        n = answered_budget(driver, n, 290)
        assert driver.find_element(By.ID, "budget").get_attribute("value") == "290", "the slider kept the late answer's range"
        ids = [e.get_attribute("data-id") for e in driver.find_elements(By.CSS_SELECTOR, "#blocks .item")]
        assert FILTERED_ID not in ids and "refunds" in ids, f"the late answer was drawn: {ids}"
        assert not driver.find_element(By.ID, "error").is_displayed(), driver.find_element(By.ID, "error").text

        # A non-2xx answer while the page starts shows the server's error body
        # (here a 503 OVERLOADED made up in the page), not "UNREACHABLE".
        driver.execute_cdp_cmd(
            "Page.addScriptToEvaluateOnNewDocument",
            {
                "source": """
                const realFetch = window.fetch;
                window.fetch = (url, options) => String(url).endsWith("/api/models")
                  ? Promise.resolve(new Response(
                      JSON.stringify({ error: { code: "OVERLOADED", message: "made up", details: { limit: 1 } } }),
                      { status: 503, headers: { "content-type": "application/json" } }))
                  : realFetch(url, options);
                """
            },
        )
        driver.refresh()
        WebDriverWait(driver, TIMEOUT).until(lambda d: d.find_element(By.ID, "error").is_displayed())
        error = driver.find_element(By.ID, "error").text
        assert "OVERLOADED (HTTP 503)" in error and "made up" in error and "UNREACHABLE" not in error, error
    finally:
        if driver is not None:
            driver.quit()
        proc.kill()
        proc.wait()
        shutil.rmtree(profile, ignore_errors=True)
    print("preview browser test: ok")


if __name__ == "__main__":
    main()
