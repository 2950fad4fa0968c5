"""Scenario: MCP clients over Streamable HTTP -> `mcpvisor run --http` (one
stdio server served as itself to many clients) and `mcpvisor serve --http`
(every configured server as one, tools as `SERVER__NAME`).

The Python SDK client's mode is pinned per test: `legacy` (the `initialize`
handshake, an `Mcp-Session-Id` session) wherever a server asks the client
something (sampling, elicitation) or a stream is resumed, `2026-07-28` for the
stateless tests (no session: every POST carries its own `_meta`). Resumption is
also driven with raw HTTP, to drop a stream at a chosen event. The TypeScript
SDK's client (http_ts_client.mjs) connects to both commands too.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import anyio
import anyio.abc
import httpx2
import mcp.types as types
import pytest
from interop_util import (
    CACHE,
    EVERYTHING_JS,
    HERE,
    PY_SERVER,
    TAG_VAR,
    WORKER_LOST_CODES,
    alive,
    eventually,
    mcpvisor_bin,
    mcpvisor_flags,
    node_bin,
    process_tag,
    sigkill,
    wait_dead,
)
from mcp import Client
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from test_everything import EXPECTED_TOOLS as EVERYTHING_TOOLS
from test_py_server import EXPECTED_TOOLS as PY_TOOLS

LEGACY = "legacy"
STATELESS = "2026-07-28"
HANDSHAKE_VERSION = "2025-11-25"  # what the SDK's `legacy` mode negotiates
# A whole line: the address is taken only once its newline is there.
LISTENING = re.compile(r"mcpvisor: listening on (http://\S+)\n")
PY_CMD = [sys.executable, "-u", str(PY_SERVER)]
SAMPLED_TEXT = "sampled by the interop HTTP client"
TS_CLIENT = HERE / "http_ts_client.mjs"


# ---------------------------------------------------------------- the front


@dataclass
class Front:
    """A running `mcpvisor ... --http 127.0.0.1:0`."""

    url: str
    proc: subprocess.Popen


@contextlib.asynccontextmanager
async def http_front(args: list[str], errlog: TextIO, *, cwd: Path | None = None) -> AsyncIterator[Front]:
    """Starts mcpvisor with `args`, waits for its "listening on" line, and stops
    it with SIGTERM (the drain) at the end."""
    env = dict(os.environ)
    env[TAG_VAR] = process_tag()
    if cwd is not None:
        env["MCPVISOR_CACHE_DIR"] = str(cwd / "mcpvisor-cache")
        # Pinned definitions of the test's own, never the user's.
        env["XDG_STATE_HOME"] = str(cwd / "mcpvisor-state")
    proc = subprocess.Popen(
        [str(mcpvisor_bin()), *args],
        stdin=subprocess.DEVNULL,
        stdout=errlog,
        stderr=errlog,
        env=env,
        cwd=cwd,
    )
    try:
        url = None
        with anyio.fail_after(20):
            while url is None:
                match = LISTENING.search(Path(errlog.name).read_text(errors="replace"))
                if match:
                    url = match.group(1)
                    break
                if proc.poll() is not None:
                    raise AssertionError(f"mcpvisor exited with {proc.returncode} before listening")
                await anyio.sleep(0.02)
        yield Front(url=url, proc=proc)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 15
            while proc.poll() is None and time.monotonic() < deadline:
                await anyio.sleep(0.05)
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def run_args(*command: str) -> list[str]:
    return ["run", "--http", "127.0.0.1:0", "--http-drain", "1s", *mcpvisor_flags(), "--", *command]


def serve_args(config: Path) -> list[str]:
    return ["serve", "--http", "127.0.0.1:0", "--http-drain", "1s", "--config", str(config)]


def everything_cmd() -> list[str]:
    return [node_bin(), str(EVERYTHING_JS), "stdio"]


def write_config(tmp_path: Path) -> Path:
    """A config with server-everything and the Python server."""
    config = tmp_path / "mcp.json"
    servers = {
        "everything": {"command": node_bin(), "args": [str(EVERYTHING_JS), "stdio"]},
        "py": {"command": sys.executable, "args": ["-u", str(PY_SERVER)]},
    }
    config.write_text(json.dumps({"mcpServers": servers}, indent=2))
    return config


@contextlib.asynccontextmanager
async def front_for(target: str, tmp_path: Path, errlog: TextIO) -> AsyncIterator[tuple[Front, str]]:
    """`run-py`: run --http in front of py_server; `run-everything`: of
    server-everything; `serve`: serve --http of both. Yields the front and the
    prefix tool names of the Python server carry."""
    if target == "run-py":
        async with http_front(run_args(*PY_CMD), errlog) as front:
            yield front, ""
    elif target == "run-everything":
        async with http_front(run_args(*everything_cmd()), errlog) as front:
            yield front, ""
    elif target == "serve":
        async with http_front(serve_args(write_config(tmp_path)), errlog, cwd=tmp_path) as front:
            yield front, "py__"
    else:
        raise ValueError(target)


# ---------------------------------------------------------------- clients


class Recorder:
    """An httpx2 client for the SDK's transport that records what went over the
    wire: each POSTed JSON body with its request headers, each response's headers."""

    def __init__(self) -> None:
        self.posts: list[tuple[dict, dict[str, str]]] = []
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.responses: list[tuple[str, int, dict[str, str]]] = []

    async def _on_request(self, request: httpx2.Request) -> None:
        headers = {k.lower(): v for k, v in request.headers.items()}
        self.requests.append((request.method, headers))
        if request.method == "POST":
            self.posts.append((json.loads(request.content), headers))

    async def _on_response(self, response: httpx2.Response) -> None:
        headers = {k.lower(): v for k, v in response.headers.items()}
        self.responses.append((response.request.method, response.status_code, headers))

    def http_client(self) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(
            timeout=httpx2.Timeout(30, read=300),
            event_hooks={"request": [self._on_request], "response": [self._on_response]},
        )

    def calls(self, tool: str) -> list[dict]:
        return [body for body, _ in self.posts if body.get("method") == "tools/call" and body["params"]["name"] == tool]


