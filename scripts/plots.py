#!/usr/bin/env python3
"""The figures of sax's results, as PNG files drawn by matplotlib, and one HTML page
that shows them; each kind of figure is a module of sax_plots/ beside this file.

Commands: validate, coll, timeline, codesign, report (`plots.py CMD --help` says what each reads).
Exit codes: 0 done; 2 bad input (one line naming the file and what was expected); 3 matplotlib
is not importable (callers such as `sax bench coll --plots` report "plots skipped").
Every file is written whole or not at all (a temporary file beside it, then renamed).
"""
import argparse
import os
import sys

from sax_plots.codesign import cmd_codesign
from sax_plots.coll import cmd_coll
from sax_plots.common import InputError, MatplotlibMissing
from sax_plots.report import cmd_report
from sax_plots.timeline import cmd_timeline
from sax_plots.validate import cmd_validate

PROG = "plots.py"
# Debian's python3-matplotlib lives under /usr/bin/python3; a python3 found first on PATH (pyenv,
# a virtualenv) may lack it.
SYSTEM_PYTHON = "/usr/bin/python3"


def fail(code, message):
    sys.stderr.write(f"{PROG}: {message}\n")
    sys.exit(code)


class Parser(argparse.ArgumentParser):
    def error(self, message):
        # One line, as every bad input: the usage is one --help away.
        fail(2, f"error: {message} (see {PROG} --help)")


def main():
    p = Parser(prog=PROG, description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=Parser)
    v = sub.add_parser("validate", help="scatter.png and breakdown.png of a sax validate --json file")
    v.add_argument("validate_json")
    v.add_argument("--out", required=True, help="directory for scatter.png and breakdown.png")
    c = sub.add_parser("coll", help="bus bandwidth by size from sax bench coll --json files")
    c.add_argument("bench_json", nargs="+")
    c.add_argument("--calibration", help="a sax calibrate file: draw its alpha-beta line")
    c.add_argument("--out", required=True, help="the PNG to write")
    t = sub.add_parser("timeline", help="one step of a merged trace (sax trace merge)")
    t.add_argument("merged_trace")
    t.add_argument("--out", required=True, help="the PNG to write")
    t.add_argument("--step", type=int, help="measured step, from 1 (default: the one nearest the median)")
    d = sub.add_parser("codesign", help="the variants of sax codesign --json and their Pareto set")
    d.add_argument("codesign_json")
    d.add_argument("--out", required=True, help="the PNG to write")
    r = sub.add_parser("report", help="DIR/index.html over what DIR holds")
    r.add_argument("dir")
    r.add_argument("--title")
    a = p.parse_args()
    try:
        {"validate": cmd_validate, "coll": cmd_coll, "timeline": cmd_timeline, "codesign": cmd_codesign,
         "report": cmd_report}[a.cmd](a)
    except InputError as e:
        fail(2, f"error: {e}")
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        # A value of another type than sax writes there: one line, as for any bad input.
        given = [v for k, v in vars(a).items() if k not in ("cmd", "out", "title", "step") and v]
        inputs = [f for v in given for f in (v if isinstance(v, list) else [v]) if isinstance(f, str)]
        fail(2, f"error: {', '.join(inputs) or 'the input'}: not as sax writes it ({type(e).__name__}: {e})")
    except MatplotlibMissing as e:
        reexec_with_system_python()
        fail(3, f"matplotlib is not importable by {sys.executable} ({e}): install python3-matplotlib")


def reexec_with_system_python():
    """Run again under Debian's python, which has python3-matplotlib, when this interpreter (one
    found first on PATH) lacks it; once only. Nothing has been written yet: inputs are read
    before anything is drawn."""
    if os.environ.get("SAX_PLOTS_REEXEC") or not os.path.exists(SYSTEM_PYTHON):
        return
    if os.path.realpath(sys.executable) == os.path.realpath(SYSTEM_PYTHON):
        return
    os.environ["SAX_PLOTS_REEXEC"] = "1"
    sys.stdout.flush()
    os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON, os.path.abspath(__file__)] + sys.argv[1:])


if __name__ == "__main__":
    main()
