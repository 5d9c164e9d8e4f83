#!/usr/bin/env python3
"""A minimal fake kube-apiserver for measuring `koord-applier run` steady-state RSS.

Serves GET /api/v1/pods (the list, N pods built from tests/fixtures/ls-redis.json with unique
UIDs and container IDs), keeps watch requests open (silent), accepts Event POSTs.
Also creates the matching cgroup v2 tree under ROOT so every pod is really applied, with
`memory.current` (16 MiB, below every container's wmark_high) and `memory.reclaim` in each
directory: the fixture asks for async reclaim (`memory.wmark_ratio` 95) and the tree has no
`memory.wmark_*`, so `run` emulates it for every container (`--async-reclaim=false` does not).

With PROACTIVE=1 every pod's annotation also enables proactive reclaim (the defaults: 6 s,
10 ms, 1%; each container's floor its memory.min) and every directory has `memory.pressure`
and `memory.stat`: `run` reads both for each container every interval (memory.current stays
below each floor, so the loop reads and decides but has nothing to ask).

usage: [PROACTIVE=1] rss-fake-apiserver.py PORT ROOT N
"""
import http.server, json, os, sys, time, copy

port, root, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
here = os.path.dirname(os.path.abspath(__file__))
base = json.load(open(os.path.join(here, "../tests/fixtures/ls-redis.json")))
pods = []
proactive = os.environ.get("PROACTIVE") == "1"
if proactive:
    resolved = json.loads(base["metadata"]["annotations"]["koordinator.sh/resolved-qos"])
    resolved["proactiveReclaim"] = {
        "enabled": True,
        "params": {"intervalSeconds": 6, "stallTargetMicros": 10000, "stepPermill": 10,
                   "floorPercent": 0},
        "source": "pod-annotation",
        "containers": {name: {"floorBytes": knobs["memory.min"]}
                       for name, knobs in sorted(resolved["memoryQOS"]["containers"].items())}}
    base["metadata"]["annotations"]["koordinator.sh/resolved-qos"] = json.dumps(
        resolved, separators=(",", ":"))
defaults = {"memory.min": "0", "memory.low": "0", "memory.high": "max", "memory.max": "max",
            "memory.oom.group": "0", "cpu.weight": "100", "cpu.max": "max 100000",
            "memory.current": "16777216", "memory.reclaim": ""}
if proactive:
    defaults["memory.pressure"] = ("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
                                   "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    defaults["memory.stat"] = ("anon 8388608\nfile 8388608\nactive_file 4194304\n"
                               "inactive_file 4194304\n")
open(os.path.join(root, "cgroup.controllers"), "w").write("cpu memory\n")
os.makedirs(os.path.join(root, "kubepods.slice"), exist_ok=True)
open(os.path.join(root, "kubepods.slice/memory.reclaim"), "w").write("")
if proactive:
    # What the applier checks before it runs the loop at all (PSI at the pods' parent).
    open(os.path.join(root, "kubepods.slice/memory.pressure"), "w").write(defaults["memory.pressure"])
for i in range(n):
    p = copy.deepcopy(base)
    uid = "%08x-0000-4000-8000-%012x" % (i, i)
    p["metadata"]["uid"] = uid
    p["metadata"]["name"] = "redis-%d" % i
    p["metadata"]["resourceVersion"] = "1"
    pod_dir = os.path.join(root, "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%s.slice" % uid.replace("-", "_"))
    dirs = [pod_dir]
    for k, cs in enumerate(p["status"]["containerStatuses"]):
        cid = "%064x" % (i * 2 + k)
        cs["containerID"] = "containerd://" + cid
        dirs.append(os.path.join(pod_dir, "cri-containerd-%s.scope" % cid))
    for d in dirs:
        os.makedirs(d, exist_ok=True)
        for f, v in defaults.items():
            open(os.path.join(d, f), "w").write(v)
    pods.append(p)
body = json.dumps({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "100"}, "items": pods}).encode()

class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a):
        pass
    def do_GET(self):
        if "watch=true" in self.path or "watch=1" in self.path:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            time.sleep(290)  # the client's watch timeout is 290 s
            self.wfile.write(b"0\r\n\r\n")
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_POST(self):
        data = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
