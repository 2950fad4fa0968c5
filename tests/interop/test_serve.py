"""Scenario: Python SDK client -> `mcpvisor serve --config F`, where F lists
@modelcontextprotocol/server-everything, server-filesystem and the Python SDK
fixture server: one MCP server whose tools are `SERVER__NAME`.

The client connects in `legacy` mode (the `initialize` handshake) wherever a
server asks the client something (sampling, elicitation, roots): a 2026-07-28
connection has no server-to-client requests on stdio. Naming and routing are
checked in both modes.
"""

from __future__ import annotations

import json
import warnings
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from interop_util import (
    EVERYTHING_JS,
    FILESYSTEM_JS,
    PY_SERVER,
    WORKER_LOST_CODES,
    connect,
    eventually,
    node_bin,
    serve_params,
    server_processes,
    sigkill,
    wait_dead,
)
from mcp.shared.exceptions import MCPError
from test_everything import EXPECTED_TOOLS as EVERYTHING_TOOLS
from test_filesystem import EXPECTED_TOOLS as FILESYSTEM_TOOLS
from test_py_server import EXPECTED_TOOLS as PY_TOOLS

SERVERS = {"everything": EVERYTHING_TOOLS, "filesystem": FILESYSTEM_TOOLS, "py": PY_TOOLS}
EXPECTED_TOOLS = {f"{server}__{tool}" for server, tools in SERVERS.items() for tool in tools}
SAMPLED_TEXT = "sampled by the interop client through the gateway"


class Setup:
    """A config file with the three servers; the filesystem server is started
    on `served` and the client offers `root` as its root."""

    def __init__(self, tmp_path: Path) -> None:
        self.served = (tmp_path / "served").resolve()
        self.served.mkdir()
        (self.served / "hello.txt").write_text("hello through the gateway\n")
        (self.served / "sub").mkdir()
        self.root = (tmp_path / "root").resolve()
        self.root.mkdir()
        (self.root / "from-roots.txt").write_text("offered as a root\n")
        self.config = tmp_path / "mcp.json"
        servers = {
            "everything": {"command": node_bin(), "args": [str(EVERYTHING_JS), "stdio"]},
            "filesystem": {"command": node_bin(), "args": [str(FILESYSTEM_JS), str(self.served)]},
            "py": {"command": sys.executable, "args": ["-u", str(PY_SERVER)]},
        }
        self.config.write_text(json.dumps({"mcpServers": servers}, indent=2))


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    return Setup(tmp_path)


