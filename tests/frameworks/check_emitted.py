#!/usr/bin/env python3
"""Every flag and key `sax --emit` writes, checked against the framework release it names.

For every published run (configs/published_runs.json and configs/published_runs_unfitted.json:
`predict --emit`) and every preset model on
every preset cluster (`explore --emit`, the table's #1 and, where the framework would run it
otherwise, the best it runs as priced that follows commented out), both formats:
  - Megatron-LM: the command is parsed as the shell would (shlex); every argument after
    pretrain_gpt.py must be a flag of megatron/training/arguments.py at the release the output
    names (tests/data/frameworks/megatron-core_*.json, made by scripts/framework_args.py), given
    once, with a value exactly when the flag takes one, and that value among its choices where the
    release lists them (a ${VAR:...} placeholder is the user's to supply);
  - torchtitan: the TOML is parsed (tomllib); every section and key must be in the release's
    JobConfig (tests/data/frameworks/torchtitan_*.json), with the key's type or one of its
    Literal's choices.
Prints how many flags and keys it checked; exits 1 naming each one that is wrong.

  check_emitted.py SAX SOURCE_DIR
  check_emitted.py --self-test SOURCE_DIR   (made-up faults are found)
"""
import json
import pathlib
import re
import shlex
import subprocess
import sys
import tomllib

ALT = "# ---- "  # explore --emit's commented-out alternative starts here


