#!/usr/bin/env python3
"""boundary_check: does an emulated building boundary carry what its cluster file says?

Reads `sax bench coll --json` files of cross-building send_recv (one run with --groups-at-once 1,
one with all groups at once) and sets each beside the link it was run on:

  latency  the median of the median times of the sizes up to 1 KiB (messages of a few bytes: the
           one-way latency, plus the host's own time per message)
  rate     the least-squares slope of median time over the sizes of 1 MiB and more (bytes per
           second once the latency is paid: what the link gives one device)

One group alone should get the per-device rate, min(cross-building bandwidth, NIC, and on a lossy
link what TCP sustains there: spec/cluster.hpp's achievable_bandwidth_gbps, Mathis et al.); every
group at once the uplink's share, devices x rate / oversubscription over the devices that cross it. With
--floor (a bench coll file of send_recv between ranks of one node, on the same cluster), the
latency is also given less the host's own time per message there (the same median, less what the
node's own link takes where a paced device's node link is emulated): what the link itself adds, to
set beside the link's latency.

    python3 scripts/boundary_check.py --cluster C [--technology T] [--op OP] [--floor intra.json] alone.json [together.json]

--op broadcast (two ranks: one flow one way) measures one TCP flow where send_recv has two.
"""
import argparse
import json
import statistics
import sys


def fail(msg):
    print(f"boundary_check: {msg}", file=sys.stderr)
    sys.exit(2)


def load(path, what):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{path}: expected {what} ({e})")


def cross_link(cluster, technology):
    link = dict(cluster["links"]["cross_building"])
    if technology:
        for t in cluster.get("network_technologies", []):
            if t["name"] == technology:
                link = dict(t["cross_building"])
                break
        else:
            fail(f"technology '{technology}' is not among the cluster's network_technologies")
    return link


MSS_BYTES = 1448  # spec/cluster.hpp kTcpMssBytes


def achievable_gbps(link):
    """spec/cluster.hpp's achievable_bandwidth_gbps(): the link's bandwidth, no more than Mathis'
    MSS / RTT x sqrt(3 / (2 p)) per TCP stream on a lossy link."""
    loss, rtt_s = link.get("loss", 0.0), (2 * link["latency_us"] + link.get("jitter_us", 0.0)) * 1e-6
    if not loss > 0 or not rtt_s > 0:
        return link["bandwidth_gbps"]
    flow = MSS_BYTES / rtt_s * (1.5 / loss) ** 0.5 * 1e-9
    return min(link["bandwidth_gbps"], flow * max(1, link.get("tcp_streams", 1)))


def pair_latency_us(cluster, link, a, b):
    """The one-way latency between buildings a and b: a building_links entry's where one names both
    (spec/cluster.cpp's cross_link), else the link's."""
    names = [x["name"] for x in cluster["buildings"]]
    for bl in cluster.get("building_links", []):
        if {names[a], names[b]} <= set(bl["buildings"]):
            return bl["latency_us"]
    return link["latency_us"]


def ring_latency_us(cluster, link, groups):
    """What send_recv's latency is over the groups: each rank receives from the rank before it in
    its group (a ring), and the time is the mean over ranks."""
    devices = building_devices(cluster)
    building = [b for b, n in enumerate(devices) for _ in range(n)]
    lat = [pair_latency_us(cluster, link, building[g[i - 1]], building[g[i]]) for g in groups for i in range(len(g))]
    return statistics.fmean(lat) if lat else link["latency_us"]


def node_link_us(cluster):
    """What the node's own link takes for a message of n bytes: a paced CPU device's node link is
    paced at the cluster's intra_node link (harness/job.cpp), so that much of a message inside a node
    is the emulated link, not the host; unpaced, none of it is."""
    device, intra = cluster.get("device", {}), cluster["links"].get("intra_node", {})
    if device.get("emulation") != "paced" or cluster.get("backend", "cpu") != "cpu" or not intra:
        return lambda n: 0.0
    return lambda n: intra["latency_us"] + n / (intra["bandwidth_gbps"] * 1e3)


def building_devices(cluster):
    per_node = cluster["devices_per_node"]
    return [b["nodes"] * b.get("devices_per_node", per_node) for b in cluster["buildings"]]


