"""Scenario 2: Python SDK client -> @modelcontextprotocol/server-everything (stdio),
DIRECT and THROUGH mcpvisor.

server-everything is a legacy-only (TypeScript SDK) server: in the client's
default `auto` mode the `server/discover` probe is answered -32601 and the
client falls back to `initialize`. After `notifications/initialized` it
registers its capability-dependent tools (one `notifications/tools/list_changed`
each) and ~350 ms later asks the client for `roots/list`.
"""

from __future__ import annotations

import json
import warnings
from typing import Any

import anyio
import mcp.types as types
import pytest
from interop_util import (
    WORKER_DIED,
    assert_lists_advertised,
    connect,
    eventually,
    everything_params,
    normalised_capabilities,
    server_process,
    sigkill,
    wait_dead,
)
from mcp.shared.exceptions import MCPError

# server-everything 2026.8.31, for a client with sampling, elicitation and roots.
EXPECTED_TOOLS = [
    "echo",
    "get-annotated-message",
    "get-env",
    "get-resource-links",
    "get-resource-reference",
    "get-structured-content",
    "get-sum",
    "get-tiny-image",
    "gzip-file-as-resource",
    "toggle-simulated-logging",
    "toggle-subscriber-updates",
    "trigger-long-running-operation",
    "get-roots-list",
    "trigger-elicitation-request",
    "trigger-url-elicitation",
    "trigger-sampling-request",
    "simulate-research-query",
]
ROOTS = [types.Root(uri="file:///interop/everything", name="everything-root")]
SAMPLED_TEXT = "sampled by the interop client"


class Peer:
    """Client-side callbacks and a record of what the server sent us."""

    def __init__(self) -> None:
        self.notifications: list[str] = []
        self.log_messages: list[Any] = []
        self.roots_requests = 0
        self.sampling_requests: list[dict] = []
        self.elicitation_requests: list[dict] = []

    async def message_handler(self, message) -> None:
        if isinstance(message, types.ServerNotification):
            self.notifications.append(message.method)
            if isinstance(message, types.LoggingMessageNotification):
                self.log_messages.append(message.params.data)

    async def list_roots(self, _ctx) -> types.ListRootsResult:
        self.roots_requests += 1
        return types.ListRootsResult(roots=ROOTS)

    async def sampling(self, _ctx, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        self.sampling_requests.append(params.model_dump(mode="json", by_alias=True, exclude_none=True))
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=SAMPLED_TEXT),
            model="interop-fake-model",
            stop_reason="endTurn",
        )

    async def elicitation(self, _ctx, params) -> types.ElicitResult:
        self.elicitation_requests.append(params.model_dump(mode="json", by_alias=True, exclude_none=True))
        return types.ElicitResult(action="accept", content={"name": "Ada Lovelace", "check": True, "integer": 7})

    def client(self, route: str, errlog, mode: str = "auto"):
        return connect(
            everything_params(route),
            errlog,
            mode=mode,
            message_handler=self.message_handler,
            list_roots_callback=self.list_roots,
            sampling_callback=self.sampling,
            elicitation_callback=self.elicitation,
        )

    async def settled(self) -> None:
        """Wait for the post-initialized burst: list_changed x5, roots/list, the log line."""
        await eventually(lambda: self.roots_requests >= 1 and len(self.log_messages) >= 1, timeout=10)


def _texts(result: types.CallToolResult) -> list[str]:
    assert not result.is_error, result
    return [c.text for c in result.content if isinstance(c, types.TextContent)]


@pytest.mark.parametrize("mode", ("auto", "legacy"))
async def test_startup_burst_and_tools(route: str, mode: str, errlog, observed) -> None:
    peer = Peer()
    async with peer.client(route, errlog, mode) as client:
        assert client.protocol_version == "2025-11-25"
        assert client.server_capabilities.tools is not None and client.server_capabilities.tools.list_changed
        await peer.settled()
        listing = await client.list_tools()
        assert [t.name for t in listing.tools] == EXPECTED_TOOLS
        echo = await client.call_tool("echo", {"message": "through everything"})
        assert _texts(echo) == ["Echo: through everything"]
        capabilities = client.server_capabilities.model_dump(mode="json", by_alias=True, exclude_none=True)
        if route == "mcpvisor":
            assert_lists_advertised(capabilities)
        instructions = client.instructions
    burst = peer.notifications[: peer.notifications.index("notifications/message")]
    assert burst == ["notifications/tools/list_changed"] * 5, peer.notifications
    assert peer.roots_requests == 1
    assert peer.log_messages == ["Roots updated: 1 root(s) received from client"]
    observed.check(
        route,
        f"everything/startup/{mode}",
        {
            "notifications": peer.notifications,
            "tools": [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in listing.tools],
            "capabilities": normalised_capabilities(capabilities),
            "instructions": instructions,
        },
    )


