#!/usr/bin/env python3
"""What clang-tidy reads, whatever the build's unity setting (tests/lint/clang_tidy.sh).

plan SRC BUILD OUT TIDY: writes OUT/compile_commands.json and OUT/units (one file to run clang-tidy
on per line). A unity batch of the build is linted as it is compiled (one parse for its files);
a source the build does not compile here (the other twin of a backend, say) is linted with the
flags of a file of its own folder; a header no linted file includes, on its own with those flags.
The tests' precompiled header (GCC's, which clang cannot read) is made again with the clang of
TIDY's version, when there is one, and given to the test files (it halves their parse); the
other files get one of the standard headers and nlohmann_json that most of them include (a fifth
off their parse).

A CUDA file is read as the clang of TIDY's version compiles CUDA, with nvcc's includes and macros.

count SRC OUT: from the logs of the runs (OUT/logs/*.log, clang-tidy's -H listing), which files of
the tree were read; prints the count and every file that was not; exit 1 when one is missing.
"""
import collections
import fnmatch
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

SOURCES = ("*.cpp", "*.hpp", "*.cu", "*.h", "*.cuh")
PRELUDE = ("algorithm", "array", "cmath", "cstdint", "functional", "map", "memory", "mutex", "optional", "set",
           "string", "string_view", "thread", "vector", "nlohmann/json.hpp")
EXCLUDE = "tests/lint/tidy_exclude.txt"


def tree(src):
    """The sources the tree holds (git's list where it is a checkout), relative to src."""
    try:
        out = subprocess.run(["git", "-C", src, "ls-files", "--cached", "--others", "--exclude-standard", *SOURCES],
                             capture_output=True, text=True, check=True).stdout
        return sorted(set(out.split()))
    except (OSError, subprocess.CalledProcessError):
        found = []
        for root, dirs, files in os.walk(src):
            dirs[:] = [d for d in dirs if not d.startswith((".", "build"))]
            for f in files:
                if any(fnmatch.fnmatch(f, p) for p in SOURCES):
                    found.append(os.path.relpath(os.path.join(root, f), src))
        return sorted(found)


def exclusions(src):
    """(glob, reason) pairs: the files clang-tidy does not read, and why."""
    pairs = []
    with open(os.path.join(src, EXCLUDE)) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            glob, _, why = line.partition("#")
            pairs.append((glob.strip(), why.strip()))
    return pairs


def excluded(rel, pairs):
    return any(fnmatch.fnmatch(rel, g) for g, _ in pairs)


def clean(args, pch):
    """A build command as clang-tidy can parse it: GCC's precompiled header is not clang's, so it
    is replaced by pch (clang's, of the same header) or left out (the files include it anyway).
    -Werror (SAX_WERROR) is the compiler's gate, left out here: clang-tidy's own findings fail the
    lint, while clang's warnings on the standard library's headers (libstdc++ 12's deprecated
    get_temporary_buffer, seen by clang 22) would otherwise fail it too."""
    out, i = [], 0
    while i < len(args):
        if args[i] == "-include" and i + 1 < len(args) and "cmake_pch" in args[i + 1]:
            if pch:
                out += ["-include-pch", pch]
            i += 2
            continue
        if args[i] not in ("-Winvalid-pch", "-Werror"):
            out.append(args[i])
        i += 1
    return out


def gcc_pch(args):
    """The header of GCC's precompiled header a build command includes, or None."""
    for a, b in zip(args, args[1:]):
        if a == "-include" and "cmake_pch" in b:
            return b
    return None


def clang_for(tidy):
    """The clang++ of clang-tidy's own version (a precompiled header is read by that version only)."""
    def major(cmd):
        try:
            out = subprocess.run([cmd, "--version"], capture_output=True, text=True).stdout
        except OSError:
            return None
        m = re.search(r"version (\d+)\.", out)
        return m.group(1) if m else None
    v = major(tidy)
    for c in (f"/usr/lib/llvm-{v}/bin/clang++", f"clang++-{v}", "clang++"):
        if v and major(c) == v:
            return c
    return None


def make_pch(tidy, entry, header, outdir):
    """clang's precompiled header of `header` with entry's flags, or None where it cannot be made."""
    clang = clang_for(tidy)
    if not clang:
        return None
    flags = clean(retarget(entry, header)["arguments"][1:-2], None)
    pch = os.path.join(outdir, "tests.pch")
    r = subprocess.run([clang, *flags, "-Wno-pragma-system-header-outside-header", "-x", "c++-header", header, "-o",
                        pch], cwd=entry["directory"], capture_output=True, text=True)
    if r.returncode != 0:
        print(f"tidy: no precompiled header for the tests ({clang}): {r.stderr.strip()[:300]}", file=sys.stderr)
        return None
    return pch


