#!/usr/bin/env python3
"""Compares two `sax explore --json` (or `predict --json`) results, ignoring search_seconds and
provenance (when and where each ran): the same candidates in the same order, every string and
integer equal, and floats equal or within a relative tolerance (a refactor that only reorders a
sum changes the last bit). Exit 1 otherwise.

    scripts/compare_explore.py before.json after.json [--rtol 1e-12]
"""
import argparse
import json
import sys


def walk(a, b, path, out):
    if isinstance(a, dict) and isinstance(b, dict):
        ignored = {"search_seconds", "provenance"}  # a result written before provenance has none
        if set(a) - ignored != set(b) - ignored:
            out["mismatch"].append(f"{path}: keys {sorted((set(a) ^ set(b)) - ignored)}")
            return
        for k in a:
            if k not in ignored and k in b:
                walk(a[k], b[k], f"{path}/{k}", out)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out["mismatch"].append(f"{path}: {len(a)} against {len(b)} entries")
            return
        for i, (x, y) in enumerate(zip(a, b)):
            walk(x, y, f"{path}/{i}", out)
    elif isinstance(a, float) or isinstance(b, float):
        out["floats"] += 1
        if a != b:
            out["inexact"] += 1
            rel = abs(a - b) / abs(a) if a else abs(b)
            if rel > out["max_rel"][0]:
                out["max_rel"] = (rel, path)
    elif a != b:
        out["mismatch"].append(f"{path}: {a!r} against {b!r}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("before")
    p.add_argument("after")
    p.add_argument("--rtol", type=float, default=1e-12)
    args = p.parse_args()
    with open(args.before) as f:
        a = json.load(f)
    with open(args.after) as f:
        b = json.load(f)
    out = {"mismatch": [], "floats": 0, "inexact": 0, "max_rel": (0.0, "")}
    walk(a, b, "", out)
    rel, where = out["max_rel"]
    n = len(a.get("candidates", [])) if isinstance(a, dict) else 0
    print(f"{args.after}: {n} candidates; {len(out['mismatch'])} layouts/strings/integers differ; "
          f"{out['floats']} floats, {out['inexact']} not bit-identical, max relative difference {rel:.1e}"
          + (f" at {where}" if where else ""))
    for m in out["mismatch"][:10]:
        print("  " + m)
    sys.exit(1 if out["mismatch"] or rel > args.rtol else 0)


if __name__ == "__main__":
    main()
