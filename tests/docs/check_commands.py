#!/usr/bin/env python3
"""docs/commands.md against `sax --help`: every command the program has is a row of the table and
every row a command; in each row every flag of `sax <command> --help` is named, and every flag
the row names exists. Prints each disagreement and exits 1.

    tests/docs/check_commands.py SAX docs/commands.md
"""
import re
import subprocess
import sys

FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*|-[a-zA-Z])(?![\w-])")


def help_text(sax, path):
    r = subprocess.run([sax, *path, "--help"], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{sax} {' '.join(path)} --help exited {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def sections(text):
    """The option names and the subcommands of one --help page (CLI11's layout)."""
    options, subcommands, part = [], [], None
    for line in text.splitlines():
        if line.rstrip().endswith(":") and not line.startswith(" "):
            part = line.strip().rstrip(":")
            continue
        if not line.startswith("  ") or line.startswith("    "):
            continue
        head = line.split()[0]
        if part == "Options":
            names = {re.sub(r"\{.*|\[.*|[:=].*", "", n) for n in head.split(",")}
            names = {n for n in names if n.startswith("-")}
            if names and "--help" not in names:
                options.append(frozenset(names))  # one option: its short and long names
        elif part == "Subcommands":
            subcommands.append(head)
    return options, subcommands


def commands(sax, path=()):
    """Every leaf command (a path of subcommand names) with its options; a command with
    subcommands that also runs on its own (calibrate) is a leaf too."""
    options, subs = sections(help_text(sax, list(path)))
    found = {}
    if path and (options or not subs):
        found[" ".join(path)] = options
    for s in subs:
        found.update(commands(sax, (*path, s)))
    return found


def rows(doc):
    """command -> flags named in its row (the first cell's synopsis)."""
    table = {}
    for line in open(doc, encoding="utf-8"):
        m = re.match(r"^\| `([^`]+)`", line)
        if not m:
            continue
        synopsis = m.group(1)
        words = []
        for w in synopsis.split():
            if not re.fullmatch(r"[a-z]+", w):
                break
            words.append(w)
        table[" ".join(words)] = set(FLAG.findall(synopsis.replace("\\|", "|")))
    return table


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sax, doc = sys.argv[1], sys.argv[2]
    have, said = commands(sax), rows(doc)
    problems = []
    for cmd in sorted(set(have) - set(said)):
        problems.append(f"{doc}: no row for `sax {cmd}`")
    for cmd in sorted(set(said) - set(have)):
        problems.append(f"{doc}: a row for `sax {cmd}`, which `sax --help` does not list")
    for cmd in sorted(set(have) & set(said)):
        for names in sorted(have[cmd], key=sorted):
            if not names & said[cmd]:
                problems.append(f"{doc}: `sax {cmd}` row names none of {'/'.join(sorted(names))} (in its --help)")
        known = set().union(*have[cmd]) if have[cmd] else set()
        for flag in sorted(said[cmd] - known):
            problems.append(f"{doc}: `sax {cmd}` row names {flag}, which its --help does not have")
    for p in problems:
        print(p)
    print(f"{len(have)} commands, {sum(map(len, have.values()))} flags checked; {len(problems)} disagreement(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