class Peer:
    """The client's callbacks, and a record of what reached them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.notifications: list[str] = []
        self.roots_requests = 0
        self.sampling_requests: list[dict] = []
        self.elicitation_requests: list[dict] = []

    async def message_handler(self, message) -> None:
        if isinstance(message, types.ServerNotification):
            self.notifications.append(message.method)

    async def list_roots(self, _ctx) -> types.ListRootsResult:
        self.roots_requests += 1
        return types.ListRootsResult(roots=[types.Root(uri=self.root.as_uri(), name="gateway-root")])

    async def sampling(self, _ctx, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        self.sampling_requests.append(params.model_dump(mode="json", by_alias=True, exclude_none=True))
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=SAMPLED_TEXT),
            model="interop-gateway-model",
            stop_reason="endTurn",
        )

    async def elicitation(self, _ctx, params) -> types.ElicitResult:
        self.elicitation_requests.append(params.model_dump(mode="json", by_alias=True, exclude_none=True))
        return types.ElicitResult(action="accept", content={"name": "Grace Hopper", "check": True, "integer": 11})

    def client(self, setup: Setup, errlog, mode: str = "legacy", *, roots: bool = True):
        """A client of the gateway; without `roots` it declares no roots, so
        server-filesystem keeps serving the directory it was started on."""
        return connect(
            serve_params(setup.config),
            errlog,
            mode=mode,
            message_handler=self.message_handler,
            list_roots_callback=self.list_roots if roots else None,
            sampling_callback=self.sampling,
            elicitation_callback=self.elicitation,
        )


def _texts(result: types.CallToolResult) -> list[str]:
    assert not result.is_error, result
    return [c.text for c in result.content if isinstance(c, types.TextContent)]


async def _tool_names(client) -> set[str]:
    return {t.name for t in (await client.list_tools()).tools}


async def _all_tools_listed(client) -> None:
    """server-everything registers some tools only after `initialized` (one
    list_changed each), so the merged list is complete a little later."""
    last: set[str] = set()

    async def complete() -> bool:
        nonlocal last
        last = await _tool_names(client)
        return last == EXPECTED_TOOLS

    try:
        await eventually(complete, timeout=15, interval=0.1)
    except TimeoutError:
        raise AssertionError(
            f"missing {sorted(EXPECTED_TOOLS - last)}, unexpected {sorted(last - EXPECTED_TOOLS)}"
        ) from None


async def _tools_listed(client, *names: str) -> None:
    """Waits until these tools are listed."""
    await eventually(lambda: _listed(client, names), timeout=15, interval=0.1)


async def _listed(client, names: tuple[str, ...]) -> bool:
    return set(names) <= await _tool_names(client)


@pytest.mark.parametrize("mode", ("auto", "legacy"))
async def test_serve_names_and_calls(mode: str, setup: Setup, errlog) -> None:
    peer = Peer(setup.root)
    async with peer.client(setup, errlog, mode, roots=False) as client:
        assert client.server_capabilities.tools is not None and client.server_capabilities.tools.list_changed
        assert _texts(await client.call_tool("everything__echo", {"message": "via serve"})) == ["Echo: via serve"]
        listing = _texts(await client.call_tool("filesystem__list_directory", {"path": str(setup.served)}))
        assert sorted(listing[0].splitlines()) == ["[DIR] sub", "[FILE] hello.txt"]
        hello = _texts(await client.call_tool("filesystem__read_text_file", {"path": str(setup.served / "hello.txt")}))
        assert hello == ["hello through the gateway\n"]
        assert _texts(await client.call_tool("py__echo", {"text": "from py"})) == ["from py"]
        # A server's own name, unprefixed, is not a tool of the gateway.
        unknown = await _call_error(client, "echo", {"message": "x"})
        assert unknown is not None
        # Every tool of every server, each once, under its server's prefix.
        # (server-everything adds some only after `initialized`; URL
        # elicitation is the subject of the next test.)
        await _tools_listed(client, *(f"everything__{t}" for t in EVERYTHING_TOOLS if t != "trigger-url-elicitation"))
        listing = [t.name for t in (await client.list_tools()).tools]
    assert len(listing) == len(set(listing)), listing
    by_server: dict[str, set[str]] = {}
    for name in listing:
        server, sep, tool = name.partition("__")
        assert sep and server in SERVERS, name
        by_server.setdefault(server, set()).add(tool)
    assert by_server["filesystem"] == set(FILESYSTEM_TOOLS)
    assert by_server["py"] == set(PY_TOOLS)
    assert by_server["everything"] <= set(EVERYTHING_TOOLS)
    assert by_server["everything"] >= set(EVERYTHING_TOOLS) - {"trigger-url-elicitation"}


async def test_serve_backends_see_every_client_capability(setup: Setup, errlog) -> None:
    """The gateway initializes each server once for every client it may serve:
    a server must see every capability the gateway can route (sampling,
    elicitation in form and URL mode, roots), so it offers the same tools as
    to a client that has them all (server-everything hides
    trigger-url-elicitation from a client without URL elicitation)."""
    peer = Peer(setup.root)
    async with peer.client(setup, errlog) as client:
        await _all_tools_listed(client)


async def _call_error(client, name: str, arguments: dict[str, Any]) -> object:
    """The error of a call: a JSON-RPC error or a tool result flagged as one."""
    try:
        result = await client.call_tool(name, arguments)
    except MCPError as exc:
        return exc
    return result if result.is_error else None


async def test_serve_progress(setup: Setup, errlog) -> None:
    peer = Peer(setup.root)
    seen: list[tuple[float, float | None]] = []

    async def on_progress(progress: float, total: float | None, _message: str | None) -> None:
        seen.append((progress, total))

    async with peer.client(setup, errlog) as client:
        result = await client.call_tool(
            "everything__trigger-long-running-operation", {"duration": 0.5, "steps": 5}, progress_callback=on_progress
        )
        # The same through the Python SDK server.
        py_seen: list[float] = []

        async def on_py_progress(progress: float, _total: float | None, _message: str | None) -> None:
            py_seen.append(progress)

        py = await client.call_tool("py__progress", {"steps": 3}, progress_callback=on_py_progress)
    assert _texts(result) == ["Long running operation completed. Duration: 0.5 seconds, Steps: 5."]
    assert seen == [(float(i), 5.0) for i in range(1, 6)]
    assert _texts(py) == ["done 3"]
    assert py_seen == [1.0, 2.0, 3.0]


async def test_serve_sampling(setup: Setup, errlog) -> None:
    peer = Peer(setup.root)
    async with peer.client(setup, errlog) as client:
        result = await client.call_tool("everything__trigger-sampling-request", {"prompt": "say hi", "maxTokens": 12})
    (text,) = _texts(result)
    assert text.startswith("LLM sampling result:") and SAMPLED_TEXT in text and "interop-gateway-model" in text
    assert len(peer.sampling_requests) == 1
    request = peer.sampling_requests[0]
    assert request["maxTokens"] == 12
    assert request["messages"][0]["content"]["text"] == "Resource trigger-sampling-request context: say hi"


async def test_serve_elicitation(setup: Setup, errlog) -> None:
    peer = Peer(setup.root)
    async with peer.client(setup, errlog) as client:
        result = await client.call_tool("everything__trigger-elicitation-request", {})
    texts = _texts(result)
    assert texts[0] == "✅ User provided the requested information!"
    assert "- Name: Grace Hopper" in texts[1] and "- Favorite Integer: 11" in texts[1]
    assert len(peer.elicitation_requests) == 1
    assert peer.elicitation_requests[0]["message"] == "Please provide inputs for the following fields:"


async def test_serve_modern_client_answers_servers_requests_in_retries(setup: Setup, errlog) -> None:
    """A 2026-07-28 client takes no requests from servers: what a 2025 server
    asks in the middle of a call (sampling, elicitation, roots) reaches it as
    an InputRequiredResult, and the SDK's own retry loop (with inputResponses
    and the gateway's requestState) answers it and gets the call's result."""
    peer = Peer(setup.root)
    async with peer.client(setup, errlog, "2026-07-28") as client:
        assert client.session.protocol_version == "2026-07-28"
        await _tools_listed(client, "everything__trigger-sampling-request", "everything__trigger-elicitation-request")
        sampled = await client.call_tool("everything__trigger-sampling-request", {"prompt": "say hi", "maxTokens": 12})
        elicited = await client.call_tool("everything__trigger-elicitation-request", {})
        py_roots = json.loads(_texts(await client.call_tool("py__ask_roots", {}))[0])
    (text,) = _texts(sampled)
    assert SAMPLED_TEXT in text and "interop-gateway-model" in text
    assert len(peer.sampling_requests) == 1 and peer.sampling_requests[0]["maxTokens"] == 12
    assert "- Name: Grace Hopper" in _texts(elicited)[1]
    assert len(peer.elicitation_requests) == 1
    assert py_roots == [setup.root.as_uri()]
    assert peer.roots_requests >= 1


class _OneServer:
    """A config file with the Python server alone, driven in 2026-07-28."""

    def __init__(self, tmp_path: Path) -> None:
        self.root = (tmp_path / "root").resolve()
        self.root.mkdir()
        self.config = tmp_path / "mcp.json"
        entry = {"command": sys.executable, "args": ["-u", str(PY_SERVER)], "era": "2026-07-28"}
        self.config.write_text(json.dumps({"mcpServers": {"py": entry}}))


@pytest.mark.parametrize("mode", ("legacy", "2026-07-28"))
async def test_serve_a_2026_server_s_questions_reach_clients_of_both_eras(mode: str, tmp_path: Path, errlog) -> None:
    """The Python server chosen to run in 2026-07-28 (one process for every
    client): what it needs mid-call comes back as an InputRequiredResult.
    For a client of the handshake era the gateway asks it the old way (a
    real `roots/list`) and retries the call on the server with its answer
    and the server's own requestState; a 2026-07-28 client gets the round
    and answers it in its SDK's retry loop."""
    setup = _OneServer(tmp_path)
    peer = Peer(setup.root)
    async with peer.client(setup, errlog, mode) as client:
        assert client.session.protocol_version == ("2026-07-28" if mode != "legacy" else "2025-11-25")
        for _ in range(2):
            roots = json.loads(_texts(await client.call_tool("py__ask_roots", {}))[0])
            assert roots == [setup.root.as_uri()]
    assert peer.roots_requests == 2, peer.roots_requests