def run(sax, args):
    p = subprocess.run([sax] + args, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def split_alternative(text):
    """The emitted configuration and, when explore printed one, the alternative uncommented."""
    if ALT not in text:
        return [text]
    main, alt = text.split(ALT, 1)
    lines = alt.splitlines()[1:]
    return [main, "\n".join(l[2:] if l.startswith("# ") else l for l in lines) + "\n"]


class Checker:
    def __init__(self, source):
        data = pathlib.Path(source) / "tests" / "data" / "frameworks"
        self.megatron = {}
        self.torchtitan = {}
        for f in sorted(data.glob("megatron-core_*.json")):
            d = json.loads(f.read_text())
            self.megatron[d["source"]["tag"]] = d["flags"]
        for f in sorted(data.glob("torchtitan_*.json")):
            d = json.loads(f.read_text())
            self.torchtitan[d["source"]["tag"]] = d["sections"]
        self.flags = self.keys = 0
        self.errors = []

    def error(self, where, what):
        self.errors.append(f"{where}: {what}")

    def check_megatron(self, where, text):
        m = re.search(r"arguments of (core_v[0-9.]+)", text.splitlines()[0])
        if not m or m.group(1) not in self.megatron:
            return self.error(where, f"the command names no release with test data: {text.splitlines()[0]}")
        flags = self.megatron[m.group(1)]
        # As the shell reads it: comment lines dropped, continuations joined.
        body = "\n".join(l for l in text.splitlines() if not l.lstrip().startswith("#"))
        tokens = shlex.split(body.replace("\\\n", " "), comments=True)
        if "pretrain_gpt.py" not in tokens:
            return self.error(where, "no pretrain_gpt.py in the command")
        # arguments.py (core_v0.15.0): TP or CP need CUDA_DEVICE_MAX_CONNECTIONS=1 before
        # Blackwell; Megatron-FSDP asserts it is not 1.
        env_one = "CUDA_DEVICE_MAX_CONNECTIONS=1" in tokens[:tokens.index("torchrun")]
        value = lambda flag: tokens[tokens.index(flag) + 1] if flag in tokens else "1"
        if "--use-megatron-fsdp" in tokens:
            if env_one or "unset" not in tokens[:tokens.index("torchrun")]:
                self.error(where, "Megatron-FSDP without unset CUDA_DEVICE_MAX_CONNECTIONS (arguments.py asserts it)")
        elif (value("--tensor-model-parallel-size") != "1" or value("--context-parallel-size") != "1") and not env_one:
            self.error(where, "TP or CP > 1 without CUDA_DEVICE_MAX_CONNECTIONS=1 (arguments.py asserts it)")
        args = tokens[tokens.index("pretrain_gpt.py") + 1:]
        seen = set()
        i = 0
        while i < len(args):
            flag = args[i]
            i += 1
            self.flags += 1
            if not flag.startswith("--") or flag not in flags:
                self.error(where, f"{flag}: not a flag of Megatron-LM {m.group(1)}")
                continue
            if flag in seen:
                self.error(where, f"{flag}: given twice")
            seen.add(flag)
            spec = flags[flag]
            has_value = i < len(args) and not args[i].startswith("--")
            if spec["value"] != has_value:
                self.error(where, f"{flag}: {'needs a value' if spec['value'] else 'takes no value'}")
            if has_value:
                value = args[i]
                i += 1
                if "choices" in spec and not value.startswith("${") and value not in spec["choices"]:
                    self.error(where, f"{flag} {value}: expected one of {spec['choices']}")

    def check_torchtitan(self, where, text):
        m = re.search(r"v[0-9]+\.[0-9]+\.[0-9]+ keys", text.splitlines()[0])
        tag = m.group(0).split()[0] if m else None
        if tag not in self.torchtitan:
            return self.error(where, f"the TOML names no release with test data: {text.splitlines()[0]}")
        sections = self.torchtitan[tag]
        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            return self.error(where, f"not TOML: {e}")

        def walk(prefix, table):
            for key, value in table.items():
                name = f"{prefix}.{key}" if prefix else key
                if isinstance(value, dict):
                    if name not in sections:
                        self.error(where, f"[{name}]: not a section of torchtitan {tag}")
                    else:
                        walk(name, value)
                    continue
                self.keys += 1
                known = sections.get(prefix, {})
                if key not in known:
                    self.error(where, f"{prefix}.{key}: not a key of torchtitan {tag}")
                    continue
                t = known[key]
                ok = {"bool": lambda v: isinstance(v, bool),
                      "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
                      "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
                      "str": lambda v: isinstance(v, str),
                      "list": lambda v: isinstance(v, list)}
                if isinstance(t, list):
                    if str(value) not in t:
                        self.error(where, f"{prefix}.{key} = {value!r}: expected one of {t}")
                elif t in ok and not ok[t](value):
                    self.error(where, f"{prefix}.{key} = {value!r}: expected {t}")

        walk("", doc)

    def check(self, where, fmt, text):
        for n, part in enumerate(split_alternative(text)):
            w = where + (" (the alternative)" if n else "")
            (self.check_megatron if fmt == "megatron" else self.check_torchtitan)(w, part)


def self_test(source):
    """The checker finds what is wrong: each made-up fault is named, a right one passes."""
    c = Checker(source)
    head = "# Megatron-LM pretrain_gpt.py command (arguments of core_v0.15.0) for a test\n"

    def command(args):
        return head + "torchrun --nnodes 1 \\\n  pretrain_gpt.py" + "".join(" \\\n  " + a for a in args) + "\n"

    good = ["--num-layers 2", "--bf16", "--normalization RMSNorm", "--data-path \"${D:?x}\""]
    c.check("good", "megatron", command(good))
    assert not c.errors, c.errors
    faults = {"not a flag": ["--no-such-flag"], "takes no value": ["--bf16 1"], "needs a value": ["--num-layers"],
              "expected one of": ["--normalization Foo"], "given twice": ["--num-layers 2", "--num-layers 3"]}
    for needle, args in faults.items():
        c.errors = []
        c.check(needle, "megatron", command(args))
        assert len(c.errors) == 1 and needle in c.errors[0], (needle, c.errors)
    tt = "# torchtitan job config (TOML, v0.2.2 keys) for a test\n"
    for bad, needle in {"[training]\nseq_lenn = 8\n": "not a key", "[trainin]\nseq_len = 8\n": "not a section",
                        "[training]\nseq_len = \"8\"\n": "expected int",
                        "[activation_checkpoint]\nmode = \"sometimes\"\n": "expected one of"}.items():
        c.errors = []
        c.check(needle, "torchtitan", tt + bad)
        assert len(c.errors) == 1 and needle in c.errors[0], (bad, c.errors)
    c.errors = []
    c.check("good", "torchtitan", tt + "[training]\nseq_len = 8\n")
    assert not c.errors, c.errors
    print("check_emitted self-test: 5 Megatron-LM faults and 4 torchtitan faults found, the right ones passed")
    return 0


def main():
    if sys.argv[1] == "--self-test":
        return self_test(pathlib.Path(sys.argv[2]))
    sax, source = sys.argv[1], pathlib.Path(sys.argv[2])
    c = Checker(source)
    cases = 0
    runs = [r for f in ("published_runs.json", "published_runs_unfitted.json")
            for r in json.loads((source / "configs" / f).read_text())["runs"]]
    for r in runs:
        for fmt in ("megatron", "torchtitan"):
            code, out, err = run(sax, ["predict", "--cluster", str(source / r["cluster"]), "--model",
                                       str(source / r["model"]), "--layout", str(source / r["layout"]), "--emit", fmt])
            cases += 1
            if code != 0:
                c.error(f"{r['name']} {fmt}", f"predict --emit exited {code}: {err.strip()}")
            else:
                c.check(f"{r['name']} {fmt}", fmt, out)
    explored = skipped = 0
    for cluster in sorted((source / "configs" / "clusters").glob("*.json")):
        for model in sorted((source / "configs" / "models").glob("*.json")):
            for fmt in ("megatron", "torchtitan"):
                code, out, err = run(sax, ["explore", "--cluster", str(cluster), "--model", str(model), "--emit", fmt])
                where = f"{model.stem} on {cluster.stem} {fmt}"
                if code == 2 and "no layout fits" in err:
                    skipped += 1  # a preset too large or too small for the cluster: nothing to emit
                    continue
                cases += 1
                explored += 1
                if code != 0:
                    c.error(where, f"explore --emit exited {code}: {err.strip()}")
                else:
                    c.check(where, fmt, out)
    print(f"check_emitted: {cases} emitted configurations ({len(runs)} published runs x 2 formats, {explored} "
          f"preset explores; {skipped} preset pairs with nothing to emit): {c.flags} Megatron-LM flags and {c.keys} "
          f"torchtitan keys checked against {', '.join(sorted(c.megatron))} and {', '.join(sorted(c.torchtitan))}")
    for e in c.errors:
        print("  " + e)
    if c.errors:
        print(f"check_emitted: {len(c.errors)} wrong")
        return 1
    if explored == 0 or c.flags == 0 or c.keys == 0:
        print("check_emitted: nothing was checked")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
