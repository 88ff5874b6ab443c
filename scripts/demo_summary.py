#!/usr/bin/env python3
"""The demo's figures over several runs: each validation's summary (not-compute MAPE, step MAPE,
Kendall tau, top-1 regret, the worst layout's error) run by run, then the range over the runs.
What the README and docs/demo.md quote comes from this table, so anyone can repeat it:

    ./scripts/demo.sh out/demo-1; ./scripts/demo.sh out/demo-2
    scripts/demo_summary.py out/demo-1 out/demo-2 [--markdown]

Each DIR is a demo report folder (validate-*.json). A missing or malformed file is one line on
stderr and exit 2.
"""
import argparse
import json
import os
import sys

VALIDATIONS = (("local-2bld", "gpt-tiny", "validate-gpt-tiny.json"),
               ("local-2bld", "moe-tiny", "validate-moe-tiny.json"),
               ("local-4bld", "gpt-tiny", "validate-local4-gpt-tiny.json"))
FIGURES = (("not compute MAPE %", lambda s, v: s.get("non_compute_mape_pct")),
           ("step MAPE %", lambda s, v: s.get("mape_pct")),
           ("worst layout %", lambda s, v: worst_error(v)),
           ("Kendall tau", lambda s, v: s.get("kendall_tau")),
           ("top-1 regret %", lambda s, v: s.get("top1_regret_pct")))


def worst_error(v):
    errors = [l["error_pct"] for l in v.get("layouts", []) if isinstance(l.get("error_pct"), (int, float))]
    return max(errors, key=abs) if errors else None


def load(path):
    try:
        with open(path) as f:
            v = json.load(f)
        v["summary"]["layouts"]
        return v
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(print(f"demo_summary: {path}: expected a sax validate --json result ({e})", file=sys.stderr) or 2)


def fmt(x, signed=False):
    return "n/a" if x is None else (f"{x:+.1f}" if signed else f"{x:.2f}" if abs(x) < 1.5 else f"{x:.1f}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dirs", nargs="+", help="demo report folders")
    p.add_argument("--markdown", action="store_true", help="a Markdown table")
    a = p.parse_args()
    rows = []
    for cluster, model, name in VALIDATIONS:
        runs = [load(os.path.join(d, name)) for d in a.dirs]
        layouts = sorted({r["summary"]["layouts"] for r in runs})
        for label, get in FIGURES:
            values = [get(r["summary"], r) for r in runs]
            known = [x for x in values if x is not None]
            signed = label == "worst layout %"
            spread = (f"{fmt(min(known), signed)} to {fmt(max(known), signed)}" if len(known) > 1 else
                      fmt(known[0], signed) if known else "n/a")
            rows.append((f"{cluster} {model} ({'/'.join(map(str, layouts))} layouts)", label,
                         [fmt(x, signed) for x in values], spread))
    head = ["validation", "figure"] + [f"run {i + 1}" for i in range(len(a.dirs))] + [f"over {len(a.dirs)} runs"]
    if a.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for what, label, values, spread in rows:
            print("| " + " | ".join([what, label] + values + [spread]) + " |")
    else:
        for what, label, values, spread in rows:
            print(f"{what:34s} {label:20s} " + " ".join(f"{v:>7s}" for v in values) + f"   {spread}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
