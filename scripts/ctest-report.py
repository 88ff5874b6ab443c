#!/usr/bin/env python3
"""Where a test run's time went: the slowest CTest entries of a JUnit file (ctest --output-junit),
and, given the folder the entries' GTEST_OUTPUT files are in (build/gtest-xml), how many GoogleTest
cases ran.

Usage: ctest-report.py JUNIT [N] [GTEST_XML_DIR]   (N, default 20: how many entries to list)
"""
import glob
import os
import sys
import xml.etree.ElementTree as ET


def slowest(junit, n):
    try:
        cases = ET.parse(junit).getroot().iter("testcase")
    except (OSError, ET.ParseError) as e:
        sys.exit(f"ctest-report: {junit}: {e}")
    rows = sorted(((float(c.get("time", 0)), c.get("name", "?"), c.get("status", "?")) for c in cases), reverse=True)
    total = sum(t for t, _, _ in rows)
    print(f"the {min(n, len(rows))} slowest of {len(rows)} entries ({total:.0f} s in all, one after another):")
    for t, name, status in rows[:n]:
        print(f"  {t:8.2f} s  {name}" + ("" if status == "run" else f"  [{status}]"))


def gtest_cases(folder):
    """Cases run (a file each CTest entry wrote: DIR/<executable>/<suite>.xml), and how many distinct."""
    runs, skipped, distinct = 0, 0, set()
    for path in glob.glob(os.path.join(folder, "**", "*.xml"), recursive=True):
        exe = os.path.basename(os.path.dirname(path))
        try:
            root = ET.parse(path).getroot()
        except ET.ParseError:
            continue
        for c in root.iter("testcase"):
            if c.get("status") != "run":
                continue  # a listing, or a disabled case
            runs += 1
            skipped += c.get("result") == "skipped"
            distinct.add((exe, c.get("classname"), c.get("name")))
    print(f"GoogleTest cases run: {runs} ({len(distinct)} distinct, {skipped} skipped)")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    slowest(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 20)
    if len(sys.argv) > 3:
        gtest_cases(sys.argv[3])
