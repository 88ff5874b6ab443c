#!/usr/bin/env python3
"""Measures the emulated building boundary back.

For each emulation and network technology of a cluster, runs `sax bench coll --op send_recv`
through `sax launch` on the pipeline groups (every pair crosses the boundary) and inside the
buildings, and prints the small-message latency (8-byte send_recv, one pair at a time: one way, as
a pair exchanges at once) and the large-message bandwidth (bytes / time, every pair at once)
against the configured values; times are bench coll's (mean over iterations and ranks). `none` (shared memory) and netns with the boundary unshaped run the same as the host's own
ceiling. With a technology whose
oversubscription is above 1, also runs one pipeline group alone and both at once
(--groups-at-once), which the cost model's sharing rule says get the full per-device rate and
half of it.

  scripts/measure_boundary.py [--sax build/sax] [--cluster configs/clusters/local-2bld.json]
      [--emulations none,netns,software] [--technologies gbe-1,gbe-5] [--shared gbe-1-shared]
      [--json FILE]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def bench(args, emulation, technology, group, sizes, iters, at_once=0):
    with tempfile.TemporaryDirectory(prefix="sax-measure-") as d:
        out = os.path.join(d, "r.json")
        cmd = [args.sax, "launch", "--cluster", args.cluster, "--emulate", emulation]
        if technology:
            cmd += ["--technology", technology]
        cmd += ["--", "bench", "coll", "--cluster", args.cluster, "--layout", args.layout, "--group", group,
                "--op", "send_recv", "-n", str(iters), "-w", "3", "--json", out]
        if at_once:
            cmd += ["--groups-at-once", str(at_once)]
        rows = []
        for size in sizes:
            r = subprocess.run(cmd + ["-b", str(size), "-e", str(size)], capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"measure_boundary: {' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()[-400:]}")
            rows += json.load(open(out))["results"]
        return rows


def mean(row):
    # bench coll's time: mean over iterations and over the ranks that ran (nccl-tests' figure)
    return row["time_us"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--sax", default=os.path.join(ROOT, "build", "sax"))
    ap.add_argument("--cluster", default=os.path.join(ROOT, "configs", "clusters", "local-2bld.json"))
    ap.add_argument("--layout", default=os.path.join(ROOT, "configs", "layouts", "local-tp2-pp2.json"))
    ap.add_argument("--emulations", default="none,netns,software")
    ap.add_argument("--technologies", default="gbe-1,gbe-5")
    ap.add_argument("--shared", default="gbe-1-shared", help="a technology with oversubscription > 1 ('' to skip)")
    ap.add_argument("--large", type=int, default=32 << 20, help="bytes of the bandwidth message")
    ap.add_argument("--json")
    args = ap.parse_args()
    cluster = json.load(open(args.cluster))
    techs = {t["name"]: t["cross_building"] for t in cluster.get("network_technologies", [])}
    # The host's own ceiling over the same path: netns with the boundary left unshaped (no delay,
    # a rate far above what the host moves), next to `none` (shared memory, no namespaces).
    tmp = tempfile.NamedTemporaryFile("w", prefix="sax-measure-", suffix=".json", delete=False)
    cluster.setdefault("network_technologies", []).append(
        {"name": "unshaped", "description": "the boundary left unshaped (measure_boundary.py's baseline)",
         "cross_building": {"bandwidth_gbps": 1000, "latency_us": 0}})
    json.dump(cluster, tmp)
    tmp.close()
    args.cluster = tmp.name
    techs["unshaped"] = None
    results = []
    runs = [(e, t) for e in args.emulations.split(",") for t in args.technologies.split(",") if e != "none"]
    if "netns" in args.emulations.split(","):
        runs.insert(0, ("netns", "unshaped"))
    if "none" in args.emulations.split(","):
        runs.insert(0, ("none", ""))
    started = time.time()
    print(f"{'emulation':9} {'technology':12} {'group':15} {'latency_us':>10} {'want_us':>8} {'err%':>6} "
          f"{'bw_GBps':>8} {'want':>7} {'err%':>6}")
    for k, (emulation, tech) in enumerate(runs):
        link = techs.get(tech)
        for group in ("pp", "intra_building"):
            # Latency on one pair at a time (as osu_latency), the other pair waiting without polling;
            # bandwidth with every pair at once (each at the per-device rate the boundary allows).
            small = bench(args, emulation, tech, group, [8], 300, at_once=1)[0]
            large = bench(args, emulation, tech, group, [args.large], 8)[0]
            lat, bw = mean(small), args.large / mean(large) / 1e3
            shaped = group == "pp" and emulation != "none" and link is not None
            want_lat = link["latency_us"] if shaped else None
            want_bw = link["bandwidth_gbps"] if shaped else None
            results.append({"emulation": emulation, "technology": tech, "group": group, "latency_us": lat,
                            "bandwidth_gbps": bw, "configured_latency_us": want_lat,
                            "configured_bandwidth_gbps": want_bw})
            fmt = lambda v, w: f"{v:>{w}.1f}" if v is not None else f"{'-':>{w}}"
            err = lambda m, w: f"{100 * (m / w - 1):+6.1f}" if w else f"{'-':>6}"
            print(f"{emulation:9} {tech or '-':12} {group:15} {lat:10.1f} {fmt(want_lat, 8)} {err(lat, want_lat)} "
                  f"{bw:8.4f} {(f'{want_bw:7.4f}' if want_bw else '      -')} {err(bw, want_bw)}", flush=True)
        left = (time.time() - started) / (k + 1) * (len(runs) - k - 1)
        print(f"# {k + 1}/{len(runs)} done, about {left:.0f} s left", file=sys.stderr, flush=True)
    if args.shared:
        link = techs[args.shared]
        per_device = link["bandwidth_gbps"]
        for emulation in [e for e in args.emulations.split(",") if e != "none"]:
            for at_once in (1, 2):
                row = bench(args, emulation, args.shared, "pp", [args.large], 8, at_once)[0]
                bw = args.large / mean(row) / 1e3
                want = per_device if at_once == 1 else per_device / link.get("oversubscription", 1)
                results.append({"emulation": emulation, "technology": args.shared, "group": "pp",
                                "groups_at_once": at_once, "bandwidth_gbps": bw, "configured_bandwidth_gbps": want})
                print(f"{emulation:9} {args.shared:12} pp x{at_once} at once {'':>26} {bw:8.4f} {want:7.4f} "
                      f"{100 * (bw / want - 1):+6.1f}", flush=True)
    os.unlink(tmp.name)
    if args.json:
        json.dump({"cluster": args.cluster, "results": results}, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
