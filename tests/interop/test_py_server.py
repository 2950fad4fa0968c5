"""Scenario 1: Python SDK client -> fixtures/py_server.py, DIRECT and THROUGH mcpvisor.

`mode` is the Python client's connect mode: "auto" (its default: probes
`server/discover`, which this dual-era server answers, so the connection is
2026-07-28 and has no handshake) and "legacy" (forced `initialize` handshake).
"""

from __future__ import annotations

import json

import anyio
import mcp.types as types
import pytest
from interop_util import (
    WORKER_DIED,
    alive,
    assert_lists_advertised,
    connect,
    eventually,
    normalised_capabilities,
    py_server_params,
    server_process,
    sigkill,
    wait_dead,
)
from mcp.shared.exceptions import MCPError

MODES = ("auto", "legacy")
EXPECTED_PROTOCOL = {"auto": "2026-07-28", "legacy": "2025-11-25"}
EXPECTED_TOOLS = ["echo", "progress", "crash", "sleep", "sleep_stats", "ask_roots", "big", "pid"]
ROOTS = [types.Root(uri="file:///interop/alpha", name="alpha"), types.Root(uri="file:///interop/beta")]

# What a DIRECT session shows when its server process dies: the in-flight call
# fails with the SDK's own "Connection closed" error and the session is dead.
DIRECT_CONNECTION_CLOSED = types.CONNECTION_CLOSED


async def _list_roots(_ctx) -> types.ListRootsResult:
    return types.ListRootsResult(roots=ROOTS)


def _client(route: str, mode: str, errlog, **kwargs):
    return connect(py_server_params(route), errlog, mode=mode, list_roots_callback=_list_roots, **kwargs)


def _text(result: types.CallToolResult) -> str:
    assert not result.is_error, result
    assert len(result.content) == 1 and isinstance(result.content[0], types.TextContent), result
    return result.content[0].text


async def _pid(client) -> int:
    return int(_text(await client.call_tool("pid", {})))


async def _sleep_stats(client) -> dict[str, int]:
    return json.loads(_text(await client.call_tool("sleep_stats", {})))


def _tools_dump(listing: types.ListToolsResult) -> list[dict]:
    return [tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in listing.tools]


@pytest.mark.parametrize("mode", MODES)
async def test_list_and_call(route: str, mode: str, errlog, observed) -> None:
    async with _client(route, mode, errlog) as client:
        assert client.protocol_version == EXPECTED_PROTOCOL[mode]
        assert client.server_info is not None and client.server_info.name == "interop-py-server"
        listing = await client.list_tools()
        assert [t.name for t in listing.tools] == EXPECTED_TOOLS
        echo = await client.call_tool("echo", {"text": 'héllo ✓ "quoted"\nline2'})
        assert _text(echo) == 'héllo ✓ "quoted"\nline2'
        roots = json.loads(_text(await client.call_tool("ask_roots", {})))
        assert roots == [str(r.uri) for r in ROOTS]
        assert await _pid(client) > 0
        capabilities = client.server_capabilities.model_dump(mode="json", by_alias=True, exclude_none=True)
        if route == "mcpvisor":
            assert_lists_advertised(capabilities)
        observed.check(
            route,
            f"py/list_and_call/{mode}",
            {
                "protocol": client.protocol_version,
                "capabilities": normalised_capabilities(capabilities),
                "tools": _tools_dump(listing),
                "echo": echo.model_dump(mode="json", exclude={"meta"}),
                "roots": roots,
            },
        )


@pytest.mark.parametrize("mode", MODES)
async def test_progress(route: str, mode: str, errlog, observed) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with _client(route, mode, errlog) as client:
        result = await client.call_tool("progress", {"steps": 7}, progress_callback=on_progress)
        assert _text(result) == "done 7"
    assert seen == [(float(i), 7.0, f"step {i}/7") for i in range(1, 8)]
    observed.check(route, f"py/progress/{mode}", seen)


