#!/usr/bin/env python3
"""Three `mcpvisor serve --http` replicas behind HAProxy, with faults.

Starts the replicas on loopback (each with a bearer token, so the balancer's
probes are seen to need none) and HAProxy with `deploy/haproxy/haproxy.cfg`
in front of them, then runs six phases over raw HTTP, seeing every status:

  steady     50 sessions call at once; none is misrouted.
  kill       under load, one replica gets SIGKILL: only its sessions see
             errors (then 404, then a new session on another replica); the
             others lose nothing.
  rolling    under load, each replica in turn gets SIGTERM and is started
             again: every accepted request (a 2xx, or its event stream
             started) gets its answer; sessions of a stopped replica end
             with 404 and start again elsewhere.
  stateless  2026-07-28 requests without a session spread over every replica.
  multiround 2026-07-28 calls whose server asks the client mid-call (an
             input-required round, then a retry) from many threads: every
             retry reaches the replica that holds its call (the one its
             requestState names) and completes with its own answer; with the
             routing lines taken out of the config, retries that land
             elsewhere are refused, never answered wrongly; a forged
             replica name, or a replica that is gone, gets a clean refusal.
  modern     the same for a 2026-07-28 server's own multi-round calls (the
             fake worker's `confirm` under --modern, whose state only its
             own process accepts): two rounds each, from many threads at
             once; the gateway wraps the server's state with its replica,
             every retry reaches the replica (and worker process) that
             issued it; without the routing lines, exactly the retries that
             land elsewhere are refused by the gateway, naming the replica.

Which replica answered is told by the backend's `whoami` tool: each replica
runs its own fake worker, whose pid the test learns from the replica itself.
Prints a JSON report of the figures and exits non-zero on any failed check.

`--bench` instead measures one replica directly (no balancer): sessions
opened and closed per second, and tool calls per second in open sessions.

Standard library only.
"""

from __future__ import annotations

import argparse
import collections
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HAPROXY_CFG = ROOT / "deploy" / "haproxy" / "haproxy.cfg"
HANDSHAKE = "2025-11-25"
STATELESS = "2026-07-28"
TOKEN = "lb-test-token"
# Every wait in this file is bounded by this (or a stated smaller bound).
WAIT = 30.0
SESSIONS = 50
PHASES = ("steady", "kill", "rolling", "stateless", "multiround", "modern")
ACCEPT = "application/json, text/event-stream"
TOOL_PREFIX = "worker__"
# The 2026-07-28 server of each replica (the fake worker with --modern).
MODERN_PREFIX = "modern__"


def log(msg: str) -> None:
    print(f"[lb {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Failed(Exception):
    pass


def check(cond: bool, what: str, failures: list[str]) -> None:
    if cond:
        log(f"ok: {what}")
    else:
        log(f"FAILED: {what}")
        failures.append(what)


# ------------------------------------------------------------------ HTTP


@dataclass
class Reply:
    """What one POST came to."""

    status: int | None = None
    # The request was accepted: a 2xx, or its event stream started.
    accepted: bool = False
    # The JSON-RPC message answering it (result or error).
    answer: dict | None = None
    session: str | None = None
    # The Mcp-Replica header: which replica answered a 2026-07-28 request.
    replica: str | None = None
    error: str | None = None


def post(conn_box: list, host: str, port: int, body: dict, headers: dict, timeout: float = WAIT) -> Reply:
    """POSTs one message on the connection in `conn_box` (made or remade as
    needed) and reads its answer: JSON, or an event stream to its response."""
    reply = Reply()
    data = json.dumps(body).encode()
    hdrs = {"content-type": "application/json", "accept": ACCEPT, **headers}
    want = body.get("id")
    where = "not connected"
    try:
        if conn_box[0] is None:
            conn_box[0] = http.client.HTTPConnection(host, port, timeout=timeout)
        conn = conn_box[0]
        fresh = conn.sock is None
        if fresh:
            conn.connect()
        where = f"{'new' if fresh else 'reused'} connection {local_port(conn_box)}"
        conn.request("POST", "/mcp", body=data, headers=hdrs)
        resp = conn.getresponse()
    except (OSError, http.client.HTTPException) as e:
        close(conn_box)
        reply.error = f"before any answer ({where}, {time.strftime('%H:%M:%S')}): {type(e).__name__}: {e}"
        return reply
    reply.status = resp.status
    reply.session = resp.getheader("mcp-session-id")
    reply.replica = resp.getheader("mcp-replica")
    ctype = (resp.getheader("content-type") or "").split(";")[0].strip()
    try:
        if resp.status // 100 != 2:
            raw = resp.read()
            try:
                reply.answer = json.loads(raw)
            except ValueError:
                reply.error = f"HTTP {resp.status}: {raw[:200]!r}"
            return reply
        reply.accepted = True
        if ctype == "text/event-stream":
            reply.answer = read_stream(resp, want)
            if reply.answer is None:
                reply.error = "the event stream ended without the response"
                # Cut short: the connection is not reused.
                close(conn_box)
        elif resp.status == 202:
            resp.read()
        else:
            reply.answer = json.loads(resp.read())
    except (OSError, http.client.HTTPException, ValueError) as e:
        reply.error = f"after acceptance: {type(e).__name__}: {e}"
        close(conn_box)
    if resp.will_close:
        close(conn_box)
    return reply


def read_stream(resp: http.client.HTTPResponse, want) -> dict | None:
    """Events until the response to `want`; None if the stream ends first."""
    data: list[str] = []
    while True:
        line = resp.readline()
        if not line:
            return None
        line = line.decode().rstrip("\r\n")
        if line == "":
            text = "\n".join(data)
            data = []
            # A 2025-11-25 stream starts with a priming event: an id and
            # `retry`, with empty data.
            if text:
                msg = json.loads(text)
                if msg.get("id") == want and ("result" in msg or "error" in msg):
                    # Read to the end so the connection can be reused.
                    resp.read()
                    return msg
        elif line.startswith("data:"):
            data.append(line[5:].lstrip(" "))


def local_port(conn_box: list) -> str:
    try:
        return f"from port {conn_box[0].sock.getsockname()[1]}"
    except (AttributeError, OSError, TypeError):
        return "not connected"


def close(conn_box: list) -> None:
    if conn_box[0] is not None:
        conn_box[0].close()
        conn_box[0] = None


def get(host: str, port: int, path: str, timeout: float = 2.0) -> tuple[int | None, str]:
    try:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
        conn.request("GET", path)
        resp = conn.getresponse()
        body = resp.read().decode(errors="replace")
        conn.close()
        return resp.status, body
    except (OSError, http.client.HTTPException) as e:
        return None, type(e).__name__


def whoami_call(rid: int) -> dict:
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
            "params": {"name": TOOL_PREFIX + "whoami", "arguments": {}}}


