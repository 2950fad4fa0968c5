"""pytest glue for the interop tier.

- Async test functions run under `anyio.run` inside `anyio.fail_after(timeout)`;
  the timeout is 45 s unless a test is marked `@pytest.mark.timeout(seconds)`.
  A hard backstop (faulthandler, exit) ends the whole run if a test wedges the
  event loop past its timeout.
- `route` parametrises a test over DIRECT and THROUGH mcpvisor.
- `errlog` is a file that receives the peer's stderr (mcpvisor's, when routed
  through it); its tail is printed when the test fails.
- `observed` is a session-wide store: the DIRECT run of a scenario records what
  it saw, the mcpvisor run asserts it saw the same.
- Every process a test launches carries a per-test environment tag; after the
  test, all of them (orphaned workers included) must be gone within 8 s.
"""

from __future__ import annotations

import contextlib
import faulthandler
import inspect
import os
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from interop_util import ROUTES, cmdline, mcpvisor_bin, set_process_tag, tagged_processes  # noqa: E402

DEFAULT_TIMEOUT = float(os.environ.get("INTEROP_TEST_TIMEOUT", "45"))
HARD_GRACE = 20.0


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "timeout(seconds): per-test time limit for the interop tier")
    config.addinivalue_line("markers", "routes(*names): restrict the `route` parametrisation")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "route" in metafunc.fixturenames:
        marker = metafunc.definition.get_closest_marker("routes")
        routes = marker.args if marker else ROUTES
        metafunc.parametrize("route", routes)


def _timeout_of(item: pytest.Item) -> float:
    marker = item.get_closest_marker("timeout")
    return float(marker.args[0]) if marker else DEFAULT_TIMEOUT


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    func = pyfuncitem.obj
    if not inspect.iscoroutinefunction(func):
        return None
    argnames = pyfuncitem._fixtureinfo.argnames  # noqa: SLF001 - same as pytest's own call
    kwargs = {name: pyfuncitem.funcargs[name] for name in argnames}
    timeout = _timeout_of(pyfuncitem)

    async def bounded() -> None:
        try:
            with anyio.fail_after(timeout):
                await func(**kwargs)
        except TimeoutError as exc:
            raise TimeoutError(f"interop test exceeded its {timeout:.0f} s limit") from exc

    faulthandler.dump_traceback_later(timeout + HARD_GRACE, exit=True)
    try:
        anyio.run(bounded)
    finally:
        faulthandler.cancel_dump_traceback_later()
    return True


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]):
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


@pytest.fixture
def route(request: pytest.FixtureRequest) -> str:
    value = request.param
    if value == "mcpvisor":
        try:
            mcpvisor_bin()
        except FileNotFoundError as exc:
            pytest.fail(str(exc), pytrace=False)
    return value


@pytest.fixture
def errlog(request: pytest.FixtureRequest, tmp_path: Path):
    path = tmp_path / "peer-stderr.log"
    with path.open("w+") as handle:
        yield handle
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        text = path.read_text(errors="replace")
        tail = text[-6000:]
        print(f"\n----- peer stderr ({len(text)} bytes, tail) -----\n{tail}\n-----", file=sys.stderr)


LEFTOVER_GRACE = 8.0


@pytest.fixture(autouse=True)
def no_leftover_processes():
    """Every process a test started (mcpvisor, servers, their children) must be gone
    soon after the test's client has closed: no orphaned workers."""
    tag = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
    set_process_tag(tag)
    yield
    set_process_tag("")
    deadline = time.monotonic() + LEFTOVER_GRACE
    left = tagged_processes(tag)
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = tagged_processes(tag)
    if left:
        described = {pid: cmdline(pid) for pid in left}
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        pytest.fail(f"processes still running {LEFTOVER_GRACE:.0f} s after the test: {described}", pytrace=False)


class Observed:
    """Observations of DIRECT runs, keyed by scenario, for the mcpvisor runs to compare."""

    def __init__(self) -> None:
        self._data: dict[str, Any] = {}

    def check(self, route: str, key: str, value: Any) -> None:
        if route == "direct":
            self._data[key] = value
            return
        if key not in self._data:
            return  # direct variant not run in this session (e.g. -k selection)
        assert value == self._data[key], f"{key}: through mcpvisor differs from direct"


_OBSERVED = Observed()


@pytest.fixture
def observed() -> Observed:
    return _OBSERVED


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Keep the collected order of test functions, but run each function's DIRECT
    # variants before its mcpvisor variants so those have a baseline to compare with.
    first_seen: dict[str, int] = {}
    for index, item in enumerate(items):
        first_seen.setdefault(item.nodeid.split("[")[0], index)

    def key(item: pytest.Item) -> tuple[int, int]:
        callspec = getattr(item, "callspec", None)
        route = callspec.params.get("route") if callspec is not None else None
        return first_seen[item.nodeid.split("[")[0]], 1 if route == "mcpvisor" else 0

    items.sort(key=key)