@pytest.mark.parametrize("mode", MODES)
async def test_timeout_and_cancel(route: str, mode: str, errlog, observed) -> None:
    async with _client(route, mode, errlog) as client:
        # 1. The SDK's read timeout: the call fails client-side (-32001) and the SDK
        #    sends notifications/cancelled, which must reach the server and stop the tool.
        with pytest.raises(MCPError) as excinfo:
            await client.call_tool("sleep", {"seconds": 30}, read_timeout_seconds=0.5)
        assert excinfo.value.code == types.REQUEST_TIMEOUT
        await eventually(lambda: _cancelled_at_least(client, 1), timeout=5)

        # 2. The caller abandons the call (cancel scope): same courtesy cancel.
        with anyio.move_on_after(0.5) as scope:
            await client.call_tool("sleep", {"seconds": 30})
        assert scope.cancelled_caught
        await eventually(lambda: _cancelled_at_least(client, 2), timeout=5)

        # The session is still healthy, and no late answer confuses it.
        assert _text(await client.call_tool("sleep", {"seconds": 0.05})) == "slept 0.05"
        stats = await _sleep_stats(client)
    assert stats == {"started": 3, "cancelled": 2, "completed": 1}
    observed.check(route, f"py/cancel/{mode}", stats)


async def _cancelled_at_least(client, count: int) -> bool:
    return (await _sleep_stats(client))["cancelled"] >= count


@pytest.mark.parametrize("mode", MODES)
async def test_crash_tool(route: str, mode: str, errlog, observed) -> None:
    async with _client(route, mode, errlog) as client:
        before = _tools_dump(await client.list_tools())
        old_pid = await _pid(client)
        with pytest.raises(MCPError) as excinfo:
            with anyio.fail_after(10):
                await client.call_tool("crash", {"code": 7})
        await wait_dead(old_pid)
        if route == "direct":
            # Expected DIRECT result: the session is gone with its server.
            assert excinfo.value.code == DIRECT_CONNECTION_CLOSED, excinfo.value
            with pytest.raises(MCPError) as again:
                with anyio.fail_after(10):
                    await client.call_tool("echo", {"text": "after"})
            assert again.value.code == DIRECT_CONNECTION_CLOSED
            observed.check(route, f"py/crash/{mode}/tools", before)
            return
        assert excinfo.value.code == WORKER_DIED, excinfo.value
        # The next call starts a new worker (handshake replayed in legacy mode) and succeeds.
        with anyio.fail_after(15):
            assert _text(await client.call_tool("echo", {"text": "after"})) == "after"
        new_pid = await _pid(client)
        assert new_pid != old_pid
        assert _tools_dump(await client.list_tools()) == before
        roots = json.loads(_text(await client.call_tool("ask_roots", {})))
        assert roots == [str(r.uri) for r in ROOTS]
    observed.check(route, f"py/crash/{mode}/tools", before)


@pytest.mark.parametrize("mode", MODES)
async def test_sigkill_in_flight(route: str, mode: str, errlog) -> None:
    """SIGKILL the server while three calls are in flight: through mcpvisor each
    gets -32010 and the next call runs on a fresh worker."""
    async with _client(route, mode, errlog) as client:
        old_pid = await _pid(client)
        assert server_process(route, "py_server.py") == old_pid
        outcomes: dict[int, object] = {}

        async def in_flight(index: int) -> None:
            try:
                outcomes[index] = await client.call_tool("sleep", {"seconds": 30})
            except MCPError as exc:
                outcomes[index] = exc

        async with anyio.create_task_group() as tg:
            for index in range(3):
                tg.start_soon(in_flight, index)
            await eventually(lambda: _started_at_least(client, 3), timeout=5)
            sigkill(old_pid)
            await wait_dead(old_pid)
        codes = sorted(getattr(outcomes.get(i), "code", repr(outcomes.get(i))) for i in range(3))
        if route == "direct":
            assert codes == [DIRECT_CONNECTION_CLOSED] * 3, outcomes
            return
        assert codes == [WORKER_DIED] * 3, outcomes
        with anyio.fail_after(15):
            new_pid = await _pid(client)
        assert new_pid != old_pid and alive(new_pid)
        assert _text(await client.call_tool("echo", {"text": "alive"})) == "alive"
        # A fresh worker has fresh counters: the killed sleeps are not counted anywhere.
        assert await _sleep_stats(client) == {"started": 0, "cancelled": 0, "completed": 0}