def stateless_whoami(rid: int) -> dict:
    """`whoami_call` as a 2026-07-28 request: its envelope in `_meta`."""
    body = whoami_call(rid)
    body["params"]["_meta"] = {
        "io.modelcontextprotocol/protocolVersion": STATELESS,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    return body


def sleep_call(rid: int, ms: int) -> dict:
    # With a progress token the answer is an event stream that starts with
    # the first progress notification.
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
            "params": {"name": TOOL_PREFIX + "sleep", "arguments": {"ms": ms, "progress_ms": 50},
                       "_meta": {"progressToken": f"p{rid}"}}}


def ask_call(rid: str) -> dict:
    """A 2026-07-28 call of the worker's `ask` tool, which sends roots/list
    to the client mid-call and answers with what the client said."""
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
            "params": {"name": TOOL_PREFIX + "ask", "arguments": {"method": "roots/list"},
                       "_meta": {"io.modelcontextprotocol/protocolVersion": STATELESS,
                                 "io.modelcontextprotocol/clientCapabilities": {"roots": {}}}}}


def ask_headers() -> dict:
    return {**stateless_headers(), "mcp-name": TOOL_PREFIX + "ask"}


def state_replica(state: object) -> str | None:
    """The replica a gateway-signed requestState names (`mcpvisor1.ID.…`)."""
    if isinstance(state, str) and state.startswith("mcpvisor1."):
        return state.split(".")[1]
    return None


@dataclass
class Trip:
    """One multi-round call: its input-required round and its retry."""

    outcome: str  # ok, refused, misanswered, error
    signer: str | None = None  # the replica its requestState names
    round_header: str | None = None  # Mcp-Replica of the round
    retry_header: str | None = None  # Mcp-Replica of the retry's answer
    detail: str = ""


def round_trip(port: int, tag: str, forge: bool = False, before_retry=None) -> Trip:
    """Calls `ask` through the balancer at `port`; answers its round with a
    root of its own (`tag`) in a retry on a new connection. With `forge`,
    the retry's state names another replica (its signature unchanged)."""
    box = [None]
    r = post(box, "127.0.0.1", port, ask_call(f"{tag}-a"), ask_headers())
    close(box)
    result = (r.answer or {}).get("result", {})
    state = result.get("requestState")
    requests = result.get("inputRequests") or {}
    if result.get("resultType") != "input_required" or len(requests) != 1 or not isinstance(state, str):
        return Trip("error", detail=f"no input-required round: {r.status} {r.answer} {r.error}")
    trip = Trip("error", signer=state_replica(state), round_header=r.replica)
    key = next(iter(requests))
    if requests[key].get("method") != "roots/list":
        trip.detail = f"the round asks {requests[key]}"
        return trip
    uri = f"file:///lb/{tag}"
    retry = ask_call(f"{tag}-b")
    if forge:
        other = "replica2" if trip.signer == "replica1" else "replica1"
        state = state.replace(f"mcpvisor1.{trip.signer}.", f"mcpvisor1.{other}.", 1)
    retry["params"]["requestState"] = state
    retry["params"]["inputResponses"] = {key: {"roots": [{"uri": uri, "name": tag}]}}
    if before_retry is not None:
        before_retry(trip)
    r = post(box, "127.0.0.1", port, retry, ask_headers())
    close(box)
    trip.retry_header = r.replica
    answer = r.answer or {}
    if answer.get("error", {}).get("code") == -32602:
        trip.outcome = "refused"
        trip.detail = answer["error"].get("message", "")
        return trip
    text = ""
    try:
        text = answer["result"]["content"][0]["text"]
    except (KeyError, IndexError, TypeError):
        pass
    if answer.get("result", {}).get("resultType") == "complete" and uri in text and f"{tag}-b" == answer.get("id"):
        trip.outcome = "ok"
    elif "result" in answer:
        trip.outcome = "misanswered"
        trip.detail = str(answer)[:200]
    else:
        trip.detail = f"{r.status} {answer} {r.error}"[:200]
    return trip


def confirm_call(rid: str, rounds: int) -> dict:
    """A 2026-07-28 call of the modern worker's `confirm`: `rounds`
    input-required rounds (roots/list) under the server's own state."""
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
            "params": {"name": MODERN_PREFIX + "confirm", "arguments": {"rounds": rounds},
                       "_meta": {"io.modelcontextprotocol/protocolVersion": STATELESS,
                                 "io.modelcontextprotocol/clientCapabilities": {"roots": {}}}}}


def confirm_headers() -> dict:
    return {**stateless_headers(), "mcp-name": MODERN_PREFIX + "confirm"}


@dataclass
class ModernTrip:
    """One multi-round call of a 2026-07-28 server's own: its rounds and
    retries, each on a new connection."""

    outcome: str  # ok, refused, misanswered, error
    signer: str | None = None  # the replica its (wrapped) requestState names
    headers: list = field(default_factory=list)  # Mcp-Replica of each answer
    pid: int | None = None  # the worker that answered the last retry
    detail: str = ""