@contextlib.asynccontextmanager
async def client(url: str, mode: str, recorder: Recorder | None = None, **kwargs: Any) -> AsyncIterator[Client]:
    """The Python SDK client over Streamable HTTP, its mode pinned."""
    kwargs.setdefault("cache", None)  # every list call must reach the wire
    if recorder is None:
        async with Client(url, mode=mode, **kwargs) as c:
            yield c
        return
    async with recorder.http_client() as http:
        async with Client(streamable_http_client(url, http_client=http), mode=mode, **kwargs) as c:
            yield c


def _texts(result: types.CallToolResult) -> list[str]:
    assert not result.is_error, result
    return [c.text for c in result.content if isinstance(c, types.TextContent)]


def _text(result: types.CallToolResult) -> str:
    (text,) = _texts(result)
    return text


async def _names(c: Client) -> set[str]:
    return {t.name for t in (await c.list_tools()).tools}


async def _everything_listed(c: Client, prefix: str = "") -> None:
    """server-everything adds some tools only after `initialized`."""
    want = {prefix + t for t in EVERYTHING_TOOLS}
    await eventually(lambda: _has(c, want), timeout=15, interval=0.1)


async def _has(c: Client, want: set[str]) -> bool:
    return want <= await _names(c)


# ---------------------------------------------------------------- list and call


@pytest.mark.parametrize("mode", (LEGACY, STATELESS))
async def test_run_py_list_and_call(mode: str, tmp_path: Path, errlog) -> None:
    async with front_for("run-py", tmp_path, errlog) as (front, _):
        async with client(front.url, mode) as c:
            assert c.protocol_version == (HANDSHAKE_VERSION if mode == LEGACY else STATELESS)
            assert await _names(c) == set(PY_TOOLS)
            assert _text(await c.call_tool("echo", {"text": "over http"})) == "over http"


async def test_run_everything_list_and_call(tmp_path: Path, errlog) -> None:
    async with front_for("run-everything", tmp_path, errlog) as (front, _):
        async with client(front.url, LEGACY) as c:
            assert c.server_info is not None and "everything" in c.server_info.name
            await _everything_listed(c)
            assert await _names(c) == set(EVERYTHING_TOOLS)
            assert _texts(await c.call_tool("echo", {"message": "over http"})) == ["Echo: over http"]
            assert _texts(await c.call_tool("get-sum", {"a": 2, "b": 40})) == ["The sum of 2 and 40 is 42."]


@pytest.mark.parametrize("mode", (LEGACY, STATELESS))
async def test_serve_list_and_call(mode: str, tmp_path: Path, errlog) -> None:
    async with front_for("serve", tmp_path, errlog) as (front, _):
        async with client(front.url, mode) as c:
            assert c.protocol_version == (HANDSHAKE_VERSION if mode == LEGACY else STATELESS)
            await _everything_listed(c, "everything__")
            names = await _names(c)
            assert names == {f"everything__{t}" for t in EVERYTHING_TOOLS} | {f"py__{t}" for t in PY_TOOLS}
            assert _texts(await c.call_tool("everything__echo", {"message": "via serve"})) == ["Echo: via serve"]
            assert _text(await c.call_tool("py__echo", {"text": "from py"})) == "from py"


# ---------------------------------------------------------------- progress and cancel


def _modes() -> list:
    return [LEGACY, STATELESS]


@pytest.mark.parametrize("mode", _modes())
@pytest.mark.parametrize("target", ("run-py", "serve"))
async def test_progress(target: str, mode: str, tmp_path: Path, errlog) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with front_for(target, tmp_path, errlog) as (front, prefix):
        async with client(front.url, mode) as c:
            result = await c.call_tool(f"{prefix}progress", {"steps": 4}, progress_callback=on_progress)
    assert _text(result) == "done 4"
    assert seen == [(float(i), 4.0, f"step {i}/4") for i in range(1, 5)]


