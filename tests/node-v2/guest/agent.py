#!/usr/bin/python3
"""The guest's test agent: runs shell commands for the suite on the host.

The suite asserts on files only the guest kernel has (its cgroup tree, /proc of the guest's
processes), so it needs a way in. This is that way and nothing more: one POST /sh with a shell
script as the body; the answer is JSON {"rc", "stdout", "stderr"}. It listens on the guest's
end of the host-guest link only (the address is the first argument), and the link is a tap
device that exists only on this machine.

Stdlib only; runs under the host's /usr/bin/python3 through the read-only hostfs root.
"""

import json
import subprocess
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        if self.path != "/sh":
            self.send_error(404)
            return
        script = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode()
        timeout = float(self.headers.get("X-Timeout", "60"))
        try:
            p = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True,
                               timeout=timeout, stdin=subprocess.DEVNULL)
            out = {"rc": p.returncode, "stdout": p.stdout, "stderr": p.stderr}
        except subprocess.TimeoutExpired as e:
            out = {"rc": 124, "stdout": str(e.stdout or ""), "stderr": f"timed out after {timeout}s"}
        body = json.dumps(out).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:  # quiet: the suite logs what it asks
        pass


if __name__ == "__main__":
    ThreadingHTTPServer((sys.argv[1], int(sys.argv[2])), Handler).serve_forever()
