#!/usr/bin/env python3
"""Optional cross-check with Helm 4 (check.sh --helm4).

Renders every ci values file with the Helm v4 Go SDK (PyPI helm-python-sdk: Helm's own engine
in a shared library, driven through ctypes, no cluster) and requires the same documents and the
same NOTES as the Helm 3 CLI render; lints with the v4 linter (strict); and requires every bad
values file to be refused by Helm 4 as well (its schema validator words errors differently, so
only the refusal is checked here; the reasons are checked against Helm 3 by check.sh).

Usage: helm4_crosscheck.py --chart DIR --rendered DIR --notes DIR --bad-values DIR CI_FILE...
"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys

import yaml
import helm_python as helm

RELEASE, NAMESPACE = "engram", "default"


def docs_of(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]


def key(d: dict) -> tuple:
    return (d["kind"], d["metadata"]["name"])


def merged(base: dict, over: dict) -> dict:
    """`over` on top of `base`, maps merged key by key (as helm merges -f files)."""
    out = dict(base)
    for k, v in over.items():
        out[k] = merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chart", type=pathlib.Path, required=True)
    ap.add_argument("--rendered", type=pathlib.Path, required=True)
    ap.add_argument("--notes", type=pathlib.Path, required=True)
    ap.add_argument("--bad-values", type=pathlib.Path, required=True)
    ap.add_argument("--kube-version", required=True)
    ap.add_argument("ci", nargs="+", type=pathlib.Path)
    args = ap.parse_args()
    print(f"  Helm SDK {helm.helm_sdk_version()} (libhelm_c {helm.helm_c_version()})")
    chart = helm.Chart.load(str(args.chart))
    failed = 0

    def report(ok: bool, msg: str) -> None:
        nonlocal failed
        failed += not ok
        print(f"  {'ok  ' if ok else 'FAIL'} helm4: {msg}")

    for path in args.ci:
        name = path.stem
        text = path.read_text()
        values = yaml.safe_load(text) or {}
        upgrade = bool(re.search(r"^# helm-args:.*--is-upgrade", text, re.M))
        try:
            out = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=not upgrade, is_upgrade=upgrade)
        except helm.HelmError as e:
            report(False, f"{name}: render failed: {e}")
            continue
        notes = out.pop(f"{args.chart.name}/templates/NOTES.txt", "")
        mine = sorted((d for t in out.values() for d in docs_of(t)), key=key)
        helm3 = sorted(docs_of((args.rendered / f"{name}.yaml").read_text()), key=key)
        if mine == helm3:
            report(True, f"{name}: same {len(mine)} documents as Helm 3")
        else:
            only4 = sorted(set(map(key, mine)) - set(map(key, helm3)))
            only3 = sorted(set(map(key, helm3)) - set(map(key, mine)))
            differ = [key(a) for a, b in zip(mine, helm3) if key(a) == key(b) and a != b]
            report(False, f"{name}: renders differ (only Helm 4: {only4}, only Helm 3: {only3}, different: {differ})")
        helm3_notes = (args.notes / f"{name}.txt").read_text()
        report(notes == helm3_notes, f"{name}: NOTES.txt {'identical' if notes == helm3_notes else 'differs'}")
        lint = helm.lint(str(args.chart), values, strict=True, namespace=NAMESPACE, kube_version=f"v{args.kube_version}.0")
        problems = [m for m in lint.get("messages", []) if m["severity"] >= 2] + lint.get("errors", [])
        report(not problems, f"{name}: lint --strict{'' if not problems else ': ' + str(problems)}")

    # As check.sh does: each bad-values file over the base, so it is refused for its own reason.
    base = yaml.safe_load((args.bad_values.parent / "bad-values-base.yaml").read_text()) or {}
    for path in sorted(args.bad_values.glob("*.yaml")):
        text = path.read_text()
        values = yaml.safe_load(text) or {}
        if "\n# no-base-values" not in "\n" + text:
            values = merged(base, values)
        try:
            chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
            report(False, f"bad values {path.stem}: rendered without error")
        except helm.HelmError as e:
            first = " ".join(str(e).split())[:140]
            report(True, f"bad values {path.stem}: refused: {first}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