async def test_serve_everything_progress(tmp_path: Path, errlog) -> None:
    seen: list[tuple[float, float | None]] = []

    async def on_progress(progress: float, total: float | None, _message: str | None) -> None:
        seen.append((progress, total))

    async with front_for("serve", tmp_path, errlog) as (front, _):
        async with client(front.url, LEGACY) as c:
            result = await c.call_tool(
                "everything__trigger-long-running-operation", {"duration": 0.5, "steps": 5}, progress_callback=on_progress
            )
    assert _texts(result) == ["Long running operation completed. Duration: 0.5 seconds, Steps: 5."]
    assert seen == [(float(i), 5.0) for i in range(1, 6)]


async def _sleep_stats(c: Client, prefix: str) -> dict[str, int]:
    return json.loads(_text(await c.call_tool(f"{prefix}sleep_stats", {})))


# A 2026-07-28 client has no handshake, so its first request can come while
# the server is still starting: a call made then waits (parked) until the
# server is listed, and a client that gives up on it before that never
# started anything to cancel. The tests below first wait for the server.


@pytest.mark.parametrize("mode", (LEGACY, STATELESS))
@pytest.mark.parametrize("target", ("run-py", "serve"))
async def test_cancel(target: str, mode: str, tmp_path: Path, errlog) -> None:
    """A call the client gives up on (its read timeout, then its caller's
    cancel scope) is cancelled at the server; the session goes on. A legacy
    client sends `notifications/cancelled`; a 2026-07-28 client closes the
    request's POST, which is that era's cancellation (how promptly it is
    honoured: test_stateless_cancel_is_prompt)."""
    within = 5 if mode == LEGACY else 10
    async with front_for(target, tmp_path, errlog) as (front, prefix):
        async with _tolerating_late_answers(mode), client(front.url, mode) as c:
            await _sleep_stats(c, prefix)  # the server is up
            with pytest.raises(MCPError) as excinfo:
                await c.call_tool(f"{prefix}sleep", {"seconds": 30}, read_timeout_seconds=0.5)
            assert excinfo.value.code == types.REQUEST_TIMEOUT
            await eventually(lambda: _cancelled_at_least(c, prefix, 1), timeout=within, interval=0.1)

            with anyio.move_on_after(0.5) as scope:
                await c.call_tool(f"{prefix}sleep", {"seconds": 30})
            assert scope.cancelled_caught
            await eventually(lambda: _cancelled_at_least(c, prefix, 2), timeout=within, interval=0.1)

            assert _text(await c.call_tool(f"{prefix}sleep", {"seconds": 0.05})) == "slept 0.05"
            stats = await _sleep_stats(c, prefix)
    assert stats == {"started": 3, "cancelled": 2, "completed": 1}


@contextlib.asynccontextmanager
async def _tolerating_late_answers(mode: str) -> AsyncIterator[None]:
    """A legacy client's cancelled request keeps its POST open (see
    test_cancelled_request_stream_ends); when the session is deleted at the
    end, mcpvisor answers those POSTs 404 and the SDK, already closed, fails
    to deliver them (ClosedResourceError). Only that is let through here."""
    try:
        yield
    except BaseExceptionGroup as group:
        rest = group.split(anyio.ClosedResourceError)[1]
        if mode != LEGACY or rest is not None:
            raise


async def _cancelled_at_least(c: Client, prefix: str, count: int) -> bool:
    return (await _sleep_stats(c, prefix))["cancelled"] >= count


@pytest.mark.parametrize("target", ("run-py", "serve"))
async def test_stateless_cancel_is_prompt(target: str, tmp_path: Path, errlog) -> None:
    """At 2026-07-28 closing the POST is the cancellation: the server's tool is
    cancelled within 2 s, not after a drain."""
    async with front_for(target, tmp_path, errlog) as (front, prefix):
        async with client(front.url, STATELESS) as c:
            await _sleep_stats(c, prefix)  # the server is up
            with anyio.move_on_after(0.5):
                await c.call_tool(f"{prefix}sleep", {"seconds": 30})
            await eventually(lambda: _cancelled_at_least(c, prefix, 1), timeout=2, interval=0.1)


