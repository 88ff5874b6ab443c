"""What every figure shares: reading sax's JSON, writing files whole, the category colours and
the label placement."""
import contextlib
import json
import os

# One colour per category, the same in every figure (validate's breakdown, the timeline), so that
# a reader learns them once. Communication dimensions are blues/greens/purples, waiting is grey.
CATEGORY_COLOURS = {
    "compute": "#4c72b0",
    "optimizer": "#8172b3",
    "tp_comm": "#dd8452",
    "cp_comm": "#c44e52",
    "ep_comm": "#937860",
    "dp_comm": "#55a868",
    "pp_comm": "#da8bc3",
    "idle": "#b0b0b0",
    "other": "#ccb974",
}
CATEGORY_ORDER = list(CATEGORY_COLOURS)
CATEGORY_NAMES = {
    "compute": "compute",
    "optimizer": "optimizer",
    "tp_comm": "TP comm",
    "cp_comm": "CP comm",
    "ep_comm": "EP comm",
    "dp_comm": "DP comm",
    "pp_comm": "PP comm",
    "idle": "idle",
    "other": "other",
}


class InputError(Exception):
    """Bad input: becomes one line on stderr and exit 2."""

    def __init__(self, file, path, expected):
        where = file + (": " + path if path else "")
        super().__init__(f"{where}: expected {expected}")


class MatplotlibMissing(Exception):
    pass


# ---------------------------------------------------------------------------------------------
# Reading: sax validates what it writes, so a document is used as it is; what is checked here is
# only what tells one kind of file from another (a file given to the wrong command) and a key a
# figure needs but does not find.


def load_json(file, what):
    try:
        with open(file, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise InputError(file, "", what + " (no such file)")
    except IsADirectoryError:
        raise InputError(file, "", what + " (it is a directory)")
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError(file, "", f"{what} (not JSON: {e})")
    except OSError as e:
        raise InputError(file, "", f"{what} (cannot read: {e.strerror})")


def load_document(file, what, version, marker=None):
    """A JSON object of sax's whose "version" is `version` (and that holds `marker`, where files of
    two kinds share a version): a file of another kind says so."""
    doc = load_json(file, what)
    if not isinstance(doc, dict) or doc.get("version") != version or (marker and marker not in doc):
        raise InputError(file, "/version", f"{version} ({what})")
    return doc


@contextlib.contextmanager
def keys_of(file, path=""):
    """A key missing inside the block becomes one InputError naming the file and the key (under
    `path`, the JSON path of the object read there)."""
    try:
        yield
    except KeyError as e:
        key = e.args[0] if e.args else "?"
        raise InputError(file, f"{path}/{key}", f"a field '{key}'") from None


# ---------------------------------------------------------------------------------------------
# Writing: whole or not at all.


def import_pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display: files only
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise MatplotlibMissing(str(e))
    return plt


def replace_atomically(file, write):
    """write(tmp) beside FILE, then renamed over it: FILE is whole or untouched."""
    tmp = os.path.join(os.path.dirname(os.path.abspath(file)), f".{os.path.basename(file)}.tmp.{os.getpid()}")
    try:
        write(tmp)
        os.replace(tmp, file)
    except OSError as e:
        raise InputError(file, "", f"a writable path ({e.strerror})")
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def save_figure(fig, file):
    if not os.path.isdir(os.path.dirname(os.path.abspath(file))):
        raise InputError(file, "", "a path in an existing directory")
    replace_atomically(file, lambda tmp: fig.savefig(tmp, format="png", dpi=110))


def write_text(file, text):
    def write(tmp):
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)

    replace_atomically(file, write)


def out_dir(path):
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise InputError(path, "", f"a directory it can create or write ({e.strerror})")
    if not os.path.isdir(path):
        raise InputError(path, "", "a directory")
    return path


def fmt(x, spec, none="n/a"):
    return none if x is None else format(x, spec)


# ---------------------------------------------------------------------------------------------
# Label placement without extra packages: each label goes to whichever of a few offsets around
# its point overlaps the labels already placed, the points and the axes' edge the least.

LABEL_OFFSETS = [(7, 5), (7, -12), (-7, 5), (-7, -12), (0, 10), (0, -16), (14, 0), (-14, 0), (12, 14), (-12, -20)]


def overlap(a, b):
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    return w * h if w > 0 and h > 0 else 0.0


def place_labels(ax, fig, points, texts, fontsize=9):
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    point_boxes = []
    for x, y in points:
        px, py = ax.transData.transform((x, y))
        point_boxes.append((px - 4, py - 4, px + 4, py + 4))
    a = ax.get_window_extent(renderer)
    axbox = (a.x0, a.y0, a.x1, a.y1)
    placed = []
    for i, ((x, y), text) in enumerate(zip(points, texts)):
        others = [p for j, p in enumerate(point_boxes) if j != i]
        _, dx, dy, ha, box = best_offset(ax, renderer, (x, y), text, fontsize, placed, others, axbox)
        ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=fontsize, ha=ha, va="bottom")
        placed.append(box)


def best_offset(ax, renderer, xy, text, fontsize, placed, point_boxes, axbox):
    """(cost, dx, dy, ha, box) of the offset whose label overlaps the least: other labels weigh 4,
    other points 1, and any part outside the axes 8."""
    best = None
    for dx, dy in LABEL_OFFSETS:
        ha = "left" if dx > 0 else "right" if dx < 0 else "center"
        ann = ax.annotate(text, xy, xytext=(dx, dy), textcoords="offset points", fontsize=fontsize, ha=ha,
                          va="bottom")
        bb = ann.get_window_extent(renderer)
        box = (bb.x0, bb.y0, bb.x1, bb.y1)
        cost = sum(overlap(box, p) for p in placed) * 4
        cost += sum(overlap(box, p) for p in point_boxes)
        cost += (bb.width * bb.height - overlap(box, axbox)) * 8
        ann.remove()
        if best is None or cost < best[0]:
            best = (cost, dx, dy, ha, box)
        if cost == 0:
            break
    return best