def measured(doc, path, op):
    rows = [r for r in doc.get("results", []) if r.get("op") == op]
    if len(rows) < 2:
        fail(f"{path}: /results: expected {op} at two sizes or more")
    rows.sort(key=lambda r: r["bytes"])
    small = [r for r in rows if r["bytes"] <= 1024] or rows[:1]
    latency_us = statistics.median(r.get("p50_us") or r["time_us"] for r in small)
    big = [r for r in rows if r["bytes"] >= 1 << 20]
    if len(big) < 2:
        fail(f"{path}: /results: expected {op} at two sizes of 1 MiB or more")
    xs = [r["bytes"] for r in big]
    ys = [(r.get("p50_us") or r["time_us"]) * 1e-6 for r in big]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return rows[0]["bytes"], latency_us, 1e-9 / slope, [r["bytes"] for r in big]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--technology", default="")
    ap.add_argument("--floor", default="", help="bench coll --json of send_recv inside one node")
    ap.add_argument("--op", default="send_recv", help="the op of the files to read (send_recv, broadcast)")
    ap.add_argument("alone", help="bench coll --json with --groups-at-once 1")
    ap.add_argument("together", nargs="?", default="", help="bench coll --json with every group at once")
    a = ap.parse_args()
    cluster = load(a.cluster, "a cluster file")
    link = cross_link(cluster, a.technology)
    nic = cluster["links"].get("intra_building", {}).get("bandwidth_gbps", link["bandwidth_gbps"])
    device_gbps = min(achievable_gbps(link), nic)
    oversub = link.get("oversubscription", 1.0)
    devices = building_devices(cluster)
    floor_us = 0.0
    if a.floor:
        rows = sorted((r for r in load(a.floor, "a sax bench coll --json file").get("results", [])
                       if r.get("op") == "send_recv"), key=lambda r: r["bytes"])
        if not rows:
            fail(f"{a.floor}: /results: expected send_recv results")
        small = [r for r in rows if r["bytes"] <= 1024] or rows[:1]
        node = node_link_us(cluster)
        floor_us = statistics.median((r.get("p50_us") or r["time_us"]) - node(r["bytes"]) for r in small)
    print(f"# {cluster.get('name', a.cluster)}{', technology ' + a.technology if a.technology else ''}: "
          f"cross-building {link['bandwidth_gbps']} GB/s per device, {link['latency_us']} us one way, "
          f"oversubscription {oversub}, loss {link.get('loss', 0)}; NIC {nic} GB/s; a device gets {device_gbps:.4g} GB/s")
    if a.floor:
        print(f"# the host's own time per message (send_recv inside a node, sizes up to 1 KiB, less the "
              f"node link's own time): {floor_us:.1f} us")
    print(f"#{'run':<10} {'groups':>7} {'latency_us':>11} {'link_us':>8} {'want_us':>8} {'err':>7} {'rate_GBps':>10} "
          f"{'want_GBps':>10} {'err':>7}  sizes")
    worst = 0.0
    for path, label in ((a.alone, "alone"), (a.together, "together")):
        if not path:
            continue
        doc = load(path, "a sax bench coll --json file")
        env = doc.get("env", {})
        groups = env.get("groups") or []
        at_once = doc.get("config", {}).get("groups_at_once", 0) or len(groups)
        # Devices crossing each building's uplink at once: one per rank of the groups running.
        crossing = max(1, min(devices) * at_once // max(1, len(groups))) if groups else 1
        uplink = min(devices) * link["bandwidth_gbps"] / oversub
        want = min(device_gbps, uplink / crossing)
        size, lat, rate, sizes = measured(doc, path, a.op)
        rate_err = rate / want - 1
        worst = max(worst, abs(rate_err))
        want_us = ring_latency_us(cluster, link, groups[:at_once] if groups else [])
        if size <= 1024:  # messages small enough to be latency
            lat_err = (lat - floor_us) / want_us - 1
            worst = max(worst, abs(lat_err))
            latency = f"{lat:>11.1f} {lat - floor_us:>8.1f} {want_us:>8.0f} {lat_err:>+7.1%}"
        else:
            latency = f"{'-':>11} {'-':>8} {want_us:>8.0f} {'-':>7}"
        print(f" {label:<10} {at_once:>3}/{len(groups):<3} {latency} "
              f"{rate:>10.4f} {want:>10.4f} {rate_err:>+7.1%}  {size} B; {sizes[0]}..{sizes[-1]} B")
    print(f"# worst |error| {worst:.1%} ({'within' if worst <= 0.10 else 'beyond'} 10 %)")


if __name__ == "__main__":
    main()
