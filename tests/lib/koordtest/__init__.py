"""The test harness every real-cluster suite shares (tests/e2e, tests/node, tests/node-v2).

Stdlib only, Python 3.11+. A suite puts this directory's parent (tests/lib) on sys.path and
imports what it needs:

- `checks`: Fatal, Check, check, wait_until, quantity
- `webhookcfg`: render manifests/ with kubectl kustomize; Service -> url for a loopback webhook
- `harness.Harness`: kubectl, kjson, apply_obj, pod, namespace, wait_running, delete_pods,
  events, figures, and file reads (`read`, `read_many`) that a node whose files are elsewhere
  (a guest) overrides
- `node.NodeHarness`: a Harness for a node started by a node.sh (node_sh, the product's images,
  the applier pod and its metrics, the kubelet's cgroup paths)
- `metrics`: Prometheus text parsing, sums and percentiles (of samples, of exact counts), the
  median of paired ratios
- `watch.ApiWatch`: the one watch of a collection (pods, Events) the suites time things by
- `sampler.Sampler`: a value read every N seconds in a thread, with its time (the suites'
  in-process samplers: BE's CPUs, NGINX's CPU, a working set, a process's peak RSS)
- `coverage`: what a koord-sample series (tests/lib/sample.c) saw of its window: its gaps,
  the guest's stalls counted as unobserved, the runs below a wanted value
- `runner.Suite`: the scenario registry, the run loop with KOORD_*_ONLY filtering, the
  PASS/FAIL/"N passed, M failed" output and the signal handling
"""

from .checks import Check, Fatal, check, quantity, wait_until  # noqa: F401
from .harness import Harness, log, set_log_tag  # noqa: F401
from .runner import NotRun, Suite  # noqa: F401

__all__ = ["Check", "Fatal", "check", "quantity", "wait_until", "Harness", "log",
           "set_log_tag", "NotRun", "Suite"]
