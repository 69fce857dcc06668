#!/usr/bin/env python3
"""Plots a bagpipe metrics file (JSON lines) as loss and AUC curves against samples seen.

  tools/plot_metrics.py METRICS.jsonl [MORE.jsonl ...] -o curves.png   (or .svg)

Each file is one curve (labelled by its file name, or by --label); training loss comes from
"train" events, evaluation logloss and AUC from "eval" events and from the final evaluation in
the "summary" line (the last point); a run resumed from a checkpoint (or run again) that appended
to the same file replaces the earlier lines from where it went back (its "start" line says where).
Points whose figures are not finite (null) are left out, and a line cut short is skipped.  A run without evaluations
(no --eval-every, --no-eval) is plotted as its loss alone.  Where a run's learning rate changes (a
schedule: "lr" in its train lines), the rate is drawn on the loss panel's right-hand axis.  Uses
gnuplot; the output appears only when it is complete (written under a temporary name, renamed at
the end), and nothing else is left behind.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile


def load(path):
    """(train [(samples, loss, lr or None)], evals [(samples, logloss, auc)], split name) of one file."""
    train, ev, split, went_back = [], [], None, False
    try:
        f = open(path, errors="strict")
    except OSError as e:
        sys.exit(f"{path}: cannot open: {e.strerror}")
    with f:
        lines = enumerate(f, 1)
        while True:
            try:
                n, line = next(lines)
            except StopIteration:
                break
            except UnicodeDecodeError:
                sys.exit(f"{path}: not text (a metrics file is JSON lines, from train -m FILE)")
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                if line.startswith("{") and not line.endswith("}"):
                    # a line cut short (a run killed mid-line); train -m goes on below it
                    print(f"{path}:{n}: a line cut short, skipped", file=sys.stderr)
                    continue
                sys.exit(f"{path}:{n}: not a JSON line ({e})")
            if not isinstance(r, dict):
                sys.exit(f"{path}:{n}: a JSON line that is not an object, as every metrics line is")
            # figures that are not finite are null (docs/metrics.md): such a point is left out
            if not isinstance(r.get("samples", 0), (int, float)) or not all(
                    r.get(k) is None or isinstance(r.get(k), (int, float)) for k in ("loss", "logloss", "auc")):
                sys.exit(f"{path}:{n}: samples, loss, logloss or auc is not a number")
            kind = r.get("event")
            if kind == "start" and isinstance(r.get("samples"), (int, float)):
                # a run's first line: the points after its start belong to an earlier run that
                # was interrupted (this one resumed from a checkpoint before them), or ran before
                k, dropped = r["samples"], False
                for pts in (train, ev):
                    while pts and pts[-1][0] > k:
                        pts.pop()
                        dropped = True
                if dropped and not went_back:
                    print(f"{path}:{n}: a run starting at {k} samples (resumed, or run again) appended to this file: "
                          f"its lines replace the earlier ones after that", file=sys.stderr)
                went_back |= dropped
                continue
            if kind == "train" and r.get("loss") is not None:
                went_back |= supersede(train, r["samples"], path, n, went_back)
                train.append((r["samples"], r["loss"], r.get("lr")))
            elif kind in ("eval", "summary") and r.get("auc") is not None and r.get("logloss") is not None:
                # the summary carries the final evaluation, after the last train line
                if kind == "eval" or not ev or ev[-1][0] != r["samples"]:
                    went_back |= supersede(ev, r["samples"], path, n, went_back)
                    ev.append((r["samples"], r["logloss"], r["auc"]))
                split = split or r.get("split")
    return train, ev, split or "val"


def supersede(points, samples, path, n, said):
    """A point at or before the last one: a run resumed from a checkpoint (or run again) appending
    to the same file.  Its lines replace the earlier run's from there on (else the curve would run
    back and forth); says so once per file.  True when it dropped anything."""
    if not points or samples > points[-1][0]:
        return False
    last = points[-1][0]
    while points and points[-1][0] >= samples:
        points.pop()
    if not said:
        print(f"{path}:{n}: a point at {samples} samples, not after the previous one's {last} (a resumed or "
              f"repeated run appended to this file): its lines replace the earlier ones from there on", file=sys.stderr)
    return True


def si(v):
    """v with an SI prefix, as many digits as it needs: 0, 500k, 1.5M, 2.25M."""
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{v / div:g}{suffix}"
    return f"{v:g}"


def x_axis(runs):
    """gnuplot lines for the samples axis: about six ticks at a round step over every run's range,
    each labelled exactly (gnuplot's '%.0s%c' rounded 1.5M and 2.5M to 2M)."""
    xs = [s for train, ev, _ in runs for s in [t[0] for t in train] + [e[0] for e in ev]]
    lo, hi = min(xs), max(xs)
    if hi <= lo:
        return ""
    raw = (hi - lo) / 6
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first, last = math.floor(lo / step), math.ceil(hi / step)
    ticks = [round(i * step, 6) for i in range(first, last + 1)]
    labels = ", ".join(f"{gp_str(si(t))} {t:.10g}" for t in ticks)
    return f"set xrange [{ticks[0]:.10g}:{ticks[-1]:.10g}]\nset xtics ({labels})\n"


def gp_str(s):
    """s as a gnuplot single-quoted string ('' is a quote inside one)."""
    return "'" + str(s).replace("'", "''") + "'"


def main():
    ap = argparse.ArgumentParser(description="plot bagpipe metrics")
    ap.add_argument("files", nargs="+")
    ap.add_argument("-o", "--out", required=True, help="output .png or .svg")
    ap.add_argument("--label", action="append", help="curve label per file")
    ap.add_argument("--title", default="bagpipe training")
    a = ap.parse_args()
    # The format follows the name; any other name used to get PNG bytes (-o curves.jpg, .SVG), and
    # a directory a traceback once the image was drawn.
    ext = os.path.splitext(a.out)[1].lower()
    if os.path.isdir(a.out):
        sys.exit(f"{a.out}: is a directory, expected an image file name (.png or .svg)")
    if ext not in (".png", ".svg"):
        ap.error(f"-o {a.out}: expected a .png or .svg file name")
    labels = a.label or [os.path.basename(p) for p in a.files]
    if len(labels) != len(a.files):
        sys.exit("--label must be given once per file")
    runs = []
    for p in a.files:
        train, ev, split = load(p)
        if not train and not ev:
            sys.exit(f"{p}: no train or eval events")
        runs.append((train, ev, split))
    out_dir = os.path.dirname(os.path.abspath(a.out))
    if not os.path.isdir(out_dir):
        sys.exit(f"{a.out}: directory '{out_dir}' does not exist")
    with tempfile.TemporaryDirectory(prefix="plot_metrics.") as tmp:
        plots_loss, plots_auc, scheduled = [], [], False
        for i, ((train, ev, split), lab) in enumerate(zip(runs, labels)):
            tf, ef = os.path.join(tmp, f"t{i}.dat"), os.path.join(tmp, f"e{i}.dat")
            with open(tf, "w") as f:
                f.writelines(f"{s} {l}\n" for s, l, _ in train)
            with open(ef, "w") as f:
                f.writelines(f"{s} {l} {u}\n" for s, l, u in ev)
            if train:
                plots_loss.append(f"{gp_str(tf)} using 1:2 with lines title {gp_str(lab + ' train loss')}")
            rates = [(s, r) for s, _, r in train if r is not None]
            if len({r for _, r in rates}) > 1:  # a schedule: the rate on the right-hand axis
                scheduled = True
                rf = os.path.join(tmp, f"r{i}.dat")
                with open(rf, "w") as f:
                    f.writelines(f"{s} {r}\n" for s, r in rates)
                plots_loss.append(f"{gp_str(rf)} using 1:2 axes x1y2 with lines dashtype 2 "
                                  f"title {gp_str(lab + ' learning rate')}")
            if ev:
                plots_loss.append(f"{gp_str(ef)} using 1:2 with linespoints title {gp_str(f'{lab} {split} logloss')}")
                plots_auc.append(f"{gp_str(ef)} using 1:3 with linespoints title {gp_str(f'{lab} {split} AUC')}")
        svg = ext == ".svg"
        width = 1000 if plots_auc else 560
        # The image goes to a temporary name next to the output and is renamed once complete.
        fd, part = tempfile.mkstemp(dir=out_dir, prefix="." + os.path.basename(a.out) + ".",
                                    suffix=".svg" if svg else ".png")
        os.close(fd)
        try:
            term = f"svg size {width},420" if svg else f"pngcairo size {width},420"
            rate_axis = "set y2label 'learning rate'\nset y2tics\nset ytics nomirror\n" if scheduled else ""
            panels = f"""set ylabel 'loss'
{rate_axis}plot {", ".join(plots_loss)}
{"unset y2label" + chr(10) + "unset y2tics" + chr(10) + "set ytics mirror" + chr(10) if scheduled else ""}"""
            if plots_auc:
                panels = f"""set multiplot layout 1,2 title {gp_str(a.title)}
{panels}set ylabel 'AUC'
set key bottom right
plot {", ".join(plots_auc)}
unset multiplot
"""
            else:
                panels = f"set title {gp_str(a.title)}\n" + panels
            script = f"""set terminal {term}
set output {gp_str(part)}
set xlabel 'samples'
{x_axis(runs)}set key top right noenhanced
set termoption noenhanced
set grid
{panels}set output
"""
            try:
                r = subprocess.run(["gnuplot"], input=script, text=True, capture_output=True)
                if r.returncode != 0 and "pngcairo" in term:
                    r = subprocess.run(["gnuplot"], input=script.replace("pngcairo", "png"), text=True,
                                       capture_output=True)
            except FileNotFoundError:
                sys.exit("gnuplot is not installed (it draws the curves)")
            if r.returncode != 0 or os.path.getsize(part) == 0:
                sys.exit("gnuplot failed: " + (r.stderr.strip() or f"exit {r.returncode}, empty image"))
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(part, 0o666 & ~umask)  # mkstemp's 0600 is for the temporary name only
            os.replace(part, a.out)
        finally:
            if os.path.exists(part):
                os.remove(part)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
