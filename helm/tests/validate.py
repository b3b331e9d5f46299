#!/usr/bin/env python3
"""Validate rendered Engram chart manifests, offline.

1. Schema: every document is validated with kubernetes-validate in strict mode (unknown fields
   are errors) against the bundled official Kubernetes schemas of each --kube-version. Kinds
   that are CRDs (cert-manager Certificate, prometheus-operator ServiceMonitor) are validated
   against the schemas in --crd-schemas instead. A kind with no schema at all is an error.
2. Invariants: cross-object checks that no schema can express (selectors that match, ports
   that exist, $(VAR) references Kubernetes can expand, hardened security contexts, the peer
   list, TLS wiring, ...). See check_invariants().

Usage: validate.py --kube-version 1.30 [--kube-version 1.27] --crd-schemas DIR FILE...
Exit status: 0 if every document of every file passes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import functools
import json
import pathlib
import re
import sys

import jsonschema
import referencing
import yaml
import kubernetes_validate.utils as kv

# kubernetes-validate re-reads (and re-parses) the 1.2 MB definitions file for every document;
# cache it. Pure speed-up, same results.
kv.schema_contents = functools.lru_cache(maxsize=None)(kv.schema_contents)

DEFINITIONS_URI = "https://kubernetes.io/api/_definitions.json"


def load_crd_schemas(directory: pathlib.Path) -> dict[tuple[str, str], dict]:
    schemas = {}
    for path in sorted(directory.glob("*.json")):
        schema = json.loads(path.read_text())
        props = schema["properties"]
        schemas[(props["apiVersion"]["const"], props["kind"]["const"])] = schema
    return schemas


def validate_crd(doc: dict, schema: dict, version: str) -> list[str]:
    # The CRD schemas borrow ObjectMeta and LabelSelector from the Kubernetes definitions.
    defs = kv.schema_contents(
        f"kubernetes-json-schema/v{resolve_version(version)}-local-strict/_definitions.json", version
    )
    registry = referencing.Registry().with_resources(
        [
            (DEFINITIONS_URI, referencing.Resource.from_contents(defs)),
            (schema["$id"], referencing.Resource.from_contents(schema)),
        ]
    )
    validator = jsonschema.Draft202012Validator(schema, registry=registry)
    return [
        f"{'.'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}"
        for e in sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
    ]


@functools.lru_cache(maxsize=None)
def resolve_version(version: str) -> str:
    """The bundled schema version used for a requested x.y (as kubernetes-validate picks it)."""
    want = kv.major_minor(version)
    if want not in {kv.major_minor(v) for v in kv.all_versions()}:
        raise SystemExit(f"kubernetes-validate {kv.__version__} has no schemas for Kubernetes {want}")
    return [v for v in kv.all_versions() if kv.major_minor(v) == want][-1]


def schema_errors(doc: dict, versions: list[str], crds: dict) -> list[str]:
    key = (doc.get("apiVersion"), doc.get("kind"))
    errors = []
    for version in versions:
        if key in crds:
            errors += [f"[{version}, CRD schema] {e}" for e in validate_crd(doc, crds[key], version)]
            continue
        try:
            kv.validate(doc, version, strict=True)
        except kv.ValidationError as e:
            path = ".".join(str(p) for p in e.path) or "(root)"
            errors.append(f"[{version}, strict] {path}: {e.message}")
        except kv.SchemaNotFoundError as e:
            errors.append(f"[{version}] no schema: {e.message}")
    return errors


# ---------------------------------------------------------------------------------------------
# Invariants


def pod_specs(docs):
    """(owner description, pod spec, pod labels, is_server) for every pod template."""
    for d in docs:
        kind = d["kind"]
        name = f"{kind}/{d['metadata']['name']}"
        if kind in ("StatefulSet", "Job"):
            t = d["spec"]["template"]
            yield name, t["spec"], t["metadata"].get("labels", {}), kind == "StatefulSet"
        elif kind == "Pod":
            yield name, d["spec"], d["metadata"].get("labels", {}), False


def matches(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


VAR_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def check_invariants(docs: list[dict], namespace: str) -> list[str]:
    errs: list[str] = []
    by_kind: dict[str, list[dict]] = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
        md = d["metadata"]
        where = f"{d['kind']}/{md.get('name')}"
        if md.get("namespace") != namespace:
            errs.append(f"{where}: namespace is {md.get('namespace')!r}, expected {namespace!r}")
        for k, v in (md.get("labels") or {}).items():
            if len(str(v)) > 63:
                errs.append(f"{where}: label {k} value longer than 63 characters")
        if d["kind"] in ("Service", "StatefulSet", "Pod") and len(md["name"]) > 63:
            errs.append(f"{where}: name longer than 63 characters")

    stss = by_kind.get("StatefulSet", [])
    if len(stss) != 1:
        return errs + [f"expected exactly one StatefulSet, found {len(stss)}"]
    sts = stss[0]
    spec = sts["spec"]
    sts_name = sts["metadata"]["name"]
    pod_labels = spec["template"]["metadata"]["labels"]
    selector = spec["selector"]["matchLabels"]
    if not matches(selector, pod_labels):
        errs.append("StatefulSet selector does not match its pod template labels")
    if spec.get("podManagementPolicy") != "Parallel":
        errs.append("StatefulSet podManagementPolicy must be Parallel (bootstrap waits for all initial members)")
    services = {s["metadata"]["name"]: s for s in by_kind.get("Service", [])}
    headless = services.get(spec["serviceName"])
    if headless is None:
        errs.append(f"StatefulSet serviceName {spec['serviceName']} is not rendered")
    else:
        if headless["spec"].get("clusterIP") != "None":
            errs.append("headless Service must have clusterIP: None")
        if headless["spec"].get("publishNotReadyAddresses") is not True:
            errs.append("headless Service must publish not-ready addresses (peers meet before they are ready)")
    container = next(c for c in spec["template"]["spec"]["containers"] if c["name"] == "engram")
    ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
    env = {e["name"]: e.get("value") for e in container.get("env", [])}

    # Services and PDBs select exactly the server pods, never the hook or test pods.
    others = [(n, l) for n, _, l, server in pod_specs(docs) if not server]
    for kind in ("Service", "PodDisruptionBudget"):
        for obj in by_kind.get(kind, []):
            sel = obj["spec"]["selector"]
            sel = sel.get("matchLabels", sel) if kind == "PodDisruptionBudget" else sel
            where = f"{kind}/{obj['metadata']['name']}"
            if not sel or not matches(sel, pod_labels):
                errs.append(f"{where}: selector does not match the server pods")
            for n, labels in others:
                if matches(sel, labels):
                    errs.append(f"{where}: selector also matches {n}")
            for p in obj["spec"].get("ports", []) if kind == "Service" else []:
                tp = p.get("targetPort")
                if isinstance(tp, str) and tp not in ports:
                    errs.append(f"{where}: targetPort {tp} is not a container port")

    # The peer list: ids 1..n at <sts>-<id-1>.<headless>.<ns>.svc.<domain>:<grpc>.
    peers = (env.get("ENGRAM_PEERS") or "").split(",")
    for i, peer in enumerate(peers):
        want = re.compile(
            rf"^{i + 1}={re.escape(sts_name)}-{i}\.{re.escape(spec['serviceName'])}\.{re.escape(namespace)}\.svc\.[a-z0-9.-]+:{ports.get('grpc')}$"
        )
        if not want.match(peer):
            errs.append(f"ENGRAM_PEERS entry {peer!r} is not {want.pattern}")
    adv = env.get("ENGRAM_ADVERTISE_ADDR") or ""
    if not adv.startswith(f"$(ENGRAM_POD_NAME).{spec['serviceName']}.{namespace}.svc."):
        errs.append(f"ENGRAM_ADVERTISE_ADDR {adv!r} is not the pod's headless DNS name")
    if "ENGRAM_NODE_ID" in env:
        errs.append("ENGRAM_NODE_ID must not be set: one pod template serves every ordinal")

    # Probes: native gRPC, on a declared port; with TLS on the plaintext health port.
    probes = {k: container.get(k) for k in ("startupProbe", "livenessProbe", "readinessProbe")}
    for k, p in probes.items():
        if not p or "grpc" not in p:
            errs.append(f"{k} must be a gRPC probe")
            continue
        if p["grpc"]["port"] not in ports.values():
            errs.append(f"{k} port {p['grpc']['port']} is not a container port")
    want_service = {"startupProbe": "engram.live", "livenessProbe": "engram.live", "readinessProbe": "engram.ready"}
    for k, svc in want_service.items():
        if probes.get(k) and probes[k].get("grpc", {}).get("service") != svc:
            errs.append(f"{k} must probe health service {svc}")
    tls = "ENGRAM_TLS_CERT" in env
    if tls:
        health = env.get("ENGRAM_HEALTH_LISTEN") or ""
        hport = int(health.rsplit(":", 1)[-1]) if ":" in health else None
        if hport is None or hport != ports.get("health"):
            errs.append("with TLS, ENGRAM_HEALTH_LISTEN must name the container's health port")
        for k, p in probes.items():
            if p and p.get("grpc", {}).get("port") != hport:
                errs.append(f"with TLS, {k} must use the plaintext health port {hport}")
    elif "ENGRAM_HEALTH_LISTEN" in env:
        errs.append("ENGRAM_HEALTH_LISTEN without TLS")
    for k in ("ENGRAM_TLS_CERT", "ENGRAM_TLS_KEY", "ENGRAM_TLS_CLIENT_CA"):
        if tls and not (env.get(k) or "").startswith("/tls/"):
            errs.append(f"with TLS, {k} must point into /tls")
    if "ENGRAM_METRICS_LISTEN" in env and "metrics" not in ports:
        errs.append("ENGRAM_METRICS_LISTEN without a metrics container port")

    # Volumes: persistent /data, writable /tmp, secrets read-only.
    claim_names = {c["metadata"]["name"] for c in spec.get("volumeClaimTemplates", [])}
    for owner, pspec, _, server in pod_specs(docs):
        volumes = {v["name"]: v for v in pspec.get("volumes", [])}
        for c in pspec["containers"] + pspec.get("initContainers", []):
            for m in c.get("volumeMounts", []):
                v = volumes.get(m["name"])
                if v is None and not (server and m["name"] in claim_names):
                    errs.append(f"{owner}: mount {m['name']} has no volume")
                if v and "secret" in v and not m.get("readOnly"):
                    errs.append(f"{owner}: secret volume {m['name']} must be mounted read-only")
    mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
    if mounts.get("/data") not in claim_names or env.get("ENGRAM_DATA_DIR") != "/data":
        errs.append("the data dir /data must be the volume claim")
    if "/tmp" not in mounts:
        errs.append("/tmp must be a writable volume (read-only root filesystem)")
    if env.get("ENGRAM_KEY_FILE"):
        if env["ENGRAM_KEY_FILE"] != "/keys/$(ENGRAM_POD_NAME).key" or "/keys" not in mounts:
            errs.append("ENGRAM_KEY_FILE must be /keys/$(ENGRAM_POD_NAME).key on the mounted keys Secret")
    secrets = {s["metadata"]["name"]: s for s in by_kind.get("Secret", [])}
    pod_volumes = {v["name"]: v for v in spec["template"]["spec"].get("volumes", [])}
    keys_vol = pod_volumes.get("keys", {}).get("secret", {}).get("secretName")
    if keys_vol in secrets:
        data = secrets[keys_vol].get("stringData", {})
        for i in range(spec["replicas"]):
            if f"{sts_name}-{i}.key" not in data:
                errs.append(f"keys Secret {keys_vol} lacks {sts_name}-{i}.key")
        for k, v in data.items():
            if not re.fullmatch(r"[0-9a-f]{64}", v):
                errs.append(f"keys Secret {keys_vol}: {k} is not 64 lowercase hex digits")
    for cert in by_kind.get("Certificate", []):
        tls_vol = pod_volumes.get("tls", {}).get("secret", {}).get("secretName")
        if cert["spec"]["secretName"] != tls_vol:
            errs.append("the Certificate's secretName is not the Secret the pods mount at /tls")
        names = cert["spec"].get("dnsNames", [])
        for want in (f"*.{spec['serviceName']}.{namespace}.svc.", f"{sts_name}.{namespace}.svc."):
            if not any(n.startswith(want) for n in names):
                errs.append(f"the Certificate does not cover {want}<clusterDomain>")
    for sm in by_kind.get("ServiceMonitor", []):
        sel = sm["spec"]["selector"]["matchLabels"]
        targets = [s for s in services.values() if matches(sel, s["metadata"].get("labels", {}))]
        if len(targets) != 1:
            errs.append(f"ServiceMonitor selects {len(targets)} Services, expected 1")
        for ep in sm["spec"]["endpoints"]:
            for t in targets:
                if ep["port"] not in {p["name"] for p in t["spec"]["ports"]}:
                    errs.append(f"ServiceMonitor port {ep['port']} is not a port of Service {t['metadata']['name']}")

    # Every pod: hardened security context, resources, no service links, no API token, and
    # $(VAR) references Kubernetes can expand (defined earlier in the same env list).
    for owner, pspec, _, _ in pod_specs(docs):
        psc = pspec.get("securityContext", {})
        if pspec.get("enableServiceLinks") is not False:
            errs.append(f"{owner}: enableServiceLinks must be false (ENGRAM_* service variables)")
        if pspec.get("automountServiceAccountToken") is not False:
            errs.append(f"{owner}: automountServiceAccountToken must be false")
        for c in pspec["containers"]:
            sc = c.get("securityContext", {})
            cw = f"{owner} container {c['name']}"
            checks = {
                "readOnlyRootFilesystem": sc.get("readOnlyRootFilesystem") is True,
                "allowPrivilegeEscalation=false": sc.get("allowPrivilegeEscalation") is False,
                "capabilities drop ALL": "ALL" in sc.get("capabilities", {}).get("drop", []),
                "runAsNonRoot": sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is True,
                "seccompProfile RuntimeDefault": sc.get("seccompProfile", psc.get("seccompProfile", {})).get("type") == "RuntimeDefault",
                "resources.requests": bool(c.get("resources", {}).get("requests")),
                "no shell": not (c.get("command") or [""])[0].endswith("sh"),
            }
            errs += [f"{cw}: {k}" for k, ok in checks.items() if not ok]
            if c.get("image") != container.get("image"):
                errs.append(f"{cw}: image {c.get('image')} differs from the server's")
            defined: set[str] = set()
            for e in c.get("env", []):
                for ref in VAR_REF.findall(e.get("value") or ""):
                    if ref not in defined:
                        errs.append(f"{cw}: env {e['name']} refers to $({ref}) before it is defined")
                defined.add(e["name"])
            for a in c.get("args", []):
                for ref in VAR_REF.findall(str(a)):
                    if ref not in defined:
                        errs.append(f"{cw}: args refer to undefined $({ref})")

    # The scale-down hook: shrinks to the StatefulSet's replicas before upgrades and rollbacks.
    for job in by_kind.get("Job", []):
        ann = job["metadata"].get("annotations", {})
        hooks = set(ann.get("helm.sh/hook", "").split(","))
        if not {"pre-upgrade", "pre-rollback"} <= hooks:
            errs.append(f"Job/{job['metadata']['name']}: must be a pre-upgrade,pre-rollback hook")
        args = job["spec"]["template"]["spec"]["containers"][0]["args"]
        if args[2:5] != ["cluster", "shrink", "--to"] or args[5] != str(spec["replicas"]):
            errs.append(f"Job/{job['metadata']['name']}: args {args} are not `cluster shrink --to {spec['replicas']}`")
    tests = [p for p in by_kind.get("Pod", []) if p["metadata"].get("annotations", {}).get("helm.sh/hook") == "test"]
    for t in tests:
        if t["spec"]["containers"][0]["args"][2:4] != ["audit", "verify"]:
            errs.append(f"Pod/{t['metadata']['name']}: the test must run `audit verify`")
    return errs


def validate_docs(docs: list[dict], versions: list[str], crds: dict, namespace: str, report=None) -> list[str]:
    """Every error of a rendered release: schema errors per document, then invariants."""
    errors = []
    for d in docs:
        where = f"{d.get('kind')}/{d.get('metadata', {}).get('name')}"
        how = "CRD schema" if (d.get("apiVersion"), d.get("kind")) in crds else "kubernetes-validate --strict"
        errs = schema_errors(d, versions, crds)
        errors += [f"{where}: {e}" for e in errs]
        if report:
            report(f"{'ok  ' if not errs else 'FAIL'} {where} ({how}, k8s {' '.join(versions)})")
    inv = check_invariants(docs, namespace)
    if report:
        report(f"{'ok  ' if not inv else 'FAIL'} invariants ({len(docs)} documents)")
    return errors + [f"invariant: {e}" for e in inv]


def load_docs(path: pathlib.Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kube-version", action="append", required=True)
    ap.add_argument("--crd-schemas", type=pathlib.Path, required=True)
    ap.add_argument("--namespace", default="default")
    ap.add_argument("files", nargs="+", type=pathlib.Path)
    args = ap.parse_args()
    for v in args.kube_version:
        resolve_version(v)
    crds = load_crd_schemas(args.crd_schemas)
    failed = 0
    for path in args.files:
        errors = validate_docs(load_docs(path), args.kube_version, crds, args.namespace, report=lambda m: print(f"  {m}"))
        for e in errors:
            print(f"    ERROR {path.name}: {e}")
        failed += bool(errors)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
