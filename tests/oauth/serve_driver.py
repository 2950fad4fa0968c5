"""The OAuth tier's `serve` part: a gateway with a native-OAuth url entry and
its web UI, driven as an MCP client on stdio and through the UI's API.

Checks, each printed as a line (✓ or ✗) and counted in the last line
(`serve: N passed, M failed`):

* the server waits for authorization, with a link whose redirect URI is the
  UI's own /oauth/callback; an answer with an unknown state is refused;
* following the link (curl, as a browser would) lands on the UI, authorizes,
  and the server's tools join with one list_changed; the answer is not
  accepted twice;
* a revoked grant (its refresh token revoked at the authorization server)
  puts the server back to waiting, and a call gets -32011 with
  the link; following it brings the server back (its tools stayed listed
  meanwhile, so no list_changed);
* with the UI on every address (the redirect then goes to a loopback
  listener the browser does not reach), the address the browser ended on,
  pasted into the UI's API, authorizes; a second paste is refused.

Usage: serve_driver.py BIN URL ISSUER WORK
"""

import glob
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

BIN, URL, ISSUER, WORK = sys.argv[1:5]
STORE = os.path.join(os.environ["XDG_STATE_HOME"], "mcpvisor", "oauth")
passed = 0
failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"✓ {name}", flush=True)
    else:
        failed += 1
        print(f"✗ {name}  {detail}", flush=True)


class Gateway:
    def __init__(self, tag, ui, extra=()):
        config = os.path.join(WORK, f"serve-{tag}.json")
        with open(config, "w") as f:
            json.dump({"mcpServers": {"prot": {"url": URL}}}, f)
        self.stderr_path = os.path.join(WORK, f"serve-{tag}.err")
        self.proc = subprocess.Popen(
            [BIN, "serve", "--config", config, "--ui", ui, "--no-watch", *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=open(self.stderr_path, "w"),
        )
        self.answers = {}
        self.list_changed = 0
        self.cond = threading.Condition()
        self.next_id = 0
        threading.Thread(target=self.read, daemon=True).start()
        m = self.wait(lambda: re.search(r"UI at (http://[^\s/]+)/\?token=(\S+)", self.stderr()), 30)
        if not m:
            raise SystemExit(f"serve: no UI line: {self.stderr()}")
        self.origin = m.group(1).replace("0.0.0.0", "127.0.0.1")
        self.token = m.group(2)
        self.request("initialize", {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "oauth-tier", "version": "1"},
        })
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def stderr(self):
        with open(self.stderr_path) as f:
            return f.read()

    def read(self):
        for line in self.proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            with self.cond:
                if msg.get("method") == "notifications/tools/list_changed":
                    self.list_changed += 1
                elif "id" in msg:
                    self.answers[msg["id"]] = msg
                self.cond.notify_all()

    def send(self, msg):
        self.proc.stdin.write((json.dumps(msg) + "\n").encode())
        self.proc.stdin.flush()

    def request(self, method, params, timeout=60):
        self.next_id += 1
        rid = self.next_id
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        with self.cond:
            self.cond.wait_for(lambda: rid in self.answers, timeout)
            return self.answers.pop(rid, None)

    @staticmethod
    def wait(probe, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = probe()
            if got:
                return got
            time.sleep(0.1)
        return probe()

    def api(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.origin + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=90) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def server(self):
        status, snapshot = self.api("GET", "/api/servers")
        rows = snapshot.get("servers", []) if isinstance(snapshot, dict) else snapshot
        return next((r for r in rows if r.get("name") == "prot"), {})

    def waiting(self, old_link=None):
        def probe():
            s = self.server()
            link = s.get("auth_url")
            return s if s.get("state") == "waiting_auth" and link and link != old_link else None
        return self.wait(probe, 60) or {}

    def ready(self):
        return self.wait(lambda: self.server().get("state") == "ready", 60)

    def whoami(self, timeout=60):
        tools = (self.request("tools/list", {}) or {}).get("result", {}).get("tools", [])
        name = next((t["name"] for t in tools if t["name"].endswith("whoami")), None)
        if name is None:
            return None, tools
        return self.request("tools/call", {"name": name, "arguments": {}}, timeout), tools

    def stop(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def follow(link, stop_at=None):
    """Follows the redirects from `link` with a cookie jar, as a browser
    would; stops before fetching a URL that starts with `stop_at` and
    returns it, else fetches everything and returns (final URL, page)."""
    jar = os.path.join(WORK, "serve-jar")
    url = link
    for _ in range(20):
        if stop_at and url.startswith(stop_at):
            return url, ""
        out = subprocess.run(
            ["curl", "-sS", "--max-time", "60", "-c", jar, "-b", jar,
             "-o", os.path.join(WORK, "serve-page"), "-w", "%{redirect_url}", url],
            capture_output=True, text=True, timeout=90,
        )
        if not out.stdout:
            with open(os.path.join(WORK, "serve-page")) as f:
                return url, f.read()
        url = out.stdout
    return url, ""


def redirect_of(link):
    return urllib.parse.parse_qs(urllib.parse.urlparse(link).query).get("redirect_uri", [""])[0]


def stored(field):
    files = glob.glob(os.path.join(STORE, "*.json"))
    if not files:
        return ""
    with open(files[0]) as f:
        return (json.load(f).get("tokens") or {}).get(field) or ""


def stored_client():
    files = glob.glob(os.path.join(STORE, "*.json"))
    if not files:
        return {}
    with open(files[0]) as f:
        return next(iter((json.load(f).get("clients") or {}).values()), {})


def tools_join(gw, before, what, changes=1):
    check(f"{what}: the server is ready", gw.ready())
    # For the tier's check that no token reaches a log.
    with open(os.path.join(WORK, "serve-tokens"), "a") as f:
        f.write(f"{stored('access_token')}\n{stored('refresh_token')}\n")
    time.sleep(1.5)
    label = "with one list_changed" if changes == 1 else "with no list_changed (its tools stayed listed)"
    check(f"  {label}", gw.list_changed - before == changes, f"{gw.list_changed - before} of them")
    answer, tools = gw.whoami()
    check(f"  and its tool answers", bool(answer) and "authorized" in json.dumps(answer.get("result", {})),
          f"{answer} {[t['name'] for t in tools]}")


# 1. The callback on the UI's own address.
gw = Gateway("ui", "127.0.0.1:0")
waiting = gw.waiting()
link = waiting.get("auth_url", "")
check("serve: a server without tokens waits for authorization, with a link", bool(link), gw.server())
check("  and says why: not authorized yet", waiting.get("auth_reason") == "not authorized yet"
      and "not authorized yet" in (waiting.get("detail") or ""), waiting)
check("  whose redirect URI is the UI's /oauth/callback", redirect_of(link) == gw.origin + "/oauth/callback",
      redirect_of(link))
bogus = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}",
                        gw.origin + "/oauth/callback?code=x&state=unknown"], capture_output=True, text=True)