async def test_cancelled_request_stream_ends(tmp_path: Path, errlog) -> None:
    """Raw HTTP, legacy: once the client cancels a request, its POST ends
    (the server sends no response for it) instead of staying open."""
    async with front_for("run-py", tmp_path, errlog) as (front, _):
        async with httpx2.AsyncClient(timeout=httpx2.Timeout(10, read=20)) as http:
            headers = await _raw_session(http, front.url)
            call = {"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                    "params": {"name": "sleep", "arguments": {"seconds": 30}}}
            ended = anyio.Event()

            async def post_call() -> None:
                async with http.stream("POST", front.url, json=call, headers=headers) as stream:
                    await stream.aread()
                ended.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(post_call)
                await anyio.sleep(0.5)
                cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled",
                          "params": {"requestId": 5, "reason": "test"}}
                assert (await http.post(front.url, json=cancel, headers=headers)).status_code == 202
                with anyio.move_on_after(3):
                    await ended.wait()
                tg.cancel_scope.cancel()
            await http.delete(front.url, headers=headers)
            assert ended.is_set(), "the cancelled request's POST is still open 3 s after the cancel"


async def _raw_session(http: httpx2.AsyncClient, url: str) -> dict[str, str]:
    """initialize + initialized over raw HTTP; the headers for the session."""
    base = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": HANDSHAKE_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "interop-raw-http", "version": "1.0.0"},
        },
    }
    answer = await http.post(url, json=init, headers=base)
    assert answer.status_code == 200, answer.text
    headers = {**base, "mcp-session-id": answer.headers["mcp-session-id"], "mcp-protocol-version": HANDSHAKE_VERSION}
    note = await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
    assert note.status_code == 202
    return headers


# ---------------------------------------------------------------- sampling and elicitation


class Peer:
    def __init__(self) -> None:
        self.sampling_requests: list[dict] = []
        self.elicitation_requests: list[dict] = []

    async def sampling(self, _ctx, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        self.sampling_requests.append(params.model_dump(mode="json", by_alias=True, exclude_none=True))
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=SAMPLED_TEXT),
            model="interop-http-model",
            stop_reason="endTurn",
        )

    async def elicitation(self, _ctx, params) -> types.ElicitResult:
        self.elicitation_requests.append(params.model_dump(mode="json", by_alias=True, exclude_none=True))
        return types.ElicitResult(action="accept", content={"name": "Ada Lovelace", "check": True, "integer": 7})


@pytest.mark.parametrize("target", ("run-everything", "serve"))
async def test_sampling_and_elicitation(target: str, tmp_path: Path, errlog) -> None:
    """server-everything's requests to the client travel on the POST's event
    stream to the client's callbacks; their answers come back by POST."""
    peer = Peer()
    prefix = "everything__" if target == "serve" else ""
    async with front_for(target, tmp_path, errlog) as (front, _):
        async with client(
            front.url, LEGACY, sampling_callback=peer.sampling, elicitation_callback=peer.elicitation
        ) as c:
            await _has_tools(c, f"{prefix}trigger-sampling-request", f"{prefix}trigger-elicitation-request")
            sampled = await c.call_tool(f"{prefix}trigger-sampling-request", {"prompt": "say hi", "maxTokens": 12})
            elicited = await c.call_tool(f"{prefix}trigger-elicitation-request", {})
    (text,) = _texts(sampled)
    assert text.startswith("LLM sampling result:") and SAMPLED_TEXT in text and "interop-http-model" in text
    assert len(peer.sampling_requests) == 1
    assert peer.sampling_requests[0]["maxTokens"] == 12
    assert peer.sampling_requests[0]["messages"][0]["content"]["text"] == (
        "Resource trigger-sampling-request context: say hi"
    )
    texts = _texts(elicited)
    assert texts[0] == "✅ User provided the requested information!"
    assert "- Name: Ada Lovelace" in texts[1] and "- Favorite Integer: 7" in texts[1]
    assert len(peer.elicitation_requests) == 1
    assert peer.elicitation_requests[0]["message"] == "Please provide inputs for the following fields:"


async def _has_tools(c: Client, *names: str) -> None:
    await eventually(lambda: _has(c, set(names)), timeout=15, interval=0.1)


# ---------------------------------------------------------------- a worker crash


async def test_serve_crash_fails_only_that_sessions_call(tmp_path: Path, errlog) -> None:
    """kill -9 of the Python server while session A's call runs on it: A's call
    fails with -32010 ("stopped with the request in flight"); session B's
    concurrent call on server-everything succeeds, progress and all; both
    sessions go on, A's next call reaching a new process."""
    async with front_for("serve", tmp_path, errlog) as (front, _):
        async with client(front.url, LEGACY) as a, client(front.url, LEGACY) as b:
            await _has_tools(a, "py__sleep", "py__pid")
            await _has_tools(b, "everything__trigger-long-running-operation")
            old = int(_text(await a.call_tool("py__pid", {})))
            outcome: dict[str, Any] = {}
            b_progress: list[float] = []

            async def on_b_progress(progress: float, _total: float | None, _message: str | None) -> None:
                b_progress.append(progress)

            async def call_a() -> None:
                try:
                    outcome["a"] = await a.call_tool("py__sleep", {"seconds": 30})
                except MCPError as exc:
                    outcome["a"] = exc

            async def call_b() -> None:
                outcome["b"] = await b.call_tool(
                    "everything__trigger-long-running-operation",
                    {"duration": 2, "steps": 4},
                    progress_callback=on_b_progress,
                )

            async with anyio.create_task_group() as tg:
                tg.start_soon(call_a)
                tg.start_soon(call_b)
                await eventually(lambda: _started_at_least(a, 1), timeout=10, interval=0.05)
                await eventually(lambda: bool(b_progress), timeout=10, interval=0.05)
                assert "b" not in outcome
                sigkill(old)
                await wait_dead(old)
            error = outcome["a"]
            assert isinstance(error, MCPError), error
            assert error.code in WORKER_LOST_CODES, error
            assert _texts(outcome["b"]) == ["Long running operation completed. Duration: 2 seconds, Steps: 4."]
            assert b_progress == [1.0, 2.0, 3.0, 4.0]
            with anyio.fail_after(15):
                new = int(_text(await a.call_tool("py__pid", {})))
            assert new != old and alive(new)
            assert _text(await b.call_tool("py__echo", {"text": "b goes on"})) == "b goes on"


