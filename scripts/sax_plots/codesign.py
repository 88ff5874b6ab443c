"""codesign: the MoE variants of `sax codesign --json`, tokens/s (or predicted loss) against
total parameters, the Pareto set joined."""
import os

from .common import InputError, import_pyplot, keys_of, load_document, place_labels, save_figure


def read_codesign(file):
    doc = load_document(file, "a sax codesign --json file", 1, marker="variants")
    with keys_of(file):
        axes = doc["pareto_axes"]
        with_loss = bool(axes) and axes[0].startswith("predicted_loss")
        model, cluster = doc["inputs"]["model"], doc["inputs"]["cluster"]
        variants = doc["variants"]
    rows = []
    for n, v in enumerate(variants):
        if v.get("predicted") is None:
            continue  # left out: no variant, over the cap, or nothing fits
        with keys_of(file, f"/variants/{n}"):
            rows.append({
                "name": f"E{int(v['experts'])} k{int(v['topk'])}",
                "total": v["total_params"],
                "tokens_per_s": v["predicted"]["tokens_per_s"],
                "loss": v["predicted_loss"] if with_loss else None,
                "pareto": bool(v.get("pareto")),
            })
    if not rows:
        raise InputError(file, "/variants", "at least one variant with a prediction")
    return {"model": model, "cluster": cluster, "with_loss": with_loss, "rows": rows}


def plot_codesign(c, out):
    plt = import_pyplot()
    fig, ax = plt.subplots(figsize=(9, 6.5))
    ykey = "loss" if c["with_loss"] else "tokens_per_s"
    ylabel = "predicted loss (lower is better)" if c["with_loss"] else "tokens/s (higher is better)"
    xs = [r["total"] / 1e9 for r in c["rows"]]
    ys = [r[ykey] for r in c["rows"]]
    others = [(x, y) for x, y, r in zip(xs, ys, c["rows"]) if not r["pareto"]]
    front = sorted((x, y) for x, y, r in zip(xs, ys, c["rows"]) if r["pareto"])
    if others:
        ax.scatter([p[0] for p in others], [p[1] for p in others], s=36, color="#8c8c8c", label="variant", zorder=2)
    ax.plot([p[0] for p in front], [p[1] for p in front], "-o", color="#dd8452", ms=8, lw=1.5,
            label="Pareto set", zorder=3)
    ax.set_xscale("log")
    ax.set_xlabel("total parameters (billions, log)")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(f"{os.path.basename(c['model'])} on {os.path.basename(c['cluster'])}: MoE variants on one budget",
                 fontsize=11)
    place_labels(ax, fig, list(zip(xs, ys)), [r["name"] for r in c["rows"]], fontsize=8)
    ax.legend(loc="best", fontsize=9)
    fig.tight_layout()
    save_figure(fig, out)
    return out


def cmd_codesign(a):
    c = read_codesign(a.codesign_json)
    print(f"# wrote {plot_codesign(c, a.out)}")