check("  an answer with an unknown state is refused", bogus.stdout == "400", bogus.stdout)
before = gw.list_changed
final, page = follow(link)
check("following the link lands on the UI and authorizes", "mcpvisor is authorized" in page,
      f"{final}: {page[:200]}")
tools_join(gw, before, "UI callback")
again = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", final],
                       capture_output=True, text=True)
check("  the same answer is not accepted twice", again.stdout == "400", again.stdout)

# 2. A revoked grant.
# The refresh token is revoked by its own client (as a person revoking the
# app's access would), which takes the grant with it.
refresh = stored("refresh_token")
client = stored_client()
auth = (["-u", f"{client['client_id']}:{client['client_secret']}"] if client.get("client_secret")
        else ["-d", f"client_id={client.get('client_id', '')}"])
revoked = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", *auth,
                          "-d", f"token={refresh}", "-d", "token_type_hint=refresh_token",
                          f"{ISSUER}/token/revocation"], capture_output=True, text=True, timeout=30)
check("the refresh token is revoked at the authorization server", revoked.stdout == "200", revoked.stdout)
time.sleep(int(os.environ.get("TTL", "6")) + 1)
answer, _ = gw.whoami(timeout=20)
error = (answer or {}).get("error", {})
waiting = gw.waiting(old_link=link)
link2 = waiting.get("auth_url", "")
check("a revoked grant puts the server back to waiting, with a new link", bool(link2), gw.server())
if error.get("code") != -32011:
    # The call that found the grant gone may have been answered before the
    # flow began; the next one is refused while the server waits.
    answer, _ = gw.whoami(timeout=20)
    error = (answer or {}).get("error", {})
check("  a call gets -32011 with the link", error.get("code") == -32011 and link2 in error.get("message", ""),
      json.dumps(answer)[:400])
reason = waiting.get("auth_reason") or ""
check("  the row says why: the refresh was refused (invalid_grant)",
      reason.startswith("its refresh was refused: invalid_grant") and reason in (waiting.get("detail") or ""),
      waiting)
check("  and so does the -32011 (message and error.data)",
      bool(reason) and f"({reason})" in error.get("message", "")
      and (error.get("data") or {}).get("auth_reason") == reason, json.dumps(error)[:400])
status_out = subprocess.run([BIN, "auth", "status", "--url", URL], capture_output=True, text=True, timeout=30)
check("  and auth status", f"not authorized ({reason})" in status_out.stdout, status_out.stdout)
before = gw.list_changed
final, page = follow(link2)
check("following the new link authorizes again", "mcpvisor is authorized" in page, f"{final}: {page[:200]}")
# Its tools stayed listed while it waited (calls got -32011): coming back
# changes no list.
tools_join(gw, before, "after the revoked grant", changes=0)
gw.stop()

# 3. The pasted URL: the UI on every address, the redirect to a loopback
# listener the browser does not reach.
subprocess.run([BIN, "auth", "logout", "--url", URL], capture_output=True, timeout=30)
token_file = os.path.join(WORK, "ui-token")
with open(token_file, "w") as f:
    f.write("tier-token-" + os.urandom(8).hex() + "\n")
os.chmod(token_file, 0o600)
gw = Gateway("paste", "0.0.0.0:0", ["--auth-token-file", token_file])
link = gw.waiting().get("auth_url", "")
redirect = redirect_of(link)
check("serve --ui 0.0.0.0: the redirect goes to a loopback listener", redirect.startswith("http://127.0.0.1:")
      and redirect.endswith("/callback"), redirect)
landed, _ = follow(link, stop_at=redirect)
check("  the browser ends on it", landed.startswith(redirect + "?"), landed)
status, body = gw.api("POST", "/api/oauth/paste", {"url": "http://127.0.0.1:1/callback?code=x&state=forged"})
check("  a pasted URL with an unknown state is refused", status == 400 and "no authorization" in body.get("error", ""),
      f"{status} {body}")
before = gw.list_changed
status, body = gw.api("POST", "/api/oauth/paste", {"url": landed})
check("  the pasted address authorizes", status == 200 and body == {"authorized": True}, f"{status} {body}")
tools_join(gw, before, "pasted URL")
status, body = gw.api("POST", "/api/oauth/paste", {"url": landed})
check("  a second paste is refused", status == 400, f"{status} {body}")
gw.stop()

print(f"serve: {passed} passed, {failed} failed", flush=True)