async def test_serve_roots(setup: Setup, errlog) -> None:
    """The client's roots reach every server that asks: server-filesystem
    (which then serves the root instead of the directory it was started on),
    server-everything's roots tool and the Python server."""
    peer = Peer(setup.root)
    async with peer.client(setup, errlog) as client:
        py_roots = json.loads(_texts(await client.call_tool("py__ask_roots", {}))[0])
        assert py_roots == [setup.root.as_uri()]

        async def filesystem_sees_root() -> bool:
            allowed = _texts(await client.call_tool("filesystem__list_allowed_directories", {}))[0]
            return str(setup.root) in allowed

        try:
            await eventually(filesystem_sees_root, timeout=10, interval=0.1)
        except TimeoutError:
            allowed = _texts(await client.call_tool("filesystem__list_allowed_directories", {}))
            raise AssertionError(f"server-filesystem never got the client's root: {allowed}") from None
        listing = _texts(await client.call_tool("filesystem__list_directory", {"path": str(setup.root)}))
        assert listing[0].splitlines() == ["[FILE] from-roots.txt"]

        async def everything_sees_root() -> bool:
            text = _texts(await client.call_tool("everything__get-roots-list", {}))[0]
            return setup.root.as_uri() in text

        try:
            await eventually(everything_sees_root, timeout=10, interval=0.1)
        except TimeoutError:
            text = _texts(await client.call_tool("everything__get-roots-list", {}))
            raise AssertionError(f"server-everything never got the client's root: {text}") from None
    assert peer.roots_requests >= 3


