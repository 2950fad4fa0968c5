"""Scenario 3: Python SDK client -> @modelcontextprotocol/server-filesystem, started
with no directory arguments, DIRECT and THROUGH mcpvisor. After
`notifications/initialized` it asks the client for `roots/list` and serves only
those directories."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import anyio
import mcp.types as types
import pytest
from interop_util import connect, eventually, filesystem_params, server_process, sigkill, wait_dead
from mcp.shared.exceptions import MCPError

EXPECTED_TOOLS = [
    "read_file",
    "read_text_file",
    "read_media_file",
    "read_multiple_files",
    "write_file",
    "edit_file",
    "create_directory",
    "list_directory",
    "list_directory_with_sizes",
    "directory_tree",
    "move_file",
    "search_files",
    "get_file_info",
    "list_allowed_directories",
]


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    root = (tmp_path / "root").resolve()
    (root / "sub").mkdir(parents=True)
    (root / "hello.txt").write_text("hello from the interop tier\n")
    (root / "sub" / "nested.md").write_text("# nested\nü ✓\n")
    outside = (tmp_path / "outside").resolve()
    outside.mkdir()
    (outside / "secret.txt").write_text("not for you\n")
    return root, outside


class Roots:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.requests = 0

    async def __call__(self, _ctx) -> types.ListRootsResult:
        self.requests += 1
        return types.ListRootsResult(roots=[types.Root(uri=self.root.as_uri(), name="interop-root")])


def _text(result: types.CallToolResult) -> str:
    assert not result.is_error, result
    return result.content[0].text


async def _exercise(client, root: Path, outside: Path) -> dict:
    allowed = _text(await client.call_tool("list_allowed_directories", {}))
    assert str(root) in allowed
    listing = _text(await client.call_tool("list_directory", {"path": str(root)}))
    assert sorted(listing.splitlines()) == ["[DIR] sub", "[FILE] hello.txt"]
    hello = _text(await client.call_tool("read_text_file", {"path": str(root / "hello.txt")}))
    assert hello == "hello from the interop tier\n"
    nested = _text(await client.call_tool("read_text_file", {"path": str(root / "sub" / "nested.md")}))
    assert nested == "# nested\nü ✓\n"
    denied = await client.call_tool("read_text_file", {"path": str(outside / "secret.txt")})
    assert denied.is_error, denied
    return {
        "listing": sorted(listing.splitlines()),
        "hello": hello,
        "nested": nested,
        "denied": "Access denied" in denied.content[0].text,
    }


async def test_roots_then_files(route: str, errlog, tree, observed) -> None:
    root, outside = tree
    roots = Roots(root)
    async with connect(filesystem_params(route), errlog, list_roots_callback=roots) as client:
        assert client.protocol_version == "2025-11-25"
        await eventually(lambda: roots.requests >= 1, timeout=10)
        # The server applies the roots asynchronously after our answer.
        await eventually(lambda: _allowed(client, root), timeout=10)
        listing = await client.list_tools()
        assert [t.name for t in listing.tools] == EXPECTED_TOOLS
        seen = await _exercise(client, root, outside)
    assert roots.requests == 1
    observed.check(
        route,
        "filesystem/files",
        {"tools": [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in listing.tools], **seen},
    )


async def _allowed(client, root: Path) -> bool:
    return str(root) in _text(await client.call_tool("list_allowed_directories", {}))


async def test_restart_asks_roots_again(route: str, errlog, tree) -> None:
    """Kill the server: through mcpvisor the replacement gets the replayed handshake,
    asks the client for roots again (a server-to-client request from a new
    generation) and serves the same directory. DIRECT, the session dies."""
    root, outside = tree
    roots = Roots(root)
    async with connect(filesystem_params(route), errlog, list_roots_callback=roots) as client:
        await eventually(lambda: roots.requests >= 1, timeout=10)
        await eventually(lambda: _allowed(client, root), timeout=10)
        old = server_process(route, "server-filesystem")
        sigkill(old)
        await wait_dead(old)
        await anyio.sleep(0.2)
        if route == "direct":
            with pytest.raises(MCPError) as excinfo:
                with anyio.fail_after(10):
                    await client.call_tool("list_allowed_directories", {})
            assert excinfo.value.code == types.CONNECTION_CLOSED
            return
        # Nothing was in flight, so the next call just starts a new worker. Its first
        # answer may predate its roots (it applies them asynchronously): poll.
        with anyio.fail_after(15):
            await client.call_tool("list_allowed_directories", {})
        await eventually(lambda: roots.requests >= 2, timeout=10)
        await eventually(lambda: _allowed(client, root), timeout=10)
        assert server_process(route, "server-filesystem") != old
        await _exercise(client, root, outside)
    assert roots.requests == 2


async def test_worker_died_code_in_flight(route: str, errlog, tree) -> None:
    """A call sent to the filesystem server while it is stopped (SIGSTOP, so it
    cannot read the call), then killed. DIRECT: the connection is closed.
    Through mcpvisor the call never reached the server (it was still unread in
    the dead server's stdin pipe), so it is not failed with -32010: the next
    worker answers it."""
    root, _outside = tree
    roots = Roots(root)
    async with connect(filesystem_params(route), errlog, list_roots_callback=roots) as client:
        await eventually(lambda: _allowed(client, root), timeout=10)
        old = server_process(route, "server-filesystem")
        os.kill(old, signal.SIGSTOP)
        outcome: dict[str, object] = {}

        async def call() -> None:
            try:
                outcome["result"] = await client.call_tool("list_directory", {"path": str(root)})
            except MCPError as exc:
                outcome["error"] = exc

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await anyio.sleep(0.3)
            sigkill(old)
            await wait_dead(old)
        if route == "direct":
            error = outcome.get("error")
            assert isinstance(error, MCPError), outcome
            assert error.code == types.CONNECTION_CLOSED, error
        else:
            assert "result" in outcome, outcome
            assert server_process(route, "server-filesystem") != old


async def test_close_right_after_a_crash_is_prompt(route: str, errlog, tree) -> None:
    """Kill the server and close the client at once. mcpvisor restarts eagerly and
    replays the handshake; the new server then asks the client for roots, but the
    client has already gone: that must not hold the shutdown up until the client
    escalates to SIGTERM (the SDK's grace is 2 s). DIRECT: trivially prompt."""
    root, _outside = tree
    roots = Roots(root)
    client_cm = connect(filesystem_params(route), errlog, list_roots_callback=roots)
    client = await client_cm.__aenter__()
    try:
        await eventually(lambda: _allowed(client, root), timeout=10)
        old = server_process(route, "server-filesystem")
        sigkill(old)
        await wait_dead(old)
        await anyio.sleep(0.05)
    finally:
        started = anyio.current_time()
        await client_cm.__aexit__(None, None, None)
        closing = anyio.current_time() - started
    assert closing < 1.5, f"closing took {closing:.2f} s"