async def _started_at_least(c: Client, count: int) -> bool:
    return (await _sleep_stats(c, "py__"))["started"] >= count


async def test_run_crash_fails_only_that_sessions_call(tmp_path: Path, errlog) -> None:
    """`run --http` has one worker for every session: the `crash` tool ends it
    mid-call. Only the call in flight fails (-32010); session B, which had
    nothing in flight, keeps its session and its calls succeed while and
    after the worker restarts, as do A's."""
    async with front_for("run-py", tmp_path, errlog) as (front, _):
        rec_a, rec_b = Recorder(), Recorder()
        async with client(front.url, LEGACY, rec_a) as a, client(front.url, LEGACY, rec_b) as b:
            old = int(_text(await a.call_tool("pid", {})))
            assert _text(await b.call_tool("echo", {"text": "before"})) == "before"
            outcome: dict[str, Any] = {}

            async def call_a() -> None:
                try:
                    outcome["a"] = await a.call_tool("crash", {"code": 9})
                except MCPError as exc:
                    outcome["a"] = exc

            async def b_during() -> None:
                # B's calls go on while A's worker dies and a new one starts.
                await wait_dead(old)
                outcome["b"] = await b.call_tool("echo", {"text": "during"})

            with anyio.fail_after(20):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(call_a)
                    tg.start_soon(b_during)
            error = outcome["a"]
            assert isinstance(error, MCPError), error
            assert error.code in WORKER_LOST_CODES, error
            assert _text(outcome["b"]) == "during"
            new = int(_text(await b.call_tool("pid", {})))
            assert new != old
            assert _text(await a.call_tool("echo", {"text": "a after"})) == "a after"
        # Neither session was replaced: each kept the one id it got.
        for rec in (rec_a, rec_b):
            ids = {h.get("mcp-session-id") for body, h in rec.posts if body.get("method") != "initialize"}
            assert len(ids) == 1 and None not in ids, ids


# ---------------------------------------------------------------- two sessions, same ids


@pytest.mark.parametrize("mode", _modes())
@pytest.mark.parametrize("target", ("run-py", "serve"))
async def test_two_sessions_same_ids_no_cross_talk(target: str, mode: str, tmp_path: Path, errlog) -> None:
    """Two clients whose calls carry the same JSON-RPC ids and progress tokens,
    in flight at once: each gets its own progress and its own result."""
    steps = {"a": 3, "b": 7}
    recs = {"a": Recorder(), "b": Recorder()}
    seen: dict[str, list[tuple[float, float | None]]] = {"a": [], "b": []}
    results: dict[str, types.CallToolResult] = {}
    async with front_for(target, tmp_path, errlog) as (front, prefix):
        async with client(front.url, mode, recs["a"]) as a, client(front.url, mode, recs["b"]) as b:
            clients = {"a": a, "b": b}

            async def run(who: str) -> None:
                async def on_progress(progress: float, total: float | None, _message: str | None) -> None:
                    seen[who].append((progress, total))

                results[who] = await clients[who].call_tool(
                    f"{prefix}progress", {"steps": steps[who]}, progress_callback=on_progress
                )

            for _ in range(3):
                for who in seen:
                    seen[who].clear()
                async with anyio.create_task_group() as tg:
                    tg.start_soon(run, "a")
                    tg.start_soon(run, "b")
                for who, n in steps.items():
                    assert _text(results[who]) == f"done {n}"
                    assert seen[who] == [(float(i), float(n)) for i in range(1, n + 1)], (who, seen[who])
    calls = {who: rec.calls(f"{prefix}progress") for who, rec in recs.items()}
    ids = {who: [body["id"] for body in bodies] for who, bodies in calls.items()}
    tokens = {who: [body["params"]["_meta"]["progressToken"] for body in bodies] for who, bodies in calls.items()}
    assert ids["a"] == ids["b"] and len(ids["a"]) == 3, ids
    assert tokens["a"] == tokens["b"], tokens


