"""Hot reload of fixtures/py_server.py behind mcpvisor (no DIRECT counterpart: a
client talking to a server directly has no way to swap it).

The server's extra tool is named by the file $PY_SERVER_EXTRA_TOOL_FILE, read at
start-up, so a reload that starts a new worker changes the tool list. README
contract: requests in flight finish on the old worker, requests sent meanwhile
wait and go to the new one, the new worker gets the handshake replayed, and a
legacy client is sent notifications/tools/list_changed (only for lists that
changed) before it can see the new list. A 2026-07-28 client gets no
notification (it is stateless and re-lists on its own).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import anyio
import mcp.types as types
import pytest
from interop_util import cmdline, connect, eventually, peer_process, py_server_params

BASE_TOOLS = ["echo", "progress", "crash", "sleep", "sleep_stats", "ask_roots", "big", "pid"]

pytestmark = pytest.mark.routes("mcpvisor")


class Recorder:
    def __init__(self) -> None:
        self.notifications: list[str] = []

    async def __call__(self, message) -> None:
        if isinstance(message, types.ServerNotification):
            self.notifications.append(message.method)

    def list_changes(self) -> list[str]:
        return [n for n in self.notifications if n.endswith("/list_changed")]


def _text(result: types.CallToolResult) -> str:
    assert not result.is_error, result
    return result.content[0].text


async def _names(client) -> list[str]:
    return [t.name for t in (await client.list_tools()).tools]


async def _pid(client) -> int:
    return int(_text(await client.call_tool("pid", {})))


def _sighup_mcpvisor() -> None:
    pid = peer_process()
    assert Path(cmdline(pid)[0]).name == "mcpvisor", cmdline(pid)
    os.kill(pid, signal.SIGHUP)


@pytest.mark.parametrize("mode", ("legacy", "auto"))
async def test_sighup_reload_changes_tools(route: str, mode: str, errlog, tmp_path: Path) -> None:
    extra = tmp_path / "extra-tool.txt"
    extra.write_text("")
    recorder = Recorder()
    params = py_server_params(route, env={"PY_SERVER_EXTRA_TOOL_FILE": str(extra)}, flags=["--no-watch"])
    async with connect(params, errlog, mode=mode, message_handler=recorder) as client:
        assert await _names(client) == BASE_TOOLS
        old_pid = await _pid(client)

        # 1. Reload with a request in flight: it finishes on the old worker; a request
        #    sent during the drain waits and is served by the new worker.
        extra.write_text("extra_tool\n")
        outcome: dict[str, object] = {}

        async def in_flight() -> None:
            outcome["sleep"] = _text(await client.call_tool("sleep", {"seconds": 1.0}))

        async with anyio.create_task_group() as tg:
            tg.start_soon(in_flight)
            await anyio.sleep(0.3)
            _sighup_mcpvisor()
            await anyio.sleep(0.1)
            with anyio.fail_after(20):
                during = await _pid(client)
        assert outcome["sleep"] == "slept 1.0"
        assert during != old_pid, "a request sent during the reload went to the old worker"

        if mode == "legacy":
            await eventually(lambda: recorder.list_changes(), timeout=10)
            # Right after the notification the new list is there, without polling.
            assert await _names(client) == [*BASE_TOOLS, "extra_tool"]
            assert recorder.list_changes() == ["notifications/tools/list_changed"]
        else:
            assert await _names(client) == [*BASE_TOOLS, "extra_tool"]
            await anyio.sleep(0.3)
            assert recorder.list_changes() == []
        assert _text(await client.call_tool("extra_tool", {})) == "extra extra_tool"

        # 2. Reload again, removing the tool: an idle reload.
        extra.write_text("")
        _sighup_mcpvisor()
        if mode == "legacy":
            await eventually(lambda: len(recorder.list_changes()) >= 2, timeout=10)
            assert await _names(client) == BASE_TOOLS
        else:
            await eventually(lambda: _names_equal(client, BASE_TOOLS), timeout=10)
        gone = await client.call_tool("extra_tool", {})
        assert gone.is_error and "Unknown tool" in gone.content[0].text, gone
        assert await _pid(client) not in (old_pid, during)
    expected = ["notifications/tools/list_changed"] * 2 if mode == "legacy" else []
    assert recorder.list_changes() == expected


async def _names_equal(client, names: list[str]) -> bool:
    return await _names(client) == names


async def test_watch_reload(route: str, errlog, tmp_path: Path) -> None:
    extra = tmp_path / "extra-tool.txt"
    extra.write_text("")
    recorder = Recorder()
    params = py_server_params(
        route,
        env={"PY_SERVER_EXTRA_TOOL_FILE": str(extra)},
        flags=["--watch", str(extra), "--debounce", "100ms"],
    )
    async with connect(params, errlog, mode="legacy", message_handler=recorder) as client:
        assert await _names(client) == BASE_TOOLS
        await anyio.sleep(0.3)  # let the watcher settle
        extra.write_text("watched_tool\n")
        await eventually(lambda: recorder.list_changes(), timeout=5)
        assert await _names(client) == [*BASE_TOOLS, "watched_tool"]
        assert _text(await client.call_tool("watched_tool", {})) == "extra watched_tool"