async def _started_at_least(client, count: int) -> bool:
    return (await _sleep_stats(client))["started"] >= count


@pytest.mark.timeout(90)
async def test_big_result(route: str, errlog, observed) -> None:
    """A 20 MiB tool result arrives intact (legacy mode only: the cost is the SDK
    client's line splitting, the same in both modes)."""
    size = 20 * 1024 * 1024
    async with _client(route, "legacy", errlog) as client:
        result = await client.call_tool("big", {"size": size}, read_timeout_seconds=80)
        text = _text(result)
        assert len(text.encode()) == size
        pattern = "0123456789abcdefghijklmnopqrstuvwxyz\n"
        assert text == (pattern * (size // len(pattern) + 1))[:size]
        # The connection is still usable after a giant line.
        assert _text(await client.call_tool("echo", {"text": "after big"})) == "after big"
    observed.check(route, "py/big", len(text))


@pytest.mark.parametrize("after_cancel", (False, True), ids=("idle", "after-cancel"))
async def test_close_is_prompt(route: str, after_cancel: bool, errlog, observed) -> None:
    """Closing the client (stdin EOF) ends the session promptly, before the SDK's
    2 s grace runs out and it escalates to SIGTERM. py_server exits on EOF at once;
    a request the client cancelled (which the Python SDK server never answers)
    must not hold the shutdown up."""
    client_cm = _client(route, "legacy", errlog)
    client = await client_cm.__aenter__()
    try:
        assert _text(await client.call_tool("echo", {"text": "x"})) == "x"
        if after_cancel:
            with anyio.move_on_after(0.3):
                await client.call_tool("sleep", {"seconds": 30})
            await eventually(lambda: _cancelled_at_least(client, 1), timeout=5)
    finally:
        started = anyio.current_time()
        await client_cm.__aexit__(None, None, None)
        closing = anyio.current_time() - started
    assert closing < 1.5, f"closing took {closing:.2f} s"
    observed.check(route, f"py/close/{after_cancel}", True)


@pytest.mark.routes("mcpvisor")
async def test_oversize_lines(route: str, errlog) -> None:
    """mcpvisor's defined outcome for a line over --max-message-bytes (no DIRECT
    counterpart): an oversize answer becomes a -32603 error for that request, an
    oversize request is refused with -32600; the worker is not restarted."""
    params = py_server_params(route, flags=["--max-message-bytes", "1MiB"])
    async with connect(params, errlog, mode="legacy") as client:
        old_pid = await _pid(client)
        with pytest.raises(MCPError) as answer:
            await client.call_tool("big", {"size": 2 * 1024 * 1024}, read_timeout_seconds=20)
        assert answer.value.code == types.INTERNAL_ERROR, answer.value
        with pytest.raises(MCPError) as request:
            await client.call_tool("echo", {"text": "x" * (2 * 1024 * 1024)}, read_timeout_seconds=20)
        assert request.value.code == types.INVALID_REQUEST, request.value
        assert len(_text(await client.call_tool("big", {"size": 1000}))) == 1000
        assert await _pid(client) == old_pid


@pytest.mark.parametrize("mode", MODES)
async def test_concurrent_calls(route: str, mode: str, errlog) -> None:
    """60 calls in flight at once (under --max-in-flight's default of 64), mixed with
    progress: every answer reaches the request it belongs to."""
    results: dict[int, str] = {}
    progress: dict[int, list[float]] = {}

    async with _client(route, mode, errlog) as client:

        async def one(index: int) -> None:
            if index % 5 == 0:
                seen = progress.setdefault(index, [])

                async def on_progress(value: float, _total: float | None, _message: str | None) -> None:
                    seen.append(value)

                results[index] = _text(await client.call_tool("progress", {"steps": 3}, progress_callback=on_progress))
            else:
                results[index] = _text(await client.call_tool("echo", {"text": f"message {index}"}))

        async with anyio.create_task_group() as tg:
            for index in range(60):
                tg.start_soon(one, index)
    for index in range(60):
        expected = "done 3" if index % 5 == 0 else f"message {index}"
        assert results[index] == expected, index
    assert all(values == [1.0, 2.0, 3.0] for values in progress.values()), progress
