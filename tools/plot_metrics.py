#!/usr/bin/env python3
"""Plots a bagpipe metrics file (JSON lines) as loss and AUC curves against samples seen.

  tools/plot_metrics.py METRICS.jsonl [MORE.jsonl ...] -o curves.png   (or .svg)

Each file is one curve (labelled by its file name, or by --label); training loss comes from
"train" events, validation logloss and AUC from "eval" events.  Uses gnuplot.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def load(path):
    train, ev = [], []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{n}: not a JSON line ({e})")
            if r.get("event") == "train" and r.get("loss") is not None:
                train.append((r["samples"], r["loss"]))
            elif r.get("event") == "eval" and r.get("auc") is not None:
                ev.append((r["samples"], r["logloss"], r["auc"]))
    return train, ev


def main():
    ap = argparse.ArgumentParser(description="plot bagpipe metrics")
    ap.add_argument("files", nargs="+")
    ap.add_argument("-o", "--out", required=True, help="output .png or .svg")
    ap.add_argument("--label", action="append", help="curve label per file")
    ap.add_argument("--title", default="bagpipe training")
    a = ap.parse_args()
    labels = a.label or [os.path.basename(p) for p in a.files]
    if len(labels) != len(a.files):
        sys.exit("--label must be given once per file")
    tmp = tempfile.mkdtemp()
    plots_loss, plots_auc = [], []
    for i, (p, lab) in enumerate(zip(a.files, labels)):
        train, ev = load(p)
        if not train and not ev:
            sys.exit(f"{p}: no train or eval events")
        tf, ef = os.path.join(tmp, f"t{i}.dat"), os.path.join(tmp, f"e{i}.dat")
        with open(tf, "w") as f:
            f.writelines(f"{s} {l}\n" for s, l in train)
        with open(ef, "w") as f:
            f.writelines(f"{s} {l} {u}\n" for s, l, u in ev)
        if train:
            plots_loss.append(f"'{tf}' using 1:2 with lines title '{lab} train loss'")
        if ev:
            plots_loss.append(f"'{ef}' using 1:2 with linespoints title '{lab} val logloss'")
            plots_auc.append(f"'{ef}' using 1:3 with linespoints title '{lab} val AUC'")
    term = "svg size 1000,420" if a.out.endswith(".svg") else "pngcairo size 1000,420"
    script = f"""
set terminal {term}
set output '{a.out}'
set multiplot layout 1,2 title '{a.title}'
set xlabel 'samples'
set key top right
set grid
set ylabel 'loss'
plot {", ".join(plots_loss) if plots_loss else "NaN notitle"}
set ylabel 'AUC'
set key bottom right
plot {", ".join(plots_auc) if plots_auc else "NaN notitle"}
unset multiplot
"""
    r = subprocess.run(["gnuplot"], input=script, text=True, capture_output=True)
    if r.returncode != 0 and "pngcairo" in term:
        script = script.replace("pngcairo", "png")
        r = subprocess.run(["gnuplot"], input=script, text=True, capture_output=True)
    if r.returncode != 0:
        sys.exit("gnuplot failed: " + r.stderr)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