def pch_flags(args):
    """The flags a precompiled header must have been made with to be read with args (clang refuses
    one whose language, optimisation or code-generation flags differ; macros it lacks are fine)."""
    return tuple(a for a in args[1:] if a.startswith(("-std=", "-O", "-f", "-m")) or a == "-DNDEBUG")


def prelude_pch(tidy, args, directory, outdir, made, uses):
    """clang's precompiled header of PRELUDE for args' flags (made once per set of flags that
    enough files share to repay it), or None."""
    key = pch_flags(args)
    if uses[key] < 8:
        return None
    if key not in made:
        made[key] = None
        clang = clang_for(tidy)
        if clang:
            header = os.path.join(outdir, "prelude.hpp")
            with open(header, "w") as f:
                f.write("".join(f"#include <{h}>\n" for h in PRELUDE))
            pch = os.path.join(outdir, f"prelude{len(made)}.pch")
            r = subprocess.run([clang, *key, "-x", "c++-header", header, "-o", pch], cwd=directory,
                               capture_output=True, text=True)
            if r.returncode == 0:
                made[key] = pch
            else:
                print(f"tidy: no precompiled prelude ({clang}): {r.stderr.strip()[:300]}", file=sys.stderr)
    return made[key]


def cuda_command(tidy, entry, path):
    """nvcc's command for a .cu file as the clang of TIDY's version compiles CUDA (the same
    includes, macros, standard and GPU architecture), or None where there is no such clang."""
    clang = clang_for(tidy)
    args = arguments(entry)
    nvcc = shutil.which(args[0]) or args[0]
    if not clang:
        return None
    cuda_root = os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))
    flags, i = [], 1
    while i < len(args):
        a = args[i]
        if a == "--options-file" and i + 1 < len(args):
            with open(os.path.join(entry["directory"], args[i + 1])) as f:
                flags += [x for x in shlex.split(f.read()) if x.startswith(("-I", "-isystem", "-D"))]
            i += 2
            continue
        if a in ("-isystem", "-I") and i + 1 < len(args):
            flags += [a, args[i + 1]]
            i += 2
            continue
        if a.startswith(("-I", "-D", "-std=")):
            flags.append(a)
        m = re.search(r"arch=compute_(\d+)", a)
        if m:
            flags.append(f"--cuda-gpu-arch=sm_{m.group(1)}")
        i += 1
    cccl = os.path.join(cuda_root, "include", "cccl")  # nvcc's own include path (CUB, Thrust)
    if os.path.isdir(cccl):
        flags += ["-isystem", cccl]
    # Newer toolkits than this clang knows are read as the newest it knows.
    return {"directory": entry["directory"], "file": path,
            "arguments": [clang, "-x", "cuda", f"--cuda-path={cuda_root}", "-Wno-unknown-cuda-version", *flags,
                          "-c", path]}


def arguments(entry):
    return entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])


def retarget(entry, path):
    """entry's command for another file (its -o and source replaced)."""
    args = arguments(entry)
    out = []
    i = 0
    while i < len(args):
        if args[i] == "-o":
            i += 2
            continue
        if args[i] == "-c":
            i += 2
            continue
        if args[i] == entry["file"]:
            i += 1
            continue
        out.append(args[i])
        i += 1
    return {"directory": entry["directory"], "file": path, "arguments": out + ["-c", path]}


def flags_dir(rel, by_dir):
    """The folder whose compiled files lend rel their flags: its own or the nearest one up."""
    d = os.path.dirname(rel)
    while d not in by_dir and d:
        d = os.path.dirname(d)
    return d if d in by_dir else None


