#!/usr/bin/env python3
"""The argument definitions of a training framework's release, as test data.

`sax explore/predict --emit` writes a Megatron-LM command or a torchtitan TOML; the test
tests/frameworks/check_emitted.py checks every flag and key it writes against what the named
release defines. This script reads those definitions from the release's own source (a git
checkout or bare mirror, at a tag) with Python's ast — nothing is imported or run — and writes
them as JSON with their source:

  scripts/framework_args.py megatron GITDIR core_v0.15.0 > tests/data/frameworks/megatron-core_v0.15.0.json
  scripts/framework_args.py torchtitan GITDIR v0.2.2 > tests/data/frameworks/torchtitan_v0.2.2.json

Megatron-LM (megatron/training/arguments.py): every `add_argument("--flag", ...)`, whether it
takes a value (store_true/store_false do not) and its choices where they are a literal list.
torchtitan (torchtitan/config/job_config.py): every section of JobConfig (nested dataclasses as
`training.dataloader`) and its keys, with the key's type and a Literal's choices.
"""
import ast
import json
import subprocess
import sys


def git_show(gitdir, tag, path):
    return subprocess.run(["git", "--git-dir", gitdir, "show", f"{tag}:{path}"], check=True, capture_output=True,
                          text=True).stdout


def git_commit(gitdir, tag):
    return subprocess.run(["git", "--git-dir", gitdir, "rev-list", "-n", "1", tag], check=True, capture_output=True,
                          text=True).stdout.strip()


def literal(node):
    try:
        return ast.literal_eval(node)
    except ValueError:
        return None


def megatron_flags(source):
    flags = {}
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"):
            continue
        names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        kw = {k.arg: k.value for k in node.keywords}
        action = literal(kw["action"]) if "action" in kw else None
        choices = literal(kw["choices"]) if "choices" in kw else None
        nargs = literal(kw["nargs"]) if "nargs" in kw else None
        entry = {"value": action not in ("store_true", "store_false", "store_const", "count")}
        if isinstance(choices, (list, tuple)):
            entry["choices"] = [str(c) for c in choices]
        if nargs is not None:
            entry["nargs"] = nargs
        for name in names:
            if name.startswith("--"):
                flags[name] = entry
    return dict(sorted(flags.items()))


def annotation_type(node):
    """A field's type as the TOML check needs it: bool, int, float, str, list, dict, a Literal's
    choices (as a list), or a dataclass name (a nested section). `X | None` is X."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        parts = [annotation_type(n) for n in (node.left, node.right)]
        parts = [p for p in parts if p != "None"]
        if parts == ["float", "int"] or parts == ["int", "float"]:
            return "float"
        return parts[0] if len(parts) == 1 else ast.unparse(node)
    if isinstance(node, ast.Subscript):
        head = ast.unparse(node.value)
        if head == "Literal":
            values = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            return [str(ast.literal_eval(v)) for v in values]
        return {"list": "list", "List": "list", "dict": "dict", "Dict": "dict"}.get(head, ast.unparse(node))
    return ast.unparse(node)


def torchtitan_sections(source):
    classes = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef):
            fields = {}
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    fields[item.target.id] = annotation_type(item.annotation)
            classes[node.name] = fields
    sections = {}

    def add(name, cls):
        keys = {}
        for key, t in classes[cls].items():
            if isinstance(t, str) and t in classes:
                add(f"{name}.{key}", t)
            else:
                keys[key] = t
        sections[name] = keys

    for name, cls in classes["JobConfig"].items():
        if isinstance(cls, str) and cls in classes:
            add(name, cls)
    return dict(sorted(sections.items()))


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("megatron", "torchtitan"):
        sys.exit("usage: framework_args.py megatron|torchtitan GITDIR TAG")
    kind, gitdir, tag = sys.argv[1:]
    if kind == "megatron":
        path, repo = "megatron/training/arguments.py", "NVIDIA/Megatron-LM"
        out = {"flags": megatron_flags(git_show(gitdir, tag, path))}
    else:
        path, repo = "torchtitan/config/job_config.py", "pytorch/torchtitan"
        out = {"sections": torchtitan_sections(git_show(gitdir, tag, path))}
    out = {"source": {"repository": repo, "tag": tag, "commit": git_commit(gitdir, tag), "path": path,
                      "extracted_by": "scripts/framework_args.py"}, **out}
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