# ---------------------------------------------------------------- stateless


@pytest.mark.parametrize("target", ("run-py", "serve"))
async def test_stateless_client(target: str, tmp_path: Path, errlog) -> None:
    """A 2026-07-28 client lists and calls with no session at all: no
    `initialize`, no `Mcp-Session-Id` either way, no GET stream."""
    rec = Recorder()
    async with front_for(target, tmp_path, errlog) as (front, prefix):
        async with client(front.url, STATELESS, rec) as c:
            assert c.protocol_version == STATELESS
            names = await _names(c)
            assert {prefix + t for t in PY_TOOLS} <= names
            assert _text(await c.call_tool(f"{prefix}echo", {"text": "stateless"})) == "stateless"
            assert _text(await c.call_tool(f"{prefix}progress", {"steps": 2})) == "done 2"
    methods = [body.get("method") for body, _ in rec.posts]
    assert "initialize" not in methods and "tools/list" in methods and "tools/call" in methods, methods
    assert all("mcp-session-id" not in h for _, h in rec.posts)
    assert all(h.get("mcp-protocol-version") == STATELESS for _, h in rec.posts)
    assert all("mcp-session-id" not in h for _, _, h in rec.responses)
    assert [m for m, _ in rec.requests if m != "POST"] == []


# ---------------------------------------------------------------- resumption


def _sse_parse(lines: list[str]) -> list[tuple[str | None, str]]:
    """Complete events (id, data) of an event stream's lines; a priming
    event (an id with empty data, 2025-11-25) is not a message."""
    events, ev_id, data = [], None, []
    for line in lines:
        if line == "":
            if data and data != [""]:
                events.append((ev_id, "\n".join(data)))
            ev_id, data = None, []
        elif line.startswith(":"):
            continue
        else:
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "data":
                data.append(value)
            elif name == "id":
                ev_id = value
    return events


async def _read_events(response: httpx2.Response, stop) -> list[tuple[str | None, dict]]:
    """Reads events until `stop(message)` is true for one; returns them all."""
    out: list[tuple[str | None, dict]] = []
    pending: list[str] = []
    async for line in response.aiter_lines():
        pending.append(line)
        if line != "":
            continue
        for ev_id, data in _sse_parse(pending):
            message = json.loads(data)
            out.append((ev_id, message))
            if stop(message):
                return out
        pending = []
    return out


async def test_resume_after_dropped_stream(tmp_path: Path, errlog) -> None:
    """Raw HTTP: a long call with progress; the client reads one event and
    drops the connection; GET with Last-Event-ID gives the rest of that
    stream, ending with the response; nothing is repeated or lost."""
    async with front_for("run-everything", tmp_path, errlog) as (front, _):
        async with httpx2.AsyncClient(timeout=httpx2.Timeout(10, read=20)) as http:
            base = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
            init = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": HANDSHAKE_VERSION,
                    "capabilities": {},
                    "clientInfo": {"name": "interop-raw-http", "version": "1.0.0"},
                },
            }
            answer = await http.post(front.url, json=init, headers=base)
            assert answer.status_code == 200, answer.text
            session = answer.headers["mcp-session-id"]
            headers = {**base, "mcp-session-id": session, "mcp-protocol-version": HANDSHAKE_VERSION}
            note = await http.post(
                front.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers
            )
            assert note.status_code == 202
            call = {
                "jsonrpc": "2.0",
                "id": 7,
                "method": "tools/call",
                "params": {
                    "name": "trigger-long-running-operation",
                    "arguments": {"duration": 2, "steps": 4},
                    "_meta": {"progressToken": "resume-me"},
                },
            }
            is_response = lambda m: m.get("id") == 7 and ("result" in m or "error" in m)  # noqa: E731
            async with http.stream("POST", front.url, json=call, headers=headers) as stream:
                assert stream.status_code == 200
                assert stream.headers["content-type"].startswith("text/event-stream")
                first = await _read_events(stream, lambda m: True)
            # The connection is gone (closed with one event read).
            assert len(first) == 1
            first_id, first_msg = first[0]
            assert first_id, "events carry ids for resumption"
            assert first_msg["method"] == "notifications/progress"
            assert first_msg["params"]["progressToken"] == "resume-me"
            get_headers = {
                "accept": "text/event-stream",
                "mcp-session-id": session,
                "mcp-protocol-version": HANDSHAKE_VERSION,
                "last-event-id": first_id,
            }
            async with http.stream("GET", front.url, headers=get_headers) as resumed:
                assert resumed.status_code == 200, await resumed.aread()
                rest = await _read_events(resumed, is_response)
            assert rest and is_response(rest[-1][1]), rest
            messages = [m for _, m in first + rest]
            ids = [i for i, _ in first + rest]
            assert len(ids) == len(set(ids)), ids
            progress = [m["params"]["progress"] for m in messages if m.get("method") == "notifications/progress"]
            assert progress == [1, 2, 3, 4], messages
            assert all(
                m["params"]["progressToken"] == "resume-me"
                for m in messages
                if m.get("method") == "notifications/progress"
            )
            texts = [c["text"] for c in messages[-1]["result"]["content"]]
            assert texts == ["Long running operation completed. Duration: 2 seconds, Steps: 4."]
            # A stream already resumed to its end is not replayed twice, and the
            # session goes on.
            ping = await http.post(front.url, json={"jsonrpc": "2.0", "id": 8, "method": "ping"}, headers=headers)
            assert ping.status_code == 200
            await http.delete(front.url, headers=headers)


