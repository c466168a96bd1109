"""The clinician's queue page at 1280x800 (issue 43, item 6), before and after its redesign.

The queue is real: the demo answers and the README example checked with the built-in judge
(as ``bench_queue.py``), decided by the v1 policy with ``not_sure = "ESCALATE"`` and no
escalation budget (17 escalated claims of 19, the queue the operator probed), queued with
``items_from_report``. The review UI serves it (uvicorn in a thread) and Debian's Chromium
(Playwright) opens ``/review`` at 1280x800, once with the templates of the commit before
the redesign (``git show BEFORE:...``) and once with the working tree's.

Measured: rows fully above the fold (their bottom within 800 px), the claim column's width
as a share of the table's, the columns whose every cell is "-" or "–", the page height.

    .venv/bin/python benchmarks/bench_queue_page.py [--work DIR]

Writes benchmarks/results/queue_page.json and queue_page.md. Needs Playwright and Chromium
(``/usr/bin/chromium``).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import jinja2
from bench_queue import POLICIES, ROOT, demo_reports, work_dir, write_results

from medverify.arbitration import arbitrate_all
from medverify.config import Config
from medverify.review import ReviewItem, items_from_report
from medverify.service import ui
from medverify.store.access import KeyStore, Role
from medverify.store.review import ReviewStore
from medverify.store.runs import RunStore
from medverify.testing import ScriptedProvider, register_fake
from medverify.testing.judge import scripted_judge
from medverify.testing.service import ServiceThread

BEFORE = "037f805^"  # the commit before the queue's redesign
TEMPLATES = "src/medverify/service/templates"
POLICY = "v1, not_sure ESCALATE"
WIDTH, HEIGHT = 1280, 800
MEASURE = """() => {
  const table = document.querySelector('#queue');
  const rows = [...table.querySelectorAll('tbody tr')];
  const heads = [...table.querySelectorAll('thead th')].map(h => h.innerText.trim());
  const cells = rows.map(r => [...r.querySelectorAll('td')].map(
    c => c.innerText.replace(/\\s+/g, ' ').trim()));
  const claim = heads.findIndex(h => h.startsWith('Claim'));
  const claimWidth = table.querySelectorAll('thead th')[claim].getBoundingClientRect().width;
  return {rows: rows.length, columns: heads,
          above_fold: rows.filter(r => r.getBoundingClientRect().bottom <= innerHeight).length,
          claim_share: claimWidth / table.getBoundingClientRect().width,
          empty_columns: heads.filter((h, i) => cells.every(c => ['-', '–', ''].includes(c[i]))),
          page_height: document.documentElement.scrollHeight};
}"""


def queue_items(work: Path) -> list[ReviewItem]:
    """The demo run's escalated claims under :data:`POLICY`, as review items."""
    reports = demo_reports(work)
    policy = POLICIES[POLICY]
    items = []
    for report in reports:
        decided = arbitrate_all(report.results, policy)
        items += items_from_report(report.model_copy(update={"results": decided}),
                                   policy=policy)
    return items


def old_templates(work: Path) -> Path:
    """The review templates as they were at :data:`BEFORE`."""
    folder = work / "templates-before"
    folder.mkdir(exist_ok=True)
    for path in (ROOT / TEMPLATES).glob("*.j2"):
        text = subprocess.run(["git", "show", f"{BEFORE}:{TEMPLATES}/{path.name}"], cwd=ROOT,
                              capture_output=True, text=True, check=True).stdout
        (folder / path.name).write_text(text, "utf-8")
    return folder


def measure(url: str, secret: str, shot: Path) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium",
                                             headless=True, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
        page.goto(url + "/review")
        page.fill("#key", secret)
        with page.expect_navigation():
            page.click("#login")
        found: dict[str, Any] = page.evaluate(MEASURE)
        page.screenshot(path=str(shot))
        browser.close()
    return found


def run(work: Path) -> dict[str, Any]:
    items = queue_items(work)
    with RunStore(work / "runs.db") as store:
        secret = KeyStore(store).create("bench reviewer", Role.REVIEWER).secret
        ReviewStore(store).add_items(items)
    # the pages only read the queue: the service's own judge is never called
    register_fake("queue-page", ScriptedProvider(scripted_judge(lambda c, p: (False, False))))
    config = Config(kb=work / "kb", store=work / "runs.db", cache_path=work / "cache.db",
                    model="fake:queue-page", decomposer="rules")
    env = ui._environment()
    current = env.loader
    results = {}
    with ServiceThread(config) as service:
        for name, loader in (("before", jinja2.FileSystemLoader(old_templates(work))),
                             ("after", current)):
            env.loader = loader
            env.cache = {}  # type: ignore[assignment]
            results[name] = measure(service.url, secret, work / f"queue-{name}.png")
    env.loader = current
    return {"items": len(items), "policy": POLICY, "viewport": [WIDTH, HEIGHT],
            "before_commit": BEFORE, **results}


def markdown(payload: dict[str, Any]) -> str:
    lines = [
        "# The review queue page at 1280x800 (issue 43)", "",
        "`.venv/bin/python benchmarks/bench_queue_page.py` (demo answers and the README "
        f"example, built-in judge, policy \"{payload['policy']}\": {payload['items']} queued "
        f"items; Debian's Chromium; before = templates at `{payload['before_commit']}`).", "",
        "| layout | rows | rows fully above the fold | claim column share of the table "
        "| columns \"–\" on every row | page height (px) |",
        "|---|---:|---:|---:|---|---:|"]
    for name in ("before", "after"):
        m = payload[name]
        lines.append(f"| {name} | {m['rows']} | {m['above_fold']} | {m['claim_share']:.0%} | "
                     f"{', '.join(m['empty_columns']) or 'none'} | {m['page_height']} |")
    lines += ["", "Targets (issue 43): at least 12 rows above the fold, the claim column at "
              "least 40 % of the table, no column empty on every row.", ""]
    return "\n".join(lines)


def main() -> None:
    payload = run(work_dir(__doc__, "queue-page-"))
    write_results("queue_page", payload, markdown(payload))


if __name__ == "__main__":
    main()