def modern_trip(port: int, tag: str, rounds: int) -> ModernTrip:
    """Calls `confirm` through the balancer at `port` and answers each of
    its `rounds` rounds with a root of its own (`tag`)."""
    box = [None]
    uri = f"file:///lb/{tag}"
    trip = ModernTrip("error")
    call = confirm_call(f"{tag}-0", rounds)
    for n in range(rounds + 1):
        r = post(box, "127.0.0.1", port, call, confirm_headers())
        close(box)
        trip.headers.append(r.replica)
        answer = r.answer or {}
        if answer.get("error", {}).get("code") == -32602:
            trip.outcome = "refused"
            trip.detail = answer["error"].get("message", "")
            return trip
        result = answer.get("result", {})
        if n == rounds:
            break
        state = result.get("requestState")
        requests = result.get("inputRequests") or {}
        if result.get("resultType") != "input_required" or list(requests) != ["roots"] or not isinstance(state, str):
            trip.detail = f"round {n + 1}: {r.status} {str(answer)[:200]} {r.error}"
            return trip
        fields = state.split(".")
        if len(fields) != 6 or fields[2] != "s":
            trip.detail = f"round {n + 1}: not a wrapped state: {state[:80]}"
            return trip
        if trip.signer is None:
            trip.signer = fields[1]
        elif fields[1] != trip.signer:
            trip.detail = f"round {n + 1} signed by {fields[1]}, the first by {trip.signer}"
            return trip
        call = confirm_call(f"{tag}-{n + 1}", rounds)
        call["params"]["requestState"] = state
        call["params"]["inputResponses"] = {"roots": {"roots": [{"uri": uri, "name": tag}]}}
    said = {}
    try:
        said = json.loads(answer["result"]["content"][0]["text"])
    except (KeyError, IndexError, TypeError, ValueError):
        pass
    roots = (said.get("answers") or {}).get("roots", {}).get("roots") or [{}]
    if result.get("resultType") == "complete" and said.get("round") == rounds and roots[0].get("uri") == uri:
        trip.outcome = "ok"
        trip.pid = said.get("pid")
    elif "result" in answer:
        trip.outcome = "misanswered"
        trip.detail = str(answer)[:200]
    else:
        trip.detail = f"{r.status} {str(answer)[:200]} {r.error}"
    return trip


def pid_of(answer: dict | None) -> int | None:
    try:
        return json.loads(answer["result"]["content"][0]["text"])["pid"]
    except (KeyError, IndexError, TypeError, ValueError):
        return None


# ------------------------------------------------------------------ processes


class Replica:
    def __init__(self, n: int, port: int, mcpvisor: str, config: Path, token_file: Path, work: Path):
        self.n = n
        self.port = port
        self.mcpvisor = mcpvisor
        self.config = config
        self.token_file = token_file
        self.work = work
        self.proc: subprocess.Popen | None = None
        self.worker_pid: int | None = None
        self.modern_pid: int | None = None
        self.starts = 0

    @property
    def name(self) -> str:
        return f"replica{self.n}"

    def start(self) -> dict:
        """Starts it and waits until it is ready; returns what /readyz said
        on the way."""
        self.starts += 1
        err = open(self.work / f"{self.name}.{self.starts}.log", "wb")
        self.proc = subprocess.Popen(
            [self.mcpvisor, "serve", "--config", str(self.config), "--no-watch",
             "--http", f"127.0.0.1:{self.port}", "--auth-token-file", str(self.token_file),
             "--http-drain", "10s", "--http-drain-min", "3s", "--replica-id", self.name],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
            env={**os.environ, "MCPVISOR_CACHE_DIR": str(self.work / f"cache{self.n}")},
        )
        err.close()
        seen = collections.Counter()
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise Failed(f"{self.name} exited with {self.proc.returncode} while starting")
            status, body = get("127.0.0.1", self.port, "/readyz")
            seen[f"{status} {body}".strip()] += 1
            if status == 200:
                break
            time.sleep(0.05)
        else:
            raise Failed(f"{self.name} not ready within {WAIT}s: {dict(seen)}")
        self.worker_pid = self.ask_pid()
        self.modern_pid = self.ask_pid(MODERN_PREFIX)
        return dict(seen)

    def ask_pid(self, prefix: str = TOOL_PREFIX) -> int:
        body = stateless_whoami(1)
        body["params"]["name"] = prefix + "whoami"
        headers = {**stateless_headers(), "mcp-name": prefix + "whoami"}
        box = [None]
        r = post(box, "127.0.0.1", self.port, body, headers)
        close(box)
        pid = pid_of(r.answer)
        if pid is None:
            raise Failed(f"{self.name}: {prefix}whoami gave {r}")
        return pid

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=WAIT)

    def terminate(self) -> tuple[int, float, list[str]]:
        """SIGTERM; returns its exit code, how long it took, and what
        /readyz answered right after the signal."""
        assert self.proc is not None
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        # Until it fails: the signal is handled in the replica's own time.
        probes = []
        while time.monotonic() < t0 + WAIT:
            status, body = get("127.0.0.1", self.port, "/readyz", timeout=1.0)
            probes.append(f"{status} {body} after {1000 * (time.monotonic() - t0):.0f} ms")
            if status != 200:
                break
        code = self.proc.wait(timeout=WAIT)
        return code, time.monotonic() - t0, probes

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=WAIT)


