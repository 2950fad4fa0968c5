"""The OAuth tier's CLI paste prompt: `auth login` and `call --url` on a
terminal (a pseudo-terminal here), whose browser cannot reach the loopback
listener. The browser ($BROWSER) only notes the link; the driver follows it
with curl up to the redirect to the listener, which it does not fetch, and
types the address the browser ended on at the prompt, as a person would.

Checks, each printed as a line (✓ or ✗) and counted in the last line
(`paste: N passed, M failed`):

* the prompt offers the paste and says why the server needs authorizing;
* a pasted line that is not this flow's answer is refused, and the flow
  goes on waiting;
* the pasted address completes the flow: `auth login` says authorized and
  exits 0, `call --url` prints the tool's answer.

Usage: paste_driver.py BIN URL WORK
"""

import os
import pty
import select
import subprocess
import sys
import time
import urllib.parse

BIN, URL, WORK = sys.argv[1:4]
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


def follow_to_redirect(link):
    """Follows `link`'s redirects with a cookie jar, as a browser would, and
    returns the address of the redirect to the loopback listener, unfetched."""
    jar = os.path.join(WORK, "paste-jar")
    redirect = urllib.parse.parse_qs(urllib.parse.urlparse(link).query).get("redirect_uri", [""])[0]
    url = link
    for _ in range(20):
        if redirect and url.startswith(redirect):
            return url
        out = subprocess.run(
            ["curl", "-sS", "--max-time", "60", "-c", jar, "-b", jar,
             "-o", "/dev/null", "-w", "%{redirect_url}", url],
            capture_output=True, text=True, timeout=90,
        )
        if not out.stdout:
            return ""
        url = out.stdout
    return ""


def run_with_paste(tag, argv):
    """Runs `argv` with a terminal for stdin; pastes a forged answer, then
    the real one. Returns (exit status, stdout, stderr)."""
    links = os.path.join(WORK, f"paste-{tag}.links")
    browser = os.path.join(WORK, f"paste-{tag}.browser")
    with open(browser, "w") as f:
        f.write(f"#!/bin/sh\necho \"$1\" >>{links}\n")
    os.chmod(browser, 0o755)
    open(links, "w").close()
    err_path = os.path.join(WORK, f"paste-{tag}.err")
    out_path = os.path.join(WORK, f"paste-{tag}.out")
    master, slave = pty.openpty()
    env = dict(os.environ, BROWSER=browser)
    with open(err_path, "w") as err, open(out_path, "w") as out:
        proc = subprocess.Popen(argv, stdin=slave, stdout=out, stderr=err, env=env)
    os.close(slave)

    def stderr():
        with open(err_path) as f:
            return f.read()

    def wait_for(probe, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            # Drain the terminal's echo so the child never blocks on it.
            if select.select([master], [], [], 0)[0]:
                try:
                    os.read(master, 4096)
                except OSError:
                    pass
            if probe():
                return True
            time.sleep(0.1)
        return probe()

    prompted = wait_for(lambda: "paste here the address" in stderr())
    check(f"{tag}: the prompt offers to paste the address the browser landed on", prompted, stderr()[-600:])
    check(f"  and says why the server needs authorizing", "not authorized yet" in stderr()
          or "asked to log in" in stderr(), stderr()[-600:])
    with open(links) as f:
        link = f.readline().strip()
    landed = follow_to_redirect(link) if link else ""
    check(f"  the browser ends on the loopback redirect (not fetched)", "code=" in landed, f"{link!r} -> {landed!r}")
    forged = landed.replace("state=", "state=forged") if landed else "http://127.0.0.1:1/callback?state=x"
    os.write(master, (forged + "\n").encode())
    refused = wait_for(lambda: "no authorization in progress is waiting for that answer" in stderr(), 30)
    check(f"  a pasted answer of no flow is refused", refused and proc.poll() is None, stderr()[-600:])
    os.write(master, (landed + "\n").encode())
    try:
        code = proc.wait(90)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait(5)
    os.close(master)
    with open(out_path) as f:
        return code, f.read(), stderr()


subprocess.run([BIN, "auth", "logout", "--url", URL], capture_output=True, timeout=30)
code, _, err = run_with_paste("login", [BIN, "auth", "login", "--url", URL])
check("  the pasted address completes auth login", code == 0 and "mcpvisor: authorized" in err, f"{code}: {err[-600:]}")

subprocess.run([BIN, "auth", "logout", "--url", URL], capture_output=True, timeout=30)
code, out, err = run_with_paste("call", [BIN, "call", "--timeout", "120s", "--url", URL, "whoami"])
check("  the pasted address completes call --url, which answers", code == 0 and "authorized" in out,
      f"{code}: {out[-300:]} {err[-600:]}")

print(f"paste: {passed} passed, {failed} failed", flush=True)
