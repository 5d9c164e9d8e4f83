"""Render manifests/ and turn the in-cluster MutatingWebhookConfiguration into a loopback one.

The end-to-end suite runs `koord-webhook serve` as a process on 127.0.0.1, not as a Pod behind
the Service, so the one thing it changes in the rendered MutatingWebhookConfiguration is each
webhook's `clientConfig`: `service: {namespace, name, path, port}` becomes
`url: https://127.0.0.1:<port><path>` and `caBundle` is set to the CA that `koord-webhook certs`
made. Everything else (failurePolicy, selectors, rules, timeouts, reinvocation, sideEffects)
stays exactly as rendered. `test_webhookcfg.py` pins that down.

Stdlib only. YAML is turned into JSON by kubectl itself (`kubectl patch --local` with an empty
merge patch), so no YAML parser is needed and nothing is reinterpreted on the way.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
from collections.abc import Iterable

MWC_KIND = "MutatingWebhookConfiguration"


class RenderError(Exception):
    """The manifests could not be rendered or converted."""


def parse_json_stream(text: str) -> list[dict]:
    """Parses concatenated JSON documents (what `kubectl ... -o json` prints for several
    objects), flattening `kind: List` wrappers."""
    decoder = json.JSONDecoder()
    out: list[dict] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            break
        obj, i = decoder.raw_decode(text, i)
        if isinstance(obj, dict) and obj.get("kind") == "List" and "items" in obj:
            out.extend(obj["items"])
        elif isinstance(obj, dict):
            out.append(obj)
        else:
            raise RenderError(f"expected a JSON object, got {type(obj).__name__}")
    return out


def yaml_to_objects(kubectl: str, yaml_text: str) -> list[dict]:
    """Converts multi-document YAML to JSON objects with kubectl, offline (`--local`): the
    empty merge patch leaves every object as written, CRD kinds included."""
    proc = subprocess.run(
        [kubectl, "patch", "--local", "-f", "-", "--type", "merge", "-p", "{}", "-o", "json"],
        input=yaml_text,
        capture_output=True,
        text=True,
        env={**os.environ, "KUBECONFIG": "/dev/null"},
        check=False,
    )
    if proc.returncode != 0:
        raise RenderError(f"kubectl patch --local failed: {proc.stderr.strip()}")
    return parse_json_stream(proc.stdout)


def render(kubectl: str, kustomize_dir: str) -> list[dict]:
    """`kubectl kustomize DIR`, as JSON objects."""
    proc = subprocess.run(
        [kubectl, "kustomize", kustomize_dir], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise RenderError(f"kubectl kustomize {kustomize_dir} failed: {proc.stderr.strip()}")
    return yaml_to_objects(kubectl, proc.stdout)


def select(objects: Iterable[dict], *kinds: str) -> list[dict]:
    """The objects of the given kinds, in rendering order."""
    return [o for o in objects if o.get("kind") in kinds]


def only(objects: Iterable[dict], kind: str) -> dict:
    """The single object of a kind; an error if there are none or several."""
    found = select(objects, kind)
    if len(found) != 1:
        names = [o.get("metadata", {}).get("name") for o in found]
        raise RenderError(f"expected exactly one {kind} in the rendered manifests, found {names}")
    return found[0]


def service_to_url(mwc: dict, host: str, port: int, ca_bundle: str) -> dict:
    """Returns a copy of the MutatingWebhookConfiguration whose webhooks call
    `https://HOST:PORT<service.path>` with `caBundle` instead of the in-cluster Service.

    Only `clientConfig` changes. A webhook that already has a `url` or no `service` is an
    error: the rendered manifests are expected to target the Service.
    """
    if mwc.get("kind") != MWC_KIND:
        raise ValueError(f"not a {MWC_KIND}: {mwc.get('kind')!r}")
    if not ca_bundle or not ca_bundle.strip():
        raise ValueError("empty caBundle")
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # IPv6 literal
    out = copy.deepcopy(mwc)
    webhooks = out.get("webhooks") or []
    if not webhooks:
        raise ValueError(f"{MWC_KIND} {mwc.get('metadata', {}).get('name')!r} has no webhooks")
    for wh in webhooks:
        cc = wh.get("clientConfig") or {}
        svc = cc.get("service")
        if svc is None or "url" in cc:
            raise ValueError(f"webhook {wh.get('name')!r}: clientConfig does not target a Service")
        path = svc.get("path") or "/"
        if not path.startswith("/"):
            path = "/" + path
        wh["clientConfig"] = {"url": f"https://{host}:{port}{path}", "caBundle": ca_bundle.strip()}
    return out