class Balancer:
    def __init__(self, port: int, replicas: list[Replica], work: Path, cfg: Path = HAPROXY_CFG,
                 log_name: str = "haproxy.log"):
        self.port = port
        self.replicas = replicas
        self.work = work
        self.cfg = cfg
        self.log_name = log_name
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        env = {**os.environ, "MCPVISOR_LB_BIND": f"127.0.0.1:{self.port}"}
        for r in self.replicas:
            env[f"MCPVISOR_REPLICA_{r.n}"] = f"127.0.0.1:{r.port}"
        check = subprocess.run(["haproxy", "-c", "-f", str(self.cfg)], env=env,
                               capture_output=True, text=True, timeout=WAIT)
        if check.returncode != 0:
            raise Failed(f"haproxy -c refused the config:\n{check.stdout}{check.stderr}")
        err = open(self.work / self.log_name, "wb")
        self.proc = subprocess.Popen(["haproxy", "-db", "-f", str(self.cfg)], env=env,
                                     stdin=subprocess.DEVNULL, stdout=err, stderr=err)
        err.close()
        # Up once it routes to every replica.
        self.wait_routes(set(self.replicas))

    def wait_routes(self, want: set[Replica]) -> None:
        """Until stateless requests through the balancer reach every replica
        in `want`: the balancer has them up."""
        seen: set[int] = set()
        pids = {r.worker_pid for r in want}
        box = [None]
        deadline = time.monotonic() + WAIT
        rid = 0
        while time.monotonic() < deadline and not pids <= seen:
            if self.proc is not None and self.proc.poll() is not None:
                raise Failed(f"haproxy exited with {self.proc.returncode}; see {self.work / self.log_name}")
            rid += 1
            r = post(box, "127.0.0.1", self.port, stateless_whoami(rid), stateless_headers(), timeout=5)
            pid = pid_of(r.answer)
            if pid is not None:
                seen.add(pid)
            else:
                time.sleep(0.05)
        close(box)
        if not pids <= seen:
            raise Failed(f"the balancer does not reach {sorted(r.name for r in want)} within {WAIT}s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=WAIT)


def stateless_headers() -> dict:
    """The headers of a 2026-07-28 `stateless_whoami`: they name what its body does."""
    return {"mcp-protocol-version": STATELESS, "authorization": f"Bearer {TOKEN}",
            "mcp-method": "tools/call", "mcp-name": TOOL_PREFIX + "whoami"}


# ------------------------------------------------------------------ clients


@dataclass
class Record:
    """One request's fate."""

    client: int
    session: str | None
    replica: str | None  # the session's replica, when known
    kind: str  # initialize, whoami, sleep
    outcome: str  # ok, gone, refused, lost, misrouted, error
    status: int | None
    detail: str = ""
    at: float = 0.0


@dataclass
class Client:
    """One MCP client: a session through the balancer, opened again when
    its replica answers 404."""

    idx: int
    port: int
    pid_to_replica: dict
    records: list = field(default_factory=list)
    session: str | None = None
    session_pid: int | None = None
    sessions: list = field(default_factory=list)  # (session id, replica)
    next_id: int = 0

    def rid(self) -> int:
        self.next_id += 1
        return self.next_id

    def headers(self) -> dict:
        h = {"authorization": f"Bearer {TOKEN}", "mcp-protocol-version": HANDSHAKE}
        if self.session:
            h["mcp-session-id"] = self.session
        return h

    def replica(self) -> str | None:
        return self.pid_to_replica.get(self.session_pid)

    def record(self, kind: str, outcome: str, r: Reply, detail: str = "") -> None:
        self.records.append(Record(self.idx, self.session, self.replica(), kind, outcome,
                                   r.status, detail or (r.error or ""), time.monotonic()))

    def initialize(self, box: list) -> bool:
        self.session, self.session_pid = None, None
        init = {"jsonrpc": "2.0", "id": self.rid(), "method": "initialize",
                "params": {"protocolVersion": HANDSHAKE, "capabilities": {},
                           "clientInfo": {"name": f"lb-client-{self.idx}", "version": "1"}}}
        r = post(box, "127.0.0.1", self.port, init, {"authorization": f"Bearer {TOKEN}"})
        if r.status != 200 or not r.session or not r.answer or "result" not in r.answer:
            self.record("initialize", "refused" if not r.accepted else "error", r)
            return False
        self.session = r.session
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        n = post(box, "127.0.0.1", self.port, note, self.headers())
        if n.status != 202:
            self.record("initialized", "gone" if n.status == 404 else "error", n)
            self.session = None
            return False
        # Which replica issued it: its worker's pid, through the session.
        w = post(box, "127.0.0.1", self.port, whoami_call(self.rid()), self.headers())
        pid = pid_of(w.answer)
        if pid is None:
            self.record("whoami", classify(w), w)
            self.session = None
            return False
        self.session_pid = pid
        self.sessions.append((self.session, self.replica()))
        self.record("initialize", "ok", r)
        return True

    def call(self, box: list, kind: str) -> None:
        rid = self.rid()
        body = whoami_call(rid) if kind == "whoami" else sleep_call(rid, 150)
        r = post(box, "127.0.0.1", self.port, body, self.headers())
        outcome = classify(r)
        if outcome == "ok" and kind == "whoami" and pid_of(r.answer) != self.session_pid:
            outcome = "misrouted"
        if outcome == "ok" and r.answer.get("id") != rid:
            outcome = "misrouted"
        self.record(kind, outcome, r)
        if outcome == "gone":
            self.session = None

    def run(self, stop: threading.Event, calls: int | None) -> None:
        """Calls until `stop` (or `calls` calls made), alternating a quick
        JSON answer and a streamed one."""
        box = [None]
        made = 0
        try:
            while not stop.is_set() and (calls is None or made < calls):
                if self.session is None:
                    if not self.initialize(box):
                        time.sleep(0.05)
                        continue
                self.call(box, "whoami" if made % 2 == 0 else "sleep")
                made += 1
        finally:
            close(box)
            # A deliberate end: DELETE so the replica forgets the session.
            if self.session:
                post_delete(self.port, self.session)


def post_delete(port: int, session: str) -> None:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("DELETE", "/mcp", headers={"authorization": f"Bearer {TOKEN}",
                                                "mcp-session-id": session})
        conn.getresponse().read()
        conn.close()
    except (OSError, http.client.HTTPException):
        pass


def classify(r: Reply) -> str:
    if r.accepted:
        if r.answer is None:
            return "lost"
        if "error" in r.answer or r.answer.get("result", {}).get("isError"):
            return "error"
        return "ok"
    if r.status == 404:
        return "gone"
    return "refused"


def run_clients(clients: list[Client], seconds: float | None, calls: int | None,
                during=None) -> float:
    stop = threading.Event()
    threads = [threading.Thread(target=c.run, args=(stop, calls), daemon=True) for c in clients]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    try:
        if during is not None:
            during()
        if seconds is not None:
            time.sleep(seconds)
        if during is None and seconds is None:
            # Each makes its number of calls.
            deadline = time.monotonic() + WAIT
            for t in threads:
                t.join(timeout=max(0.0, deadline - time.monotonic()))
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=WAIT)
    if any(t.is_alive() for t in threads):
        raise Failed("a client did not finish within its bound")
    return time.monotonic() - t0


