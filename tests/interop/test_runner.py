"""`mcpvisor inspect` and `mcpvisor call` against the real npm reference servers,
compared with what the Python SDK client sees talking to the same server direct."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import anyio
from interop_util import EVERYTHING_JS, FILESYSTEM_JS, connect, everything_params, node_bin, run_mcpvisor

TIMEOUT = 60


def mcpvisor(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return run_mcpvisor(*args, timeout=TIMEOUT, cwd=cwd)


def everything(*args: str) -> list[str]:
    return ["--", node_bin(), str(EVERYTHING_JS), "stdio", *args]


async def sdk_listing() -> dict[str, list[str]]:
    """Tool, prompt and resource names as the Python SDK client sees them, direct."""
    with open("/dev/null", "w") as errlog:
        async with connect(everything_params("direct"), errlog, mode="legacy") as client:
            tools = [t.name for t in (await client.list_tools()).tools]
            prompts = [p.name for p in (await client.list_prompts()).prompts]
            resources = []
            cursor = None
            while True:
                page = await client.list_resources(cursor=cursor)
                resources += [str(r.uri) for r in page.resources]
                cursor = page.next_cursor
                if not cursor:
                    break
            return {"tools": tools, "prompts": prompts, "resources": resources}


def test_inspect_everything_matches_the_sdk_client() -> None:
    out = mcpvisor("inspect", "--json", *everything())
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["server"]["name"]
    assert report["protocolVersion"]
    expected = anyio.run(sdk_listing)
    # mcpvisor's client declares roots; server-everything then adds the one
    # tool that needs them. Otherwise the same tools, in the same order.
    names = [t["name"] for t in report["tools"]]
    assert [n for n in names if n != "get-roots-list"] == expected["tools"]
    assert "get-roots-list" in names
    assert [p["name"] for p in report["prompts"]] == expected["prompts"]
    # Every page of resources was followed.
    assert [r["uri"] for r in report["resources"]] == expected["resources"]
    echo = next(t for t in report["tools"] if t["name"] == "echo")
    assert echo["arguments"][0]["name"] == "message"
    assert echo["arguments"][0]["required"] is True
    human = mcpvisor("inspect", *everything())
    assert human.returncode == 0, human.stderr
    assert f"tools ({len(names)}):" in human.stdout


def test_call_everything_tools() -> None:
    out = mcpvisor("call", "echo", '{"message": "hi from mcpvisor"}', *everything())
    assert out.returncode == 0, out.stderr
    assert "hi from mcpvisor" in out.stdout
    out = mcpvisor("call", "--json", "get-sum", '{"a": 2, "b": 40}', *everything())
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert "42" in json.dumps(result["content"])
    # Progress notifications show on stderr.
    out = mcpvisor("call", "trigger-long-running-operation", '{"duration": 1, "steps": 3}', *everything())
    assert out.returncode == 0, out.stderr
    assert out.stderr.count("progress ") == 3, out.stderr
    # A bad argument is the tool's (or protocol's) error, never exit 0.
    out = mcpvisor("call", "get-sum", '{"a": "x"}', *everything())
    assert out.returncode in (1, 2), (out.returncode, out.stdout, out.stderr)


def test_filesystem_reads_a_file_through_call(tmp_path: Path) -> None:
    # server-filesystem asks for roots after `initialized` and applies the
    # answer asynchronously, so a call sent at once may race it: give it the
    # directory on its command line too (the root offered is the same --cwd).
    (tmp_path / "note.txt").write_text("runner root\n")
    server = ["--", node_bin(), str(FILESYSTEM_JS), str(tmp_path)]
    out = mcpvisor("call", "--cwd", str(tmp_path), "read_text_file", json.dumps({"path": str(tmp_path / "note.txt")}), *server)
    assert out.returncode == 0, out.stderr
    assert "runner root" in out.stdout


def test_everything_is_stopped_on_timeout() -> None:
    # server-everything does not exit on stdin EOF; mcpvisor must still stop it.
    out = mcpvisor("call", "--timeout", "2s", "trigger-long-running-operation", '{"duration": 30, "steps": 3}', *everything())
    assert out.returncode == 2, out.stderr
    assert "gave up after 2s" in out.stderr