async def test_serve_one_server_crash_fails_only_its_call(setup: Setup, errlog) -> None:
    """SIGKILL the Python server during a call: that call fails with mcpvisor's
    "server stopped" error, the other servers keep answering, and the next call
    to the Python server reaches a new process."""
    peer = Peer(setup.root)
    async with peer.client(setup, errlog) as client:
        await _tools_listed(client, "py__sleep", "py__pid", "everything__echo")
        old = int(_texts(await client.call_tool("py__pid", {}))[0])
        # The process that answers this client (a server of both eras runs a
        # second process for clients of the handshake era, as this one is).
        assert old in server_processes(str(PY_SERVER))
        outcome: dict[str, object] = {}
        started = anyio.Event()

        async def call() -> None:
            try:
                started.set()
                outcome["result"] = await client.call_tool("py__sleep", {"seconds": 30})
            except MCPError as exc:
                outcome["error"] = exc

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await started.wait()

            # The call is running once the server counts it.
            async def sleeping() -> bool:
                stats = json.loads(_texts(await client.call_tool("py__sleep_stats", {}))[0])
                return stats["started"] == 1

            await eventually(sleeping, timeout=10, interval=0.05)
            sigkill(old)
            await wait_dead(old)
        error = outcome.get("error")
        assert isinstance(error, MCPError), outcome
        assert error.code in WORKER_LOST_CODES, error
        assert _texts(await client.call_tool("everything__echo", {"message": "unaffected"})) == ["Echo: unaffected"]
        with anyio.fail_after(15):
            new = int(_texts(await client.call_tool("py__pid", {}))[0])
        assert new != old
        assert _texts(await client.call_tool("py__echo", {"text": "back"})) == ["back"]


ADDED_TOOL = '''

@server.tool(description="Added while the gateway ran.")
def added() -> str:
    return "added while serving"
'''


async def test_serve_editing_a_server_adds_its_tool(tmp_path: Path, errlog) -> None:
    """Editing a served Python server's file reloads it; the client gets one
    tools/list_changed and can call the new `py__added`. (Its entry is not
    pinned: under the default policy a tool that appears later is held back
    until approved, which pin_e2e.rs covers.)"""
    source = tmp_path / "server.py"
    source.write_text(PY_SERVER.read_text())
    config = tmp_path / "mcp.json"
    entry = {"command": sys.executable, "args": ["-u", str(source)], "pin": "off"}
    config.write_text(json.dumps({"mcpServers": {"py": entry}}))
    notifications: list[str] = []

    async def handler(message) -> None:
        if isinstance(message, types.ServerNotification):
            notifications.append(message.method)

    async with connect(serve_params(config), errlog, mode="legacy", message_handler=handler) as client:
        assert "py__added" not in await _tool_names(client)
        await anyio.sleep(0.5)  # the watcher settles on its first look
        text = source.read_text()
        main = text.index('if __name__ == "__main__":')
        source.write_text(text[:main] + ADDED_TOOL.lstrip("\n") + "\n\n" + text[main:])
        await eventually(lambda: "notifications/tools/list_changed" in notifications, timeout=20)
        assert "py__added" in await _tool_names(client)
        assert _texts(await client.call_tool("py__added", {})) == ["added while serving"]
    assert notifications.count("notifications/tools/list_changed") == 1, notifications