# ---------------------------------------------------------------- the TypeScript SDK client


@pytest.mark.parametrize("target", ("run-py", "serve"))
async def test_typescript_sdk_client(target: str, tmp_path: Path, errlog) -> None:
    """http_ts_client.mjs: the TypeScript SDK's StreamableHTTPClientTransport
    connects, lists and calls."""
    async with front_for(target, tmp_path, errlog) as (front, prefix):
        env = dict(os.environ)
        env[TAG_VAR] = process_tag()
        env["INTEROP_NPM_PREFIX"] = str(CACHE / "npm")
        with anyio.fail_after(30):
            done = await anyio.run_process(
                [node_bin(), str(TS_CLIENT), front.url, f"{prefix}echo", json.dumps({"text": "from typescript"})],
                env=env,
                check=False,
            )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    out = json.loads(done.stdout)
    assert out["sessionId"], out
    assert {prefix + t for t in PY_TOOLS} <= set(out["tools"]), out["tools"]
    if target == "serve":
        assert any(t.startswith("everything__") for t in out["tools"]), out["tools"]
    assert out["result"]["content"] == [{"type": "text", "text": "from typescript"}], out["result"]


class DroppingProxy:
    """A TCP proxy in front of mcpvisor that cuts, once, the connection whose
    request carried `marker`, right after the first progress event came back
    on it: a dropped SSE stream, as the client sees one."""

    def __init__(self, upstream_port: int, marker: bytes) -> None:
        self.upstream_port = upstream_port
        self.marker = marker
        self.dropped = False
        self.port = 0

    async def run(self, *, task_status=anyio.TASK_STATUS_IGNORED) -> None:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        self.port = listener.extra(anyio.abc.SocketAttribute.local_port)
        task_status.started()
        await listener.serve(self._connection)

    async def _connection(self, downstream) -> None:
        async with downstream, await anyio.connect_tcp("127.0.0.1", self.upstream_port) as upstream:
            marked = anyio.Event()
            async with anyio.create_task_group() as tg:

                async def requests() -> None:
                    seen = b""
                    with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                        while True:
                            chunk = await downstream.receive()
                            seen = (seen + chunk)[-4096:]
                            if not self.dropped and self.marker in seen:
                                marked.set()
                            await upstream.send(chunk)
                    tg.cancel_scope.cancel()

                async def answers() -> None:
                    held = b""
                    with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                        while True:
                            chunk = await upstream.receive()
                            if not marked.is_set() or self.dropped:
                                await downstream.send(chunk)
                                continue
                            held += chunk
                            at = held.find(b"notifications/progress")
                            end = held.find(b"\n\n", at) if at >= 0 else -1
                            if end < 0:
                                continue
                            # The event, and the end of its HTTP chunk; then cut.
                            crlf = held.find(b"\r\n", end + 2)
                            cut = crlf + 2 if crlf >= 0 else end + 2
                            await downstream.send(held[:cut])
                            self.dropped = True
                            break
                    tg.cancel_scope.cancel()

                tg.start_soon(requests)
                tg.start_soon(answers)


async def test_sdk_resumes_a_dropped_stream(tmp_path: Path, errlog) -> None:
    """The Python SDK client's own resumption: the stream of a long call is cut
    after its first progress event; the client reconnects with GET and
    Last-Event-ID and gets every other progress event once, then the result."""
    seen: list[float] = []

    async def on_progress(progress: float, _total: float | None, _message: str | None) -> None:
        seen.append(progress)

    rec = Recorder()
    async with front_for("run-everything", tmp_path, errlog) as (front, _):
        port = int(re.search(r":(\d+)/", front.url).group(1))
        proxy = DroppingProxy(port, b"trigger-long-running-operation")
        async with anyio.create_task_group() as tg:
            await tg.start(proxy.run)
            url = front.url.replace(f":{port}/", f":{proxy.port}/")
            async with client(url, LEGACY, rec) as c:
                await _has_tools(c, "trigger-long-running-operation")
                result = await c.call_tool(
                    "trigger-long-running-operation", {"duration": 3, "steps": 6}, progress_callback=on_progress
                )
                assert _text(await c.call_tool("echo", {"message": "after"})) == "Echo: after"
            tg.cancel_scope.cancel()
    assert proxy.dropped
    assert _texts(result) == ["Long running operation completed. Duration: 3 seconds, Steps: 6."]
    assert seen == [float(i) for i in range(1, 7)]
    resumed = [h for m, h in rec.requests if m == "GET" and "last-event-id" in h]
    assert len(resumed) == 1, rec.requests


