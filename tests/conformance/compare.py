"""Compares the conformance suite's checks through mcpvisor with the same
checks against the fixture served directly, and prints the tables.

    compare.py RESULTS EXPECTED

RESULTS holds REV/TARGET/ (TARGET: direct, run, serve), each with the
suite's `-o` output (a `server-SCENARIO-TIMESTAMP/checks.json` per
scenario), and REV/scored.txt, the scenarios that revision scores (one a
line). EXPECTED lists the checks known to fail through mcpvisor, one a line:
`REV TARGET SCENARIO CHECK-ID  # why`.

A check is named by its scenario, its id and its place among the checks of
that id (some scenarios repeat an id). Through `run --http` every scored
check that passes direct must pass; through `serve --http` the same, less
the checks that call a tool or prompt by the unprefixed name the gateway
renames (`SERVER__NAME`). A check that fails but is expected is counted
apart; an expected failure that now passes is reported, so that the list
shrinks as mcpvisor grows. The last line is `compared: GOOD BAD`, the
comparisons (a revision through one front) that held and did not, a stale
expectation counting as one that did not. Exits 1 on any unexpected failure
or stale expectation.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

TARGETS = ("direct", "run", "serve")

# Scenarios whose checks call a fixture tool or prompt by its name: through
# `serve` that name is `fx__NAME`, so the scenario cannot find it.
BY_NAME_SCENARIOS = re.compile(r"^(tools-call-.*|prompts-get-.*|input-required-result-.*|elicitation-.*)$")
# The checks of server-stateless that call a fixture tool by name.
BY_NAME_CHECKS = {
    "sep-2575-server-rejects-undeclared-capability",
    "sep-2575-missing-capability-http-400",
    "sep-2575-http-server-no-independent-requests-on-stream",
    "sep-2575-server-no-log-without-loglevel",
    "sep-2575-server-tags-subscription-id",
    "sep-2575-server-honors-notification-filter",
    "sep-2575-server-sends-prompts-list-changed-on-subscription",
    "sep-2575-server-sends-tools-list-changed-on-subscription",
}


def checks(target_dir: Path) -> dict[tuple[str, str, int], str]:
    """(scenario, check id, occurrence) -> status, for one target's run."""
    out: dict[tuple[str, str, int], str] = {}
    for path in sorted(target_dir.glob("server-*/checks.json")):
        scenario = re.sub(r"^server-(.*)-\d{4}-\d\d-\d\dT[\d-]+Z$", r"\1", path.parent.name)
        seen: Counter[str] = Counter()
        for check in json.loads(path.read_text()):
            cid = check["id"]
            out[(scenario, cid, seen[cid])] = check["status"]
            seen[cid] += 1
    return out


def by_name(scenario: str, cid: str) -> bool:
    return bool(BY_NAME_SCENARIOS.match(scenario)) or cid in BY_NAME_CHECKS


def main() -> int:
    results, expected_file = Path(sys.argv[1]), Path(sys.argv[2])
    expected: set[tuple[str, str, str, str]] = set()
    for line in expected_file.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            rev, target, scenario, cid = line.split()
            expected.add((rev, target, scenario, cid))

    bad = good_runs = bad_runs = 0
    still: set[tuple[str, str, str, str]] = set()
    ran: set[tuple[str, str]] = set()
    for rev_dir in sorted(results.iterdir(), reverse=True):
        rev = rev_dir.name
        scored = set((rev_dir / "scored.txt").read_text().split())
        runs = {t: checks(rev_dir / t) for t in TARGETS if (rev_dir / t).is_dir()}
        direct = runs.get("direct", {})
        print(f"\n{rev}: scored checks (SUCCESS / all) per target")
        print(f"| scenario | {' | '.join(runs)} |")
        print(f"|---|{'---|' * len(runs)}")
        for scenario in sorted(scored):
            cells = []
            for target, got in runs.items():
                mine = [s for (sc, _, _), s in got.items() if sc == scenario]
                cells.append(f"{sum(s == 'SUCCESS' for s in mine)}/{len(mine)}")
            print(f"| {scenario} | {' | '.join(cells)} |")
        totals = []
        for target, got in runs.items():
            mine = [s for (sc, _, _), s in got.items() if sc in scored]
            totals.append(f"{sum(s == 'SUCCESS' for s in mine)}/{len(mine)}")
        print(f"| **total** | {' | '.join(totals)} |")

        for target in ("run", "serve"):
            got = runs.get(target)
            if got is None:
                continue
            ran.add((rev, target))
            passed = known = skipped = 0
            bad_before = bad
            for key, status in sorted(direct.items()):
                scenario, cid, _ = key
                if scenario not in scored or status != "SUCCESS":
                    continue
                if target == "serve" and by_name(scenario, cid):
                    skipped += 1
                    continue
                # INFO is the suite's note of an optional behaviour (JSON
                # where SSE may be used), never a failure.
                ok = got.get(key) in ("SUCCESS", "INFO")
                mark = (rev, target, scenario, cid)
                if ok:
                    passed += 1
                elif mark in expected:
                    still.add(mark)
                    known += 1
                else:
                    bad += 1
                    print(f"conformance: {rev} {target}: {scenario} {cid} passes direct, not through mcpvisor ({got.get(key)})")
            print(
                f"conformance: {rev} through {target} --http: {passed} of the checks that pass direct pass,"
                f" {known} expected failures, {skipped} not counted (call a tool or prompt by its unprefixed name)"
            )
            if bad == bad_before:
                good_runs += 1
            else:
                bad_runs += 1
    for mark in sorted(m for m in expected - still if (m[0], m[1]) in ran):
        print(f"conformance: expected failure that no longer fails (or no longer runs): {' '.join(mark)}")
        bad += 1
        bad_runs += 1
    # For run.sh: comparisons (revision and front) that passed and failed.
    print(f"compared: {good_runs} {bad_runs}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