SEARCHES = {
    "print the environment variables": "everything__get-env",
    "compress a file with gzip": "everything__gzip-file-as-resource",
    "add two numbers": "everything__get-sum",
    "write a file": "filesystem__write_file",
    "list the contents of a directory": "filesystem__list_directory",
    "move or rename a file": "filesystem__move_file",
    "search for files matching a pattern": "filesystem__search_files",
}


async def test_serve_tool_search_ranks_the_right_tool_first(setup: Setup, errlog) -> None:
    """With --tool-search the client sees two tools; searching the real tools
    of server-everything, server-filesystem and the Python server puts the
    one that does the job first, and calling it through the call tool works."""
    params = serve_params(setup.config, flags=["--tool-search"])
    async with connect(params, errlog, mode="legacy") as client:
        assert await _tool_names(client) == {"mcpvisor__search_tools", "mcpvisor__call_tool"}

        async def first_hit(query: str) -> str | None:
            result = await client.call_tool("mcpvisor__search_tools", {"query": query, "limit": 3})
            tools = json.loads(_texts(result)[0])["tools"]
            return tools[0]["name"] if tools else None

        # server-everything lists some tools only after `initialized`.
        await eventually(lambda: _hits(first_hit, "add two numbers", "everything__get-sum"), timeout=15)
        for query, expected in SEARCHES.items():
            assert await first_hit(query) == expected, query
        called = await client.call_tool(
            "mcpvisor__call_tool", {"name": "everything__echo", "arguments": {"message": "found"}}
        )
        assert _texts(called) == ["Echo: found"]


async def _hits(first_hit, query: str, expected: str) -> bool:
    return await first_hit(query) == expected


async def test_serve_prompts_resources_completion_logging(setup: Setup, errlog) -> None:
    """The rest of the surface through the gateway: prompts under the server's
    prefix, resources and templates with their own URIs (read and subscribe
    routed by URI), completion routed by the prompt, logging/setLevel
    answered once, and a server's log messages carrying its name."""
    messages: list[types.LoggingMessageNotificationParams] = []

    async def logging_callback(params: types.LoggingMessageNotificationParams) -> None:
        messages.append(params)

    params = serve_params(setup.config)
    async with connect(params, errlog, mode="legacy", logging_callback=logging_callback) as client:
        await eventually(lambda: _has_prompt(client, "everything__args-prompt"), timeout=15)
        prompts = {p.name for p in (await client.list_prompts()).prompts}
        assert {"everything__simple-prompt", "everything__args-prompt", "everything__completable-prompt"} <= prompts
        prompt = await client.get_prompt("everything__args-prompt", {"city": "Paris", "state": "TX"})
        assert "Paris" in json.dumps(prompt.model_dump(mode="json"))
        completion = await client.complete(
            types.PromptReference(type="ref/prompt", name="everything__completable-prompt"),
            {"name": "department", "value": "E"},
        )
        assert completion.completion.values, completion
        resources = (await client.list_resources()).resources
        first = str(resources[0].uri)
        assert first.startswith("demo://"), first  # server-everything's own URI, unchanged
        read = await client.read_resource(first)
        assert read.contents, read
        templates = (await client.list_resource_templates()).resource_templates
        assert templates, "server-everything's templates are merged"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # deprecated in 2026-07-28
            await client.subscribe_resource(first)
            await client.unsubscribe_resource(first)
            await client.set_logging_level("debug")
        await client.call_tool("everything__toggle-simulated-logging", {})
        await eventually(lambda: bool(messages), timeout=15)
        assert {m.logger for m in messages} == {"everything"}, [m.logger for m in messages]
        await client.call_tool("everything__toggle-simulated-logging", {})


async def _has_prompt(client, name: str) -> bool:
    return name in {p.name for p in (await client.list_prompts()).prompts}