async def test_sdk_polls_a_stream_the_server_closes(tmp_path: Path, errlog) -> None:
    """2025-11-25 SSE polling: with `--http-sse-poll`, a call that sends
    nothing for longer than that gets a stream of only its priming event
    (an event id, empty data, `retry`), which the server then closes; the
    Python SDK client comes back with GET and Last-Event-ID after `retry`,
    as often as the server closes it, until the result. A call with
    progress is polled the same way and loses no event."""
    seen: list[float] = []

    async def on_progress(progress: float, _total: float | None, _message: str | None) -> None:
        seen.append(progress)

    rec = Recorder()
    args = ["run", "--http", "127.0.0.1:0", "--http-sse-poll", "300ms", "--http-sse-retry", "100ms"]
    async with http_front([*args, *mcpvisor_flags(), "--", *PY_CMD], errlog) as front:
        async with client(front.url, LEGACY, rec) as c:
            assert c.protocol_version == HANDSHAKE_VERSION
            assert _text(await c.call_tool("sleep", {"seconds": 1.2})) == "slept 1.2"
            resumed = [h["last-event-id"] for m, h in rec.requests if m == "GET" and "last-event-id" in h]
            # Primed, then held 300 ms per connection: at least three visits.
            assert len(resumed) >= 2, rec.requests
            assert resumed[0].endswith("-0"), resumed
            result = await c.call_tool("progress", {"steps": 40}, progress_callback=on_progress)
            assert _text(result) == "done 40"
            assert _text(await c.call_tool("echo", {"text": "after"})) == "after"
    assert seen == [float(i) for i in range(1, 41)]


# ---------------------------------------------------------------- the 2024-11-05 HTTP+SSE transport


def _sse_url(front: Front) -> str:
    return front.url.rsplit("/", 1)[0] + "/sse"


@pytest.mark.parametrize("target", ("run-py", "serve"))
async def test_old_sse_client(target: str, tmp_path: Path, errlog) -> None:
    """The Python SDK's client of the 2024-11-05 HTTP+SSE transport
    (`mcp.client.sse`): GET /sse, the `endpoint` event, POSTs answered 202
    and the answers on the stream; progress comes on it too."""
    seen: list[float] = []

    async def on_progress(progress: float, _total: float | None, _message: str | None) -> None:
        seen.append(progress)

    async with front_for(target, tmp_path, errlog) as (front, prefix):
        async with Client(sse_client(_sse_url(front)), mode=LEGACY, cache=None) as c:
            names = await _names(c)
            assert {prefix + t for t in PY_TOOLS} <= names
            assert _text(await c.call_tool(f"{prefix}echo", {"text": "old sse"})) == "old sse"
            result = await c.call_tool(f"{prefix}progress", {"steps": 3}, progress_callback=on_progress)
            assert _text(result) == "done 3"
        # A second old client, beside a Streamable HTTP one, keeps its own ids.
        async with Client(sse_client(_sse_url(front)), mode=LEGACY, cache=None) as old, client(front.url, LEGACY) as new:
            async with anyio.create_task_group() as tg:
                got: dict[str, str] = {}

                async def call(c: Client, who: str) -> None:
                    got[who] = _text(await c.call_tool(f"{prefix}echo", {"text": who}))

                tg.start_soon(call, old, "old")
                tg.start_soon(call, new, "new")
            assert got == {"old": "old", "new": "new"}
    assert seen == [1.0, 2.0, 3.0]


async def test_old_sse_client_needs_the_token(tmp_path: Path, errlog) -> None:
    """GET /sse and its POSTs are checked like the endpoint: with
    --auth-token-file, no token means 401 and the client cannot connect."""
    token = tmp_path / "token"
    token.write_text("s3cret-for-sse\n")
    args = ["run", "--http", "127.0.0.1:0", "--auth-token-file", str(token), *mcpvisor_flags(), "--", *PY_CMD]
    async with http_front(args, errlog) as front:
        with pytest.raises(Exception) as excinfo:  # noqa: PT011 - the SDK wraps the 401 in a group
            with anyio.fail_after(15):
                async with Client(sse_client(_sse_url(front)), mode=LEGACY, cache=None) as c:
                    await _names(c)
        assert "401" in repr(excinfo.value), excinfo.value
        headers = {"Authorization": "Bearer s3cret-for-sse"}
        async with Client(sse_client(_sse_url(front), headers=headers), mode=LEGACY, cache=None) as c:
            assert _text(await c.call_tool("echo", {"text": "with token"})) == "with token"