def tally(records: list[Record]) -> dict:
    out = collections.Counter(r.outcome for r in records)
    return dict(sorted(out.items()))


# ------------------------------------------------------------------ phases


def haproxy_log_summary(path: Path) -> dict:
    """Requests HAProxy logged, by final status, and how many it retried
    (`+N` in the retries field: sent to another replica)."""
    statuses: collections.Counter = collections.Counter()
    retried: collections.Counter = collections.Counter()
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return {}
    for line in lines:
        f = line.split()
        if len(f) < 12 or not f[0].startswith("127.0.0.1:") or not f[5].isdigit():
            continue
        statuses[f[5]] += 1
        tries = f[10].rsplit("/", 1)[-1]
        if tries.lstrip("+") not in ("", "0"):
            retried[f[5]] += 1
    return {"requests": sum(statuses.values()), "final_status": dict(sorted(statuses.items())),
            "retried_then_final_status": dict(sorted(retried.items()))}



class Test:
    def __init__(self, mcpvisor: str, worker: str, work: Path):
        self.work = work
        token_file = work / "token"
        token_file.write_text(TOKEN + "\n")
        config = work / "mcp.json"
        # A second of initialize delay: /readyz is seen not ready while the
        # worker starts, and the balancer must wait for it.
        # Beside it, a server of 2026-07-28 (the modern phase).
        config.write_text(json.dumps({"mcpServers": {
            "worker": {"command": worker, "args": ["--initialize-delay", "1000"]},
            "modern": {"command": worker, "args": ["--modern"]}}}))
        self.replicas = [Replica(n, free_port(), mcpvisor, config, token_file, work) for n in (1, 2, 3)]
        self.lb = Balancer(free_port(), self.replicas, work)
        self.failures: list[str] = []
        self.report: dict = {}
        self.phases = PHASES

    def pids(self) -> dict:
        return {r.worker_pid: r.name for r in self.replicas}

    def clients(self) -> list[Client]:
        return [Client(i, self.lb.port, self.pids()) for i in range(SESSIONS)]

    def run(self) -> None:
        try:
            starts = [r.start() for r in self.replicas]
            self.report["readyz_while_starting"] = starts[0]
            check(any(k.startswith("503 starting") for k in starts[0]),
                  "/readyz answers 503 'starting' until the eager server has started", self.failures)
            self.probes()
            self.lb.start()
            for phase in self.phases:
                getattr(self, phase)()
        finally:
            self.lb.stop()
            for r in self.replicas:
                r.stop()
            self.report["haproxy"] = haproxy_log_summary(self.work / "haproxy.log")

    def probes(self) -> None:
        r = self.replicas[0]
        status, body = get("127.0.0.1", r.port, "/healthz")
        check(status == 200 and body == "ok", f"/healthz without a token: {status} {body!r}", self.failures)
        box = [None]
        headers = {k: v for k, v in stateless_headers().items() if k != "authorization"}
        resp = post(box, "127.0.0.1", r.port, stateless_whoami(1), headers)
        close(box)
        check(resp.status == 401, f"the endpoint itself needs the token: {resp.status}", self.failures)

    def steady(self) -> None:
        log("phase steady: 50 sessions calling at once")
        clients = self.clients()
        took = run_clients(clients, None, 20)
        records = [r for c in clients for r in c.records]
        per_replica = collections.Counter(rep for c in clients for _, rep in c.sessions)
        calls = [r for r in records if r.kind != "initialize"]
        self.report["steady"] = {
            "sessions": sum(len(c.sessions) for c in clients),
            "sessions_per_replica": dict(sorted(per_replica.items())),
            "requests": len(calls),
            "outcomes": tally(records),
            "seconds": round(took, 2),
        }
        check(all(r.outcome == "ok" for r in records), f"steady: every request answered, none misrouted: {tally(records)}",
              self.failures)
        check(len(per_replica) == 3 and min(per_replica.values()) >= 10,
              f"steady: sessions spread over the three replicas: {dict(per_replica)}", self.failures)

    def kill(self) -> None:
        victim = self.replicas[1]
        log(f"phase kill: SIGKILL {victim.name} under load")
        clients = self.clients()
        killed_at = [0.0]

        def fault() -> None:
            time.sleep(2)
            killed_at[0] = time.monotonic()
            victim.kill()
            # Long enough for every client to notice and move.
            time.sleep(4)

        run_clients(clients, None, None, during=fault)
        first = {c.idx: c.sessions[0][1] if c.sessions else None for c in clients}
        of_victim = [c for c in clients if first[c.idx] == victim.name]
        others = [c for c in clients if first[c.idx] not in (None, victim.name)]
        other_records = [r for c in others for r in c.records]
        victim_records = [r for c in of_victim for r in c.records]
        bad_other = [r for r in other_records if r.outcome != "ok"]
        # What the victim's sessions saw after the kill, by outcome and status.
        after = collections.Counter(
            f"{r.outcome} {r.status}" for r in victim_records if r.at >= killed_at[0] and r.outcome != "ok")
        how = collections.Counter(
            f"{r.kind} {r.outcome} {r.status} {r.detail.split('): ')[-1][:60]} {r.detail[:40]}"
            for r in victim_records if r.outcome != "ok")
        moved = [c for c in of_victim if len(c.sessions) >= 2 and all(rep != victim.name for _, rep in c.sessions[1:])]
        answered_after_move = [c for c in moved if any(
            r.outcome == "ok" and r.kind != "initialize" and r.session == c.sessions[-1][0] for r in c.records)]
        self.report["kill"] = {
            "sessions_at_start": SESSIONS,
            "sessions_on_killed_replica": len(of_victim),
            "requests": sum(1 for c in clients for r in c.records if r.kind != "initialize"),
            "other_sessions_errors": len(bad_other),
            "killed_replica_sessions_saw": dict(sorted(after.items())),
            "killed_replica_sessions_saw_in_detail": dict(sorted(how.items())),
            "killed_replica_sessions_moved": len(moved),
            "outcomes": tally(victim_records + other_records),
        }
        check(len(of_victim) > 0 and len(others) > 0, "kill: sessions on the killed replica and on the others", self.failures)
        check(not bad_other, f"kill: the other replicas' sessions lose nothing: {[(r.outcome, r.status, r.detail) for r in bad_other[:5]]}",
              self.failures)
        check(all(r.outcome in ("ok", "gone", "refused", "lost") for r in victim_records),
              "kill: the killed replica's sessions see only 404s and cut requests, no error answers", self.failures)
        check(not any(r.status == 500 for r in victim_records), "kill: never a 500", self.failures)
        hung = [r for r in victim_records + other_records if "timed out" in r.detail or "Timeout" in r.detail]
        check(not hung, f"kill: no request hung until the client's timeout ({len(hung)})", self.failures)
        check(len(moved) == len(of_victim) and len(answered_after_move) == len(of_victim),
              f"kill: every session of the killed replica got 404 and carried on in a new session elsewhere "
              f"({len(answered_after_move)}/{len(of_victim)})", self.failures)
        gone_first = all(any(r.outcome == "gone" for r in c.records) for c in of_victim)
        check(gone_first, "kill: each of those sessions was told 404", self.failures)
        victim.start()
        self.lb.wait_routes(set(self.replicas))

    def rolling(self) -> None:
        log("phase rolling: SIGTERM and restart each replica in turn under load")
        clients = self.clients()
        restarts = []

        def roll() -> None:
            time.sleep(1.5)
            for r in self.replicas:
                old = r.name
                code, took, probes = r.terminate()
                readyz = r.start()
                self.lb.wait_routes(set(self.replicas))
                restarts.append({"replica": old, "exit_code": code, "stop_seconds": round(took, 2),
                                 "readyz_after_sigterm": probes, "readyz_while_starting": readyz})
                time.sleep(1.0)

        took = run_clients(clients, None, None, during=roll)
        records = [r for c in clients for r in c.records]
        accepted_lost = [r for r in records if r.outcome == "lost"]
        non_gone = [r for r in records if r.outcome not in ("ok", "gone")]
        gone_sessions = {r.session for r in records if r.outcome == "gone"}
        self.report["rolling"] = {
            "sessions": sum(len(c.sessions) for c in clients),
            "requests": sum(1 for r in records if r.kind != "initialize"),
            "requests_answered": sum(1 for r in records if r.kind != "initialize" and r.outcome == "ok"),
            "accepted_but_lost": len(accepted_lost),
            "sessions_ended_with_404": len(gone_sessions),
            "other_errors": [(r.kind, r.outcome, r.status, r.detail[:120]) for r in non_gone[:10]],
            "outcomes": tally(records),
            "restarts": restarts,
            "seconds": round(took, 2),
        }
        check(not accepted_lost, f"rolling: every accepted request got its answer ({len(accepted_lost)} lost)", self.failures)
        check(not non_gone, f"rolling: nothing but 404s for the stopped replicas' sessions: {non_gone[:5]}", self.failures)
        check(all(x["exit_code"] == 0 for x in restarts), "rolling: each replica exited 0 after SIGTERM", self.failures)
        check(all(x["readyz_after_sigterm"][-1].startswith("503 draining") for x in restarts),
              "rolling: /readyz fails with 503 after SIGTERM, while the replica drains", self.failures)
        check(all(len(c.sessions) >= 2 for c in clients),
              "rolling: every client's session ended with a restart and it started a new one", self.failures)

    def stateless(self) -> None:
        log("phase stateless: 2026-07-28 requests without a session")
        pids = self.pids()
        counts: collections.Counter = collections.Counter()
        outcomes: collections.Counter = collections.Counter()
        lock = threading.Lock()

        def worker(k: int) -> None:
            box = [None]
            for i in range(30):
                r = post(box, "127.0.0.1", self.lb.port, stateless_whoami(k * 1000 + i), stateless_headers())
                with lock:
                    outcomes[classify(r)] += 1
                    if r.session:
                        outcomes["answered_with_a_session_id"] += 1
                    counts[pids.get(pid_of(r.answer), "unknown")] += 1
            close(box)

        threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(10)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=WAIT)
        self.report["stateless"] = {"requests": sum(outcomes.values()), "outcomes": dict(outcomes),
                                    "per_replica": dict(sorted(counts.items()))}
        check(outcomes == {"ok": 300}, f"stateless: all 300 answered: {dict(outcomes)}", self.failures)
        check(len([r for r in self.replicas if counts[r.name] >= 60]) == 3,
              f"stateless: spread over all three replicas: {dict(counts)}", self.failures)


    def trips(self, port: int, label: str, threads: int, each: int) -> list[Trip]:
        """`threads` clients make `each` multi-round calls one after another."""
        trips: list[Trip] = []
        lock = threading.Lock()

        def worker(k: int) -> None:
            for i in range(each):
                t = round_trip(port, f"{label}-{k}-{i}")
                with lock:
                    trips.append(t)

        pool = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join(timeout=4 * WAIT)
        if any(t.is_alive() for t in pool):
            raise Failed(f"multiround: a {label} client did not finish within its bound")
        return trips

    def multiround(self) -> None:
        log("phase multiround: 2026-07-28 calls with an input-required round, round robin")
        names = {r.name for r in self.replicas}
        # One call at a time: a 2025 server shared by a replica's clients
        # sends its roots/list with nothing that names the call it is for,
        # and the gateway attributes it only while one call is in flight
        # there (else the server is told -32021). Round robin then sends
        # every retry to another replica than its round, unless routed.
        trips = self.trips(self.lb.port, "routed", threads=1, each=45)
        outcomes = collections.Counter(t.outcome for t in trips)
        signers = collections.Counter(t.signer for t in trips)
        self.report["multiround"] = {"calls": len(trips), "outcomes": dict(outcomes),
                                     "rounds_per_replica": dict(sorted(signers.items(), key=str))}
        check(outcomes == {"ok": len(trips)},
              f"multiround: all {len(trips)} calls complete with their own answer: {dict(outcomes)} "
              f"{[t.detail for t in trips if t.outcome != 'ok'][:3]}", self.failures)
        check(len([n for n in names if signers[n] > 0]) == 3,
              f"multiround: the rounds come from all three replicas: {dict(signers)}", self.failures)
        check(all(t.round_header == t.signer and t.retry_header == t.signer for t in trips),
              "multiround: each round's Mcp-Replica names the replica its requestState names, "
              "and its retry is answered there", self.failures)

        # A forged replica name: the retry goes to the replica it names,
        # which refuses it (its signature does not match).
        t = round_trip(self.lb.port, "forged", forge=True)
        check(t.outcome == "refused" and t.retry_header is not None and t.retry_header != t.signer,
              f"multiround: a requestState whose replica name was changed is refused there (-32602): "
              f"{t.outcome} from {t.retry_header}, signed by {t.signer}: {t.detail}", self.failures)

        # The replica holding the call is gone: the retry is refused by
        # another one, at once (the client starts over).
        victims: list[Replica] = []

        def kill_signer(trip: Trip) -> None:
            victim = next(r for r in self.replicas if r.name == trip.signer)
            victim.kill()
            victims.append(victim)

        t0 = time.monotonic()
        t = round_trip(self.lb.port, "gone", before_retry=kill_signer)
        took = time.monotonic() - t0
        check(t.outcome == "refused" and t.retry_header not in (None, t.signer) and took < 10,
              f"multiround: a retry whose replica is gone is refused by another (-32602) in {took:.1f}s: "
              f"{t.outcome} from {t.retry_header}, signed by {t.signer}: {t.detail}", self.failures)
        for victim in victims:
            victim.start()
        self.lb.wait_routes(set(self.replicas))

        # Without the routing lines, round robin sends retries elsewhere:
        # they are refused, never answered with another call's result.
        plain = self.work / "haproxy-no-routing.cfg"
        plain.write_text("".join(line for line in HAPROXY_CFG.read_text().splitlines(keepends=True)
                                 if "txn.replica" not in line and "txn.state" not in line))
        lb = Balancer(free_port(), self.replicas, self.work, cfg=plain, log_name="haproxy-no-routing.log")
        try:
            lb.start()
            trips = self.trips(lb.port, "unrouted", threads=1, each=15)
        finally:
            lb.stop()
        outcomes = collections.Counter(t.outcome for t in trips)
        self.report["multiround"]["without_routing"] = dict(outcomes)
        elsewhere = [t for t in trips if t.retry_header != t.signer]
        check(set(outcomes) <= {"ok", "refused"} and outcomes["refused"] > 0,
              f"multiround: without the routing lines some retries are refused, none answered wrongly: "
              f"{dict(outcomes)}", self.failures)
        check(all((t.retry_header != t.signer) == (t.outcome == "refused") for t in trips)
              and all("replica `" in t.detail for t in elsewhere),
              "multiround: exactly the retries that reached another replica are refused, naming the "
              "replica that holds the call", self.failures)

    def modern_trips(self, port: int, label: str, threads: int, each: int, rounds: int) -> list[ModernTrip]:
        """`threads` clients at once make `each` calls of `confirm` one
        after another."""
        trips: list[ModernTrip] = []
        lock = threading.Lock()

        def worker(k: int) -> None:
            for i in range(each):
                t = modern_trip(port, f"{label}-{k}-{i}", rounds)
                with lock:
                    trips.append(t)

        pool = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join(timeout=4 * WAIT)
        if any(t.is_alive() for t in pool):
            raise Failed(f"modern: a {label} client did not finish within its bound")
        return trips

    def modern(self) -> None:
        log("phase modern: a 2026-07-28 server's own multi-round calls, round robin")
        names = {r.name for r in self.replicas}
        workers = {r.name: r.modern_pid for r in self.replicas}
        # The server keeps nothing per call, so calls run at once; each
        # has two rounds, so every call's retries cross the round robin
        # twice.
        trips = self.modern_trips(self.lb.port, "routed", threads=6, each=10, rounds=2)
        outcomes = collections.Counter(t.outcome for t in trips)
        signers = collections.Counter(t.signer for t in trips)
        self.report["modern"] = {"calls": len(trips), "retries": 2 * len(trips), "outcomes": dict(outcomes),
                                 "calls_per_replica": dict(sorted(signers.items(), key=str))}
        check(outcomes == {"ok": len(trips)},
              f"modern: all {len(trips)} calls complete, each round answered: {dict(outcomes)} "
              f"{[t.detail for t in trips if t.outcome != 'ok'][:3]}", self.failures)
        check(len([n for n in names if signers[n] > 0]) == 3,
              f"modern: the calls start on all three replicas: {dict(signers)}", self.failures)
        check(all(all(h == t.signer for h in t.headers) and t.pid == workers.get(t.signer) for t in trips),
              "modern: every round and retry is answered (Mcp-Replica) by the replica its wrapped "
              "requestState names, and by that replica's worker process", self.failures)

        # Without the routing lines: the retries that land elsewhere are
        # refused by the gateway there, naming the replica; none reaches a
        # worker that did not sign its state.
        plain = self.work / "haproxy-no-routing-modern.cfg"
        plain.write_text("".join(line for line in HAPROXY_CFG.read_text().splitlines(keepends=True)
                                 if "txn.replica" not in line and "txn.state" not in line))
        lb = Balancer(free_port(), self.replicas, self.work, cfg=plain, log_name="haproxy-no-routing-modern.log")
        try:
            lb.start()
            trips = self.modern_trips(lb.port, "unrouted", threads=3, each=5, rounds=1)
        finally:
            lb.stop()
        outcomes = collections.Counter(t.outcome for t in trips)
        self.report["modern"]["without_routing"] = dict(outcomes)
        check(set(outcomes) <= {"ok", "refused"} and outcomes["refused"] > 0,
              f"modern: without the routing lines some retries are refused, none answered wrongly: "
              f"{dict(outcomes)}", self.failures)
        check(all((t.headers[-1] != t.signer) == (t.outcome == "refused") for t in trips)
              and all(f"replica `{t.signer}`" in t.detail for t in trips if t.outcome == "refused")
              and all(t.pid == workers.get(t.signer) for t in trips if t.outcome == "ok"),
              "modern: exactly the retries that reached another replica are refused, naming the "
              "replica whose server gave the state", self.failures)