async def test_long_running_progress(route: str, errlog, observed) -> None:
    peer = Peer()
    seen: list[tuple[float, float | None]] = []

    async def on_progress(progress: float, total: float | None, _message: str | None) -> None:
        seen.append((progress, total))

    async with peer.client(route, errlog) as client:
        result = await client.call_tool(
            "trigger-long-running-operation", {"duration": 0.5, "steps": 5}, progress_callback=on_progress
        )
    assert _texts(result) == ["Long running operation completed. Duration: 0.5 seconds, Steps: 5."]
    assert seen == [(float(i), 5.0) for i in range(1, 6)]
    observed.check(route, "everything/progress", seen)


async def test_long_running_cancel(route: str, errlog, observed) -> None:
    """Cancel part-way: the caller abandons the call after 2 of 8 progress steps.
    server-everything ignores the cancellation and keeps sending progress
    (PROTOCOL.md) but, like every TypeScript SDK server, never answers the
    cancelled request. DIRECT, the late progress reaches the client (the SDK
    hands it to message_handler); mcpvisor drops progress for a request that is
    no longer live. Either way the session stays healthy."""
    peer = Peer()
    seen: list[float] = []
    two_steps = anyio.Event()

    async def on_progress(progress: float, _total: float | None, _message: str | None) -> None:
        seen.append(progress)
        if len(seen) >= 2:
            two_steps.set()

    async with peer.client(route, errlog) as client:
        async with anyio.create_task_group() as tg:

            async def call() -> None:
                await client.call_tool(
                    "trigger-long-running-operation", {"duration": 1.6, "steps": 8}, progress_callback=on_progress
                )

            tg.start_soon(call)
            with anyio.fail_after(10):
                await two_steps.wait()
            tg.cancel_scope.cancel()
        at_cancel = len(seen)
        notes_at_cancel = len(peer.notifications)
        # Let the server run its abandoned operation to the end.
        await anyio.sleep(1.8)
        result = await client.call_tool("echo", {"message": "still alive"})
        assert _texts(result) == ["Echo: still alive"]
    assert 2 <= at_cancel <= 3
    # The progress callback belongs to the abandoned request: nothing more reaches it.
    assert len(seen) == at_cancel
    late = peer.notifications[notes_at_cancel:]
    assert set(late) <= {"notifications/progress"}, late
    if route == "direct":
        assert len(late) >= 8 - at_cancel - 1, late
    else:
        assert late == [], "mcpvisor forwarded progress for a cancelled request"
    observed.check(route, "everything/cancel/echo", _texts(result))


async def test_sampling(route: str, errlog, observed) -> None:
    peer = Peer()
    async with peer.client(route, errlog) as client:
        result = await client.call_tool("trigger-sampling-request", {"prompt": "say hi", "maxTokens": 12})
    (text,) = _texts(result)
    assert text.startswith("LLM sampling result:") and SAMPLED_TEXT in text and "interop-fake-model" in text
    assert len(peer.sampling_requests) == 1
    request = peer.sampling_requests[0]
    assert request["maxTokens"] == 12
    assert request["messages"][0]["content"]["text"] == "Resource trigger-sampling-request context: say hi"
    observed.check(route, "everything/sampling", {"text": text, "request": request})


async def test_elicitation(route: str, errlog, observed) -> None:
    peer = Peer()
    async with peer.client(route, errlog) as client:
        result = await client.call_tool("trigger-elicitation-request", {})
    texts = _texts(result)
    assert texts[0] == "✅ User provided the requested information!"
    assert "- Name: Ada Lovelace" in texts[1] and "- Favorite Integer: 7" in texts[1]
    assert len(peer.elicitation_requests) == 1
    assert peer.elicitation_requests[0]["message"] == "Please provide inputs for the following fields:"
    observed.check(route, "everything/elicitation", {"texts": texts, "request": peer.elicitation_requests})


async def test_roots(route: str, errlog, observed) -> None:
    peer = Peer()
    async with peer.client(route, errlog) as client:
        await peer.settled()
        result = await client.call_tool("get-roots-list", {})
    (text,) = _texts(result)
    assert "Current MCP Roots (1 total)" in text and "file:///interop/everything" in text
    assert peer.roots_requests == 1  # answered once at start-up, then served from the server's cache
    observed.check(route, "everything/roots", text)


