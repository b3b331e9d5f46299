#!/usr/bin/env python3
"""Self-test of validate.py: break correct renders in known ways and require each break to be
reported with the expected message. Guards the validator against silently passing everything.

Usage: validator_selftest.py --crd-schemas DIR --kube-version V RENDERED_DIR
RENDERED_DIR holds the check.sh renders default.yaml, metrics.yaml and cert-manager.yaml.
"""

from __future__ import annotations

import argparse
import copy
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import validate  # noqa: E402


def find(docs, kind):
    return next(d for d in docs if d["kind"] == kind)


def server(docs):
    return find(docs, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]


def env(docs, name):
    return next(e for e in server(docs)["env"] if e["name"] == name)


# (render, what breaks, mutation, expected substring of an error)
MUTATIONS = [
    ("default", "unknown StatefulSet field",
     lambda d: find(d, "StatefulSet")["spec"].__setitem__("bogus", 1), "'bogus' was unexpected"),
    ("default", "wrong type",
     lambda d: find(d, "StatefulSet")["spec"].__setitem__("replicas", "3"), "is not of type 'integer'"),
    ("default", "misspelt probe field",
     lambda d: server(d)["readinessProbe"]["grpc"].__setitem__("serivce", "engram.ready"), "'serivce' was unexpected"),
    ("default", "kind without a schema",
     lambda d: d.append({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "default"}}),
     "no schema"),
    ("default", "headless Service hides not-ready pods",
     lambda d: next(s for s in d if s["kind"] == "Service" and s["spec"].get("clusterIP") == "None")["spec"].pop("publishNotReadyAddresses"),
     "publish not-ready addresses"),
    ("default", "OrderedReady pods",
     lambda d: find(d, "StatefulSet")["spec"].__setitem__("podManagementPolicy", "OrderedReady"), "Parallel"),
    ("default", "$(VAR) used before it is defined",
     lambda d: server(d)["env"].insert(0, {"name": "X", "value": "$(ENGRAM_POD_NAME)"}), "before it is defined"),
    ("default", "Service selects the test pod",
     lambda d: find(d, "Pod")["metadata"]["labels"].__setitem__("app.kubernetes.io/component", "server"), "also matches Pod/"),
    ("default", "HTTP readiness probe",
     lambda d: server(d).__setitem__("readinessProbe", {"httpGet": {"port": 7001, "path": "/"}}), "readinessProbe must be a gRPC probe"),
    ("default", "readiness probes the liveness service",
     lambda d: server(d)["readinessProbe"]["grpc"].__setitem__("service", "engram.live"), "health service engram.ready"),
    ("default", "peer list off by one",
     lambda d: env(d, "ENGRAM_PEERS").__setitem__("value", "1=engram-1.engram-headless.default.svc.cluster.local:7001"),
     "ENGRAM_PEERS entry"),
    ("default", "fixed node id",
     lambda d: server(d)["env"].append({"name": "ENGRAM_NODE_ID", "value": "1"}), "ENGRAM_NODE_ID must not be set"),
    ("default", "writable root filesystem in the hook",
     lambda d: find(d, "Job")["spec"]["template"]["spec"]["containers"][0]["securityContext"].__setitem__("readOnlyRootFilesystem", False),
     "readOnlyRootFilesystem"),
    ("default", "service links on",
     lambda d: find(d, "StatefulSet")["spec"]["template"]["spec"].__setitem__("enableServiceLinks", True), "enableServiceLinks"),
    ("default", "hook shrinks to the wrong size",
     lambda d: find(d, "Job")["spec"]["template"]["spec"]["containers"][0]["args"].__setitem__(5, "2"), "cluster shrink --to 3"),
    ("default", "hook only before upgrades",
     lambda d: find(d, "Job")["metadata"]["annotations"].__setitem__("helm.sh/hook", "pre-upgrade"), "pre-upgrade,pre-rollback"),
    ("default", "wrong namespace",
     lambda d: find(d, "Service")["metadata"].__setitem__("namespace", "other"), "expected 'default'"),
    ("metrics", "ServiceMonitor field typo (CRD schema)",
     lambda d: find(d, "ServiceMonitor")["spec"]["endpoints"][0].__setitem__("intervall", "10s"), "'intervall' was unexpected"),
    ("metrics", "ServiceMonitor scrapes a port the Service lacks",
     lambda d: find(d, "ServiceMonitor")["spec"]["endpoints"][0].__setitem__("port", "prom"), "port prom is not a port"),
    ("metrics", "PrometheusRule rule without an expression (CRD schema)",
     lambda d: find(d, "PrometheusRule")["spec"]["groups"][0]["rules"][0].pop("expr"), "'expr' is a required property"),
    ("metrics", "PrometheusRule rule field typo (CRD schema)",
     lambda d: find(d, "PrometheusRule")["spec"]["groups"][0]["rules"][0].__setitem__("annotation", {}), "'annotation' was unexpected"),
    ("cert-manager", "Certificate usage not in the CRD enum",
     lambda d: find(d, "Certificate")["spec"]["usages"].append("server-auth"), "is not one of"),
    ("cert-manager", "Certificate metadata checked against ObjectMeta",
     lambda d: find(d, "Certificate")["metadata"].__setitem__("labels", {"a": 5}), "is not of type 'string'"),
    ("cert-manager", "Certificate writes another Secret than the pods mount",
     lambda d: find(d, "Certificate")["spec"].__setitem__("secretName", "other"), "secretName is not the Secret"),
    ("cert-manager", "probes on the TLS port",
     lambda d: server(d)["livenessProbe"]["grpc"].__setitem__("port", 7001), "plaintext health port"),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--crd-schemas", type=pathlib.Path, required=True)
    ap.add_argument("--kube-version", required=True)
    ap.add_argument("rendered", type=pathlib.Path)
    args = ap.parse_args()
    crds = validate.load_crd_schemas(args.crd_schemas)
    renders = {}
    failed = 0
    for render, what, mutate, expect in MUTATIONS:
        if render not in renders:
            renders[render] = validate.load_docs(args.rendered / f"{render}.yaml")
            clean = validate.validate_docs(renders[render], [args.kube_version], crds, "default")
            if clean:
                print(f"  FAIL {render}.yaml is not clean to begin with: {clean[0]}")
                return 1
        docs = copy.deepcopy(renders[render])
        mutate(docs)
        errors = validate.validate_docs(docs, [args.kube_version], crds, "default")
        hit = [e for e in errors if expect in e]
        if hit:
            print(f"  ok   caught: {what}: {hit[0][:150]}")
        else:
            failed += 1
            print(f"  FAIL missed: {what} (expected an error containing {expect!r}; got {errors[:2]})")
    print(f"  {len(MUTATIONS) - failed}/{len(MUTATIONS)} deliberate breakages caught")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