# ------------------------------------------------------------------ bench


def cpu_seconds(pid: int) -> float:
    """User and system CPU time a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_load(port: int, pid: int, what: str, seconds: float, threads: int) -> tuple[int, int]:
    """One client process: `threads` clients for `seconds`; (done, failed)."""
    stop = threading.Event()
    totals = collections.Counter()
    lock = threading.Lock()

    def loop(k: int) -> None:
        c = Client(k, port, {pid: "replica"})
        box = [None]
        n = bad = 0
        while not stop.is_set():
            if what == "sessions":
                # A session's whole life: initialize, initialized, one call
                # (whoami, in initialize), DELETE.
                ok = c.initialize(box)
                if ok:
                    session, c.session = c.session, None
                    try:
                        conn = box[0]
                        conn.request("DELETE", "/mcp", headers={"authorization": f"Bearer {TOKEN}",
                                                                "mcp-session-id": session})
                        ok = conn.getresponse().read() is not None
                    except (OSError, http.client.HTTPException, AttributeError):
                        close(box)
                        ok = False
            else:
                if c.session is None and not c.initialize(box):
                    bad += 1
                    continue
                r = post(box, "127.0.0.1", port, whoami_call(c.rid()), c.headers())
                ok = classify(r) == "ok"
            n, bad = n + ok, bad + (not ok)
        close(box)
        with lock:
            totals["ok"] += n
            totals["bad"] += bad

    ts = [threading.Thread(target=loop, args=(k,), daemon=True) for k in range(threads)]
    for t in ts:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in ts:
        t.join(timeout=WAIT)
    return totals["ok"], totals["bad"]


def bench(mcpvisor: str, worker: str, work: Path, seconds: float, procs: int, threads: int) -> dict:
    """One replica, no balancer: sessions per second (initialize,
    initialized, a call, DELETE) and calls per second in open sessions, from
    `procs` client processes of `threads` clients each. The replica's own
    CPU time (mcpvisor and its worker) gives its cost per session and per
    call, hence what it would do with two cores to itself."""
    import multiprocessing

    token_file = work / "token"
    token_file.write_text(TOKEN + "\n")
    config = work / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"worker": {"command": worker, "args": []}}}))
    replica = Replica(1, free_port(), mcpvisor, config, token_file, work)
    replica.start()
    assert replica.proc is not None
    pids = (replica.proc.pid, replica.worker_pid)
    out: dict = {"client_processes": procs, "clients": procs * threads, "seconds": seconds,
                 "cores": os.cpu_count()}
    try:
        with multiprocessing.get_context("fork").Pool(procs) as pool:
            for what in ("sessions", "calls"):
                cpu0 = sum(cpu_seconds(p) for p in pids)
                t0 = time.monotonic()
                results = pool.starmap(bench_load, [(replica.port, replica.worker_pid, what, seconds, threads)] * procs)
                took = time.monotonic() - t0
                cpu = sum(cpu_seconds(p) for p in pids) - cpu0
                done = sum(r[0] for r in results)
                failed = sum(r[1] for r in results)
                per_cpu_second = done / cpu if cpu > 0 else None
                out[what] = {
                    "per_second": round(done / took, 1),
                    "done": done,
                    "failed": failed,
                    "replica_cpu_seconds": round(cpu, 2),
                    "replica_cpu_ms_each": round(1000 * cpu / done, 3) if done else None,
                    "ceiling_on_2_cores": round(2 * per_cpu_second, 0) if per_cpu_second else None,
                }
                log(f"bench {what}: {out[what]}")
    finally:
        replica.stop()
    return out


# ------------------------------------------------------------------ main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mcpvisor", default=os.environ.get("MCPVISOR_BIN", str(ROOT / "target/debug/mcpvisor")))
    ap.add_argument("--worker", help="the fake worker (default: next to mcpvisor)")
    ap.add_argument("--report", help="also write the JSON report to this file")
    ap.add_argument("--keep", action="store_true", help="keep the logs directory")
    ap.add_argument("--phases", default=",".join(PHASES), help="which phases to run, in order")
    ap.add_argument("--bench", action="store_true", help="measure one replica instead")
    ap.add_argument("--bench-seconds", type=float, default=10.0)
    ap.add_argument("--bench-procs", type=int, default=2)
    ap.add_argument("--bench-threads", type=int, default=8)
    args = ap.parse_args()
    worker = args.worker or str(Path(args.mcpvisor).with_name("mcpvisor-fake-worker"))
    for exe in (args.mcpvisor, worker):
        if not os.access(exe, os.X_OK):
            print(f"lb test: {exe} is not an executable; build first", file=sys.stderr)
            return 2
    work = Path(tempfile.mkdtemp(prefix="mcpvisor-lb-"))
    log(f"logs in {work}")
    if args.bench:
        report = bench(args.mcpvisor, worker, work, args.bench_seconds, args.bench_procs, args.bench_threads)
        print(json.dumps(report, indent=2))
        return 0
    test = Test(args.mcpvisor, worker, work)
    test.phases = [p for p in args.phases.split(",") if p]
    unknown = set(test.phases) - set(PHASES)
    if unknown:
        print(f"lb test: unknown phases {sorted(unknown)}; there are {PHASES}", file=sys.stderr)
        return 2
    try:
        test.run()
    except Failed as e:
        test.failures.append(str(e))
        log(f"FAILED: {e}")
    text = json.dumps(test.report, indent=2, default=str)
    print(text)
    if args.report:
        Path(args.report).write_text(text + "\n")
    if test.failures:
        log(f"{len(test.failures)} check(s) failed; logs kept in {work}")
        return 1
    if not args.keep:
        import shutil
        shutil.rmtree(work, ignore_errors=True)
    log("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