async def test_crash_mid_call(route: str, errlog, observed) -> None:
    """SIGKILL the server during a long-running call. Through mcpvisor the call gets
    -32010 and the next call succeeds on a new worker that got the replayed
    handshake (so it registers the same capability-dependent tools and asks for
    roots again). DIRECT, the session dies with its server."""
    peer = Peer()
    async with peer.client(route, errlog) as client:
        await peer.settled()
        before = [t.name for t in (await client.list_tools()).tools]
        old = server_process(route, "server-everything")
        progressed = anyio.Event()
        outcome: dict[str, object] = {}

        async def on_progress(*_args) -> None:
            progressed.set()

        async def call() -> None:
            try:
                outcome["result"] = await client.call_tool(
                    "trigger-long-running-operation", {"duration": 20, "steps": 40}, progress_callback=on_progress
                )
            except MCPError as exc:
                outcome["error"] = exc

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            with anyio.fail_after(10):
                await progressed.wait()
            sigkill(old)
            await wait_dead(old)
        error = outcome.get("error")
        assert isinstance(error, MCPError), outcome
        if route == "direct":
            assert error.code == types.CONNECTION_CLOSED, error
            observed.check(route, "everything/crash/tools", before)
            return
        assert error.code == WORKER_DIED, error
        with anyio.fail_after(15):
            result = await client.call_tool("echo", {"message": "after crash"})
        assert _texts(result) == ["Echo: after crash"]
        new = server_process(route, "server-everything")
        assert new != old
        after = [t.name for t in (await client.list_tools()).tools]
        assert after == before == EXPECTED_TOOLS
        # The replacement worker asks for roots again after the replayed handshake.
        await eventually(lambda: peer.roots_requests >= 2, timeout=10)
        result = await client.call_tool("get-roots-list", {})
        assert "file:///interop/everything" in _texts(result)[0]
    observed.check(route, "everything/crash/tools", before)


async def test_crash_while_client_answers_elicitation(route: str, errlog) -> None:
    """The server dies while its elicitation/create request waits on the client.
    Through mcpvisor: the tool call gets -32010, the client is told (via
    notifications/cancelled) that the server-to-client request is void, so its
    elicitation callback is cancelled, and the next call works."""
    peer = Peer()
    asked = anyio.Event()
    callback_cancelled = anyio.Event()

    async def slow_elicitation(_ctx, _params) -> types.ElicitResult:
        asked.set()
        try:
            await anyio.sleep(30)
        except anyio.get_cancelled_exc_class():
            callback_cancelled.set()
            raise
        return types.ElicitResult(action="decline")

    peer.elicitation = slow_elicitation  # type: ignore[method-assign]
    async with peer.client(route, errlog) as client:
        await peer.settled()
        old = server_process(route, "server-everything")
        outcome: dict[str, object] = {}

        async def call() -> None:
            try:
                outcome["result"] = await client.call_tool("trigger-elicitation-request", {})
            except MCPError as exc:
                outcome["error"] = exc

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            with anyio.fail_after(10):
                await asked.wait()
            sigkill(old)
            await wait_dead(old)
        error = outcome.get("error")
        assert isinstance(error, MCPError), outcome
        if route == "direct":
            assert error.code == types.CONNECTION_CLOSED, error
            return
        assert error.code == WORKER_DIED, error
        with anyio.fail_after(5):
            await callback_cancelled.wait()
        result = await client.call_tool("echo", {"message": "after"})
        assert _texts(result) == ["Echo: after"]


async def test_feature_sweep(route: str, errlog, observed) -> None:
    """The rest of the legacy surface, compared DIRECT vs mcpvisor: prompts,
    completions, resources and templates, ping, logging/setLevel, subscriptions."""
    peer = Peer()
    async with peer.client(route, errlog, "legacy") as client:
        await peer.settled()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ping/logging/subscribe are deprecated in 2026-07-28
            ping = await client.send_ping()
            level = await client.set_logging_level("error")
            resources = await client.list_resources()
            first = resources.resources[0].uri
            subscribed = await client.subscribe_resource(first)
            unsubscribed = await client.unsubscribe_resource(first)
        prompts = await client.list_prompts()
        prompt = await client.get_prompt("args-prompt", {"city": "Paris", "state": "TX"})
        completion = await client.complete(
            types.PromptReference(type="ref/prompt", name="completable-prompt"),
            {"name": "department", "value": "E"},
        )
        templates = await client.list_resource_templates()
        read = await client.read_resource(first)

    def dump(model) -> object:
        return model.model_dump(mode="json", by_alias=True, exclude_none=True)

    seen = {
        "ping": dump(ping),
        "level": dump(level),
        "subscribe": [dump(subscribed), dump(unsubscribed)],
        "prompts": dump(prompts),
        "prompt": dump(prompt),
        "completion": dump(completion),
        "resources": dump(resources),
        "templates": dump(templates),
        "read": dump(read),
    }
    assert [p["name"] for p in seen["prompts"]["prompts"]] == [
        "simple-prompt",
        "args-prompt",
        "completable-prompt",
        "resource-prompt",
    ]
    assert "Paris" in json.dumps(seen["prompt"])
    assert seen["completion"]["completion"]["values"], seen["completion"]
    assert seen["read"]["contents"], seen["read"]
    observed.check(route, "everything/sweep", seen)