def plan(src, build, outdir, tidy):
    src = os.path.realpath(src)
    with open(os.path.join(build, "compile_commands.json")) as f:
        db = json.load(f)
    pairs = exclusions(src)
    files = tree(src)
    os.makedirs(outdir, exist_ok=True)
    pch = None
    for e in db:
        if gcc_pch(arguments(e)):
            pch = make_pch(tidy, {**e, "arguments": arguments(e)}, gcc_pch(arguments(e)), outdir)
            break
    db_out, units, reached, by_dir, preludes, cuda_read = [], [], set(), {}, {}, set()
    uses = collections.Counter(pch_flags(clean(arguments(e), pch)) for e in db)
    for e in db:
        path = os.path.realpath(os.path.join(e["directory"], e["file"]))
        if path.endswith(".cu"):
            cuda = cuda_command(tidy, e, path)
            if cuda:
                db_out.append(cuda)
                units.append(path)
                reached.add(os.path.relpath(path, src))
                cuda_read.add(os.path.relpath(path, src))
            continue
        members = []
        if re.search(r"/Unity/unity_\d+_cxx\.cxx$", path):
            with open(path) as u:
                members = re.findall(r'#include "([^"]+)"', u.read())
        elif os.path.relpath(path, src) in files:
            members = [path]
        else:
            continue  # the precompiled header's anchor, generated files
        args = clean(arguments(e), pch)
        if not gcc_pch(arguments(e)):
            lib_pch = prelude_pch(tidy, args, e["directory"], outdir, preludes, uses)
            if lib_pch:
                args = args[:1] + ["-include-pch", lib_pch] + args[1:]
        entry = {"directory": e["directory"], "file": path, "arguments": args}
        db_out.append(entry)
        units.append(path)
        for m in members:
            rel = os.path.relpath(m, src)
            reached.add(rel)
            by_dir.setdefault(os.path.dirname(rel), []).append(entry)
    # Sources the build does not compile here: with the flags of their folder's files (or the
    # nearest folder up that has some).
    for rel in files:
        if rel in reached or excluded(rel, pairs) or not rel.endswith((".cpp", ".cc")):
            continue
        d = flags_dir(rel, by_dir)
        if d is None:
            print(f"tidy: no flags to read {rel} with (no compiled file in its folder or above)", file=sys.stderr)
            continue
        entry = retarget(by_dir[d][0], os.path.join(src, rel))
        db_out.append(entry)
        units.append(entry["file"])
    with open(os.path.join(outdir, "compile_commands.json"), "w") as f:
        json.dump(db_out, f, indent=1)
    with open(os.path.join(outdir, "units"), "w") as f:
        f.write("\n".join(units) + "\n")
    with open(os.path.join(outdir, "flags_by_dir.json"), "w") as f:
        json.dump({d: es[0] for d, es in by_dir.items()}, f)
    # CUDA sources where this build compiles no CUDA (no toolkit) or no clang of TIDY's version
    # can read it: said, not counted as missing.
    with open(os.path.join(outdir, "not_built"), "w") as f:
        f.write("".join(rel + "\n" for rel in files if rel.endswith((".cu", ".cuh")) and rel not in cuda_read))


def read_files(src, outdir):
    """Every file of src the runs parsed: the main files and what -H listed."""
    src = os.path.realpath(src)
    seen = set()
    logs = os.path.join(outdir, "logs")
    for name in os.listdir(logs):
        with open(os.path.join(logs, name), errors="replace") as f:
            for line in f:
                m = re.match(r"^(?:\.+ |main: )(/.*)$", line.rstrip("\n"))
                if m:
                    p = os.path.realpath(m.group(1))
                    if p.startswith(src + "/"):
                        seen.add(os.path.relpath(p, src))
    return seen


def headers(src, outdir):
    """plan's second round: the headers no linted file reached, each linted on its own."""
    src = os.path.realpath(src)
    pairs = exclusions(src)
    seen = read_files(src, outdir)
    with open(os.path.join(outdir, "flags_by_dir.json")) as f:
        by_dir = json.load(f)
    with open(os.path.join(outdir, "compile_commands.json")) as f:
        db = json.load(f)
    units = []
    for rel in tree(src):
        if rel in seen or excluded(rel, pairs) or not rel.endswith((".hpp", ".h")):
            continue
        d = flags_dir(rel, by_dir)
        if d is None:
            continue
        entry = retarget(by_dir[d], os.path.join(src, rel))
        entry["arguments"] = entry["arguments"][:-2] + ["-x", "c++-header", "-c", entry["file"]]
        db.append(entry)
        units.append(entry["file"])
    with open(os.path.join(outdir, "compile_commands.json"), "w") as f:
        json.dump(db, f, indent=1)
    with open(os.path.join(outdir, "header_units"), "w") as f:
        f.write("".join(u + "\n" for u in units))


def count(src, outdir):
    src = os.path.realpath(src)
    pairs = exclusions(src)
    files = tree(src)
    seen = read_files(src, outdir)
    with open(os.path.join(outdir, "not_built")) as f:
        not_built = set(f.read().split())
    skipped = [f for f in files if excluded(f, pairs)]
    unbuilt = [f for f in files if f in not_built and f not in seen]
    missing = [f for f in files if f not in seen and not excluded(f, pairs) and f not in not_built]
    read = len([f for f in files if f in seen])
    print(f"clang-tidy: read {read} of the tree's {len(files)} sources; {len(skipped)} excluded by {EXCLUDE}"
          + (f" ({', '.join(skipped)})" if skipped else ""))
    if unbuilt:
        print(f"clang-tidy: {len(unbuilt)} CUDA sources not read: this build compiles no CUDA, or no clang of "
              f"clang-tidy's version is installed ({', '.join(unbuilt)})")
    if missing:
        print(f"clang-tidy: {len(missing)} sources not read:")
        for f in missing:
            print("  " + f)
        return 1
    return 0


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "plan":
        plan(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5])
    elif cmd == "headers":
        headers(sys.argv[2], sys.argv[3])
    elif cmd == "count":
        sys.exit(count(sys.argv[2], sys.argv[3]))
    else:
        sys.exit(f"usage: {sys.argv[0]} plan SRC BUILD OUT TIDY | headers SRC OUT | count SRC OUT")
