#!/usr/bin/env python3
"""The include graph against the arrows docs/ARCHITECTURE.md allows.

Every `#include "folder/..."` of a source under one of sax's folders must name its own folder or
one the folder may use (ALLOWED); a folder's `internal/` headers are its own (only it, and the
folders that may use anything, include them); CUDA-family and MPI headers only where the map lets
a transport or a device be known. Prints every wrong-way include as FILE:LINE and exits 1.

    tests/docs/check_include_graph.py [ROOT]      the tree at ROOT (default: this checkout)
    tests/docs/check_include_graph.py --self-test  a made tree with one wrong-way include fails
"""
import os
import re
import subprocess
import sys
import tempfile

# folder -> the folders it may include (its own always). Arrows point down only.
ALLOWED = {
    "spec": set(),
    "workload": {"spec"},
    "kernels": {"spec"},
    "collectives": {"spec"},
    "profiles": {"spec"},
    "harness": {"spec", "workload", "kernels", "collectives", "profiles"},
    "launcher": {"spec"},
    "calibration": {"spec", "workload", "harness", "explorer"},  # explorer: fitting runs needs the cost model
    "explorer": {"spec", "workload"},
    "validation": {"spec", "workload", "explorer", "launcher", "harness"},
    "cli": None,  # on top: anything
    "bench": None,
    "tests": None,
}
# System headers that tie code to a device or a transport, and the paths that may include them.
SYSTEM = [
    (re.compile(r"^(cuda|cublas|cupti|nccl|nvtx|nvToolsExt|cub/|curand)"),
     ("kernels/cuda/", "collectives/nccl/", "profiles/cupti/", "spec/checks/", "bench/", "tests/")),
    (re.compile(r"^mpi\.h$"), ("collectives/", "harness/", "spec/checks/", "bench/", "tests/")),
]
SOURCE = re.compile(r"\.(c|cc|cpp|cu|h|hpp|cuh)$")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]')


def sources(root):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True, check=True).stdout
        files = out.split()
    except (OSError, subprocess.CalledProcessError):
        files = [os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs]
    return sorted(f for f in files if SOURCE.search(f) and f.split("/")[0] in ALLOWED)


def violations(root):
    found = []
    for rel in sources(root):
        folder = rel.split("/")[0]
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                kind, target = m.groups()
                if kind == "<":
                    for pattern, where in SYSTEM:
                        if pattern.match(target) and not rel.startswith(where):
                            found.append(f"{rel}:{n}: <{target}> outside {', '.join(where)}")
                    continue
                used = target.split("/")[0]
                if "/" not in target or used not in ALLOWED or used == folder or ALLOWED[folder] is None:
                    continue
                if used not in ALLOWED[folder]:
                    found.append(f"{rel}:{n}: {folder}/ includes {target} (may use: "
                                 f"{', '.join(sorted(ALLOWED[folder])) or 'nothing of ours'})")
                elif "/internal/" in target:
                    found.append(f"{rel}:{n}: {folder}/ includes {target}, a header internal to {used}/")
    return found


def self_test():
    with tempfile.TemporaryDirectory() as root:
        for rel, text in {"spec/a.hpp": '#include "spec/b.hpp"\n', "spec/b.hpp": "\n",
                          "explorer/c.cpp": '#include "spec/a.hpp"\n'}.items():
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w") as f:
                f.write(text)
        if violations(root):
            return "a tree whose arrows point down was refused"
        with open(os.path.join(root, "spec/b.hpp"), "w") as f:
            f.write('#include "explorer/c.hpp"\n#include <cuda_runtime.h>\n')
        os.makedirs(os.path.join(root, "spec/internal"))
        with open(os.path.join(root, "explorer/d.cpp"), "w") as f:
            f.write('#include "spec/internal/e.hpp"\n')
        got = violations(root)
        if (len(got) != 3 or not got[0].startswith("explorer/d.cpp:1:") or "internal to spec/" not in got[0]
                or not got[1].startswith("spec/b.hpp:1:") or "cuda_runtime" not in got[2]):
            return f"a wrong-way include was not caught: {got}"
    return None


def main():
    if sys.argv[1:] == ["--self-test"]:
        err = self_test()
        print(err or "self-test: a wrong-way include, another folder's internal header and a misplaced CUDA header "
              "are caught")
        return 1 if err else 0
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    found = violations(root)
    for v in found:
        print(v)
    print(f"{len(sources(root))} sources read, {len(found)} include(s) against the allowed arrows")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
