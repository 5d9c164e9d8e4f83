"""Unit tests of koordtest.webhookcfg (tests/lib/koordtest/webhookcfg.py). Run by tests/e2e/run
first, or: python3 tests/e2e/test_webhookcfg.py (or python3 -m unittest test_webhookcfg in
tests/e2e)."""

from __future__ import annotations

import copy
import os
import shutil
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))

from koordtest import webhookcfg  # noqa: E402

RENDERED = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "MutatingWebhookConfiguration",
    "metadata": {"name": "koord-webhook", "labels": {"app": "x"}},
    "webhooks": [
        {
            "name": "pods.qos.koordinator.sh",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Ignore",
            "timeoutSeconds": 5,
            "reinvocationPolicy": "IfNeeded",
            "matchPolicy": "Equivalent",
            "namespaceSelector": {
                "matchLabels": {"koordinator.sh/qos-webhook": "enabled"},
                "matchExpressions": [
                    {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}
                ],
            },
            "objectSelector": {},
            "rules": [
                {
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": ["pods"],
                    "scope": "Namespaced",
                }
            ],
            "clientConfig": {
                "service": {"namespace": "koordinator-system", "name": "koord-webhook", "path": "/mutate-pod", "port": 443},
                "caBundle": "",
            },
        }
    ],
}


class ServiceToUrl(unittest.TestCase):
    def test_only_client_config_changes(self):
        out = webhookcfg.service_to_url(RENDERED, "127.0.0.1", 18443, "Q0E=\n")
        self.assertEqual(
            out["webhooks"][0]["clientConfig"],
            {"url": "https://127.0.0.1:18443/mutate-pod", "caBundle": "Q0E="},
        )
        # Everything else is byte for byte what was rendered.
        expect = copy.deepcopy(RENDERED)
        got = copy.deepcopy(out)
        for wh in expect["webhooks"] + got["webhooks"]:
            wh.pop("clientConfig")
        self.assertEqual(got, expect)

    def test_input_not_modified(self):
        before = copy.deepcopy(RENDERED)
        webhookcfg.service_to_url(RENDERED, "127.0.0.1", 1, "Q0E=")
        self.assertEqual(RENDERED, before)

    def test_every_webhook_and_default_path(self):
        mwc = copy.deepcopy(RENDERED)
        second = copy.deepcopy(mwc["webhooks"][0])
        second["name"] = "second.koordinator.sh"
        del second["clientConfig"]["service"]["path"]
        mwc["webhooks"].append(second)
        out = webhookcfg.service_to_url(mwc, "127.0.0.1", 9443, "Q0E=")
        self.assertEqual(
            [w["clientConfig"]["url"] for w in out["webhooks"]],
            ["https://127.0.0.1:9443/mutate-pod", "https://127.0.0.1:9443/"],
        )

    def test_ipv6_host_is_bracketed(self):
        out = webhookcfg.service_to_url(RENDERED, "::1", 9443, "Q0E=")
        self.assertEqual(out["webhooks"][0]["clientConfig"]["url"], "https://[::1]:9443/mutate-pod")

    def test_rejects_url_configs_wrong_kinds_and_empty_ca(self):
        url_mwc = copy.deepcopy(RENDERED)
        url_mwc["webhooks"][0]["clientConfig"] = {"url": "https://example.com/"}
        with self.assertRaises(ValueError):
            webhookcfg.service_to_url(url_mwc, "127.0.0.1", 1, "Q0E=")
        with self.assertRaises(ValueError):
            webhookcfg.service_to_url({"kind": "ConfigMap"}, "127.0.0.1", 1, "Q0E=")
        with self.assertRaises(ValueError):
            webhookcfg.service_to_url(RENDERED, "127.0.0.1", 1, " ")
        empty = copy.deepcopy(RENDERED)
        empty["webhooks"] = []
        with self.assertRaises(ValueError):
            webhookcfg.service_to_url(empty, "127.0.0.1", 1, "Q0E=")


class Parsing(unittest.TestCase):
    def test_json_stream_and_lists(self):
        text = '{"kind": "A"}\n{"kind": "List", "items": [{"kind": "B"}, {"kind": "C"}]}\n  '
        self.assertEqual([o["kind"] for o in webhookcfg.parse_json_stream(text)], ["A", "B", "C"])

    def test_select_and_only(self):
        objs = [{"kind": "A", "metadata": {"name": "a"}}, {"kind": "B"}, {"kind": "A", "metadata": {"name": "b"}}]
        self.assertEqual(len(webhookcfg.select(objs, "A")), 2)
        self.assertEqual(webhookcfg.only(objs, "B"), {"kind": "B"})
        with self.assertRaises(webhookcfg.RenderError):
            webhookcfg.only(objs, "A")
        with self.assertRaises(webhookcfg.RenderError):
            webhookcfg.only(objs, "C")


KUBECTL = os.environ.get("KUBECTL") or shutil.which("kubectl")


@unittest.skipUnless(KUBECTL, "needs kubectl (the e2e suite always sets KUBECTL)")
class KubectlConversion(unittest.TestCase):
    def test_yaml_round_trip_keeps_objects_as_written(self):
        yaml_text = """\
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: koord-webhook
webhooks:
  - name: pods.qos.koordinator.sh
    admissionReviewVersions: ["v1"]
    sideEffects: None
    failurePolicy: Ignore
    clientConfig:
      service: {namespace: koordinator-system, name: koord-webhook, path: /mutate-pod}
    rules:
      - {apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["pods"]}
---
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: no-crd-needed
spec: {}
"""
        objs = webhookcfg.yaml_to_objects(KUBECTL, yaml_text)
        self.assertEqual([o["kind"] for o in objs], ["MutatingWebhookConfiguration", "ServiceMonitor"])
        wh = objs[0]["webhooks"][0]
        # No defaulting on the way: fields not written stay absent.
        self.assertNotIn("timeoutSeconds", wh)
        self.assertNotIn("namespaceSelector", wh)
        self.assertEqual(wh["clientConfig"]["service"]["path"], "/mutate-pod")


if __name__ == "__main__":
    unittest.main()
