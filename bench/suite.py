#!/usr/bin/env python3
"""The benchmark suite: the BagPipe paper's experiments at the scale of this machine.

  bench/suite.sh [--quick] [--out DIR] [--only 1,3] [--no-netem]

Each experiment writes DIR/NN-name.md (a Markdown table with the commands that produced it), one
or more plots DIR/NN-name*.png (or .svg where gnuplot has no PNG terminal) and its raw data
(.tsv / .jsonl); DIR/index.md collects them with the machine, the date and the commands.  Every
figure is a ratio or a count measured in this one run; absolute times are this machine's, under
whatever else was running (the load average is recorded).  Uses only the bagpipe binary, the
benchmarks in build/bench, bench/netem.sh and gnuplot.
"""
import argparse
import datetime
import filecmp
import json
import math
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# Table sizes of the two presets (bagpipe synth --preset ...), used to derive the reduced tables
# that the training experiments use: every table above 1000 rows divided by 100 (but kept at 1000 or more).
CRITEO_CARD = [1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194, 27, 14992,
               5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572]
AVAZU_CARD = [24, 7, 7, 7, 4737, 7745, 26, 8552, 559, 36, 2686408, 6729486, 8251, 5, 4, 2626, 8, 9, 435, 4, 68,
              172, 60]
MODES = ["sync", "sharded", "static", "bagpipe"]
BYTE_KINDS = ["row_fetch", "grad_push", "forward", "all_to_all", "write_back", "emb_sync", "hot_sync", "allreduce"]
TIME_KINDS = [("compute_s", "compute"), ("wait_rows_s", "row wait"), ("emb_sync_s", "emb sync"),
              ("allreduce_s", "all-reduce")]


def reduced(card):
    return [min(c, max(1000, c // 100)) for c in card]


class SuiteError(Exception):
    pass


# ---------------------------------------------------------------------------------------------
# Markdown and numbers

def fmt(v, digits=3):
    """A table cell: integers as integers, floats with `digits` significant decimals, None as '-'."""
    if v is None or (isinstance(v, float) and (math.isnan(v) or math.isinf(v))):
        return "-"
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if abs(v) >= 1000:
            return f"{v:.0f}"
        return f"{v:.{digits}f}"
    return str(v)


def md_table(headers, rows):
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for r in rows:
        cells = [fmt(c) for c in r]
        if len(cells) != len(headers):
            raise SuiteError(f"table row {r} has {len(cells)} cells for {len(headers)} columns")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def write_tsv(path, headers, rows):
    with open(path, "w") as f:
        f.write("\t".join(headers) + "\n")
        for r in rows:
            f.write("\t".join(fmt(c, 6) for c in r) + "\n")


def summary_of(metrics_path):
    """The last "summary" event of a metrics file (JSON lines)."""
    last = None
    with open(metrics_path) as f:
        for line in f:
            line = line.strip()
            if line:
                r = json.loads(line)
                if r.get("event") == "summary":
                    last = r
    if last is None:
        raise SuiteError(f"{metrics_path}: no summary event")
    return last


def steady_ms(s, key="train_s"):
    """Milliseconds per iteration of a summary's time `key`, the first iteration left out (it connects
    and warms every cache: 50 ms to 1 s against 8-25 ms later here), where the summary gives its part
    (first_iter_s for train_s, first_iter_<key> for the breakdown's times) and more than one ran."""
    n, v = s["iters"], s.get(key, 0.0)
    first = s.get("first_iter_s" if key == "train_s" else "first_iter_" + key)
    if first is not None and n > 1:
        return 1e3 * (v - first) / (n - 1)
    return 1e3 * v / n


def ratio(a, b):
    return a / b if b else None


# ---------------------------------------------------------------------------------------------
# The suite

class Suite:
    def __init__(self, a):
        self.a = a
        self.quick = a.quick
        self.out = os.path.abspath(a.out)
        self.bin = os.path.abspath(a.bin)
        self.bench = os.path.join(os.path.dirname(self.bin), "bench")
        self.data = os.path.join(self.out, "data")
        self.log = open(os.path.join(self.out, "suite.log"), "w")
        self.results = []  # (number, title, md file, [plots], [headline lines])
        self.commands = []  # (experiment, command) in order
        self.exp = ""
        self.t_start = time.time()
        self.term, self.ext = self.gnuplot_terminal()
        self.rates = self.network_rates()
        self.datasets = {}

    # -- running things ---------------------------------------------------------------------

    def rel(self, path):
        """A path as written in the reports: relative to the repository root, or to DIR."""
        p = os.path.abspath(path)
        if p == self.out:
            return "$OUT"
        if p.startswith(self.out + os.sep):
            return "$OUT/" + os.path.relpath(p, self.out)
        if p.startswith(ROOT + os.sep):
            return os.path.relpath(p, ROOT)
        return p

    def show(self, argv):
        return " ".join(shlex.quote(self.rel(x) if os.path.isabs(x) else x) for x in argv)

    def sh(self, argv, timeout=900, record=True):
        """Runs argv, logs it and its output, returns stdout; raises SuiteError on failure."""
        shown = self.show(argv)
        if record:
            self.commands.append((self.exp, shown))
        t0 = time.time()
        self.log.write(f"$ {shown}\n")
        self.log.flush()
        try:
            r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout,
                               cwd=ROOT)
        except subprocess.TimeoutExpired:
            raise SuiteError(f"timed out after {timeout} s: {shown}")
        self.log.write(r.stdout[-4000:] + r.stderr[-4000:] + f"[exit {r.returncode}, {time.time() - t0:.1f} s]\n")
        self.log.flush()
        if r.returncode != 0:
            raise SuiteError(f"failed (exit {r.returncode}): {shown}\n{r.stderr[-2000:]}")
        return r.stdout

    def progress(self, msg):
        print(f"[{time.time() - self.t_start:6.1f} s] {msg}", flush=True)

    def gnuplot_terminal(self):
        try:
            r = subprocess.run(["gnuplot", "-e", "print GPVAL_TERMINALS"], capture_output=True, text=True)
        except FileNotFoundError:
            raise SuiteError("gnuplot not found (scripts/deps.sh installs gnuplot-nox)")
        terms = (r.stdout + r.stderr).split()
        if "pngcairo" in terms:
            return "pngcairo size 960,540 enhanced font ',10'", ".png"
        if "png" in terms:
            return "png size 960,540", ".png"
        return "svg size 960,540 dynamic", ".svg"

    def plot(self, name, body, size=None):
        """Writes DIR/name.<ext> from a gnuplot script body; returns the file name."""
        fname = name + self.ext
        term = self.term if size is None else self.term.replace("960,540", size)
        script = f"set terminal {term}\nset output '{os.path.join(self.out, fname)}'\n{body}\nunset output\n"
        with open(os.path.join(self.out, name + ".gp"), "w") as f:
            f.write(script)
        r = subprocess.run(["gnuplot"], input=script, capture_output=True, text=True, cwd=self.out)
        if r.returncode != 0 or not os.path.getsize(os.path.join(self.out, fname)):
            raise SuiteError(f"gnuplot failed on {name}: {r.stderr[-1500:]}")
        return fname

    def network_rates(self):
        if self.quick or self.a.no_netem:
            self.netem_note = "no network emulation (" + ("--quick" if self.quick else "--no-netem") + \
                              "): ranks talk over Open MPI's shared memory"
            return [None]
        if os.geteuid() != 0:
            self.netem_note = "no network emulation (needs root): ranks talk over Open MPI's shared memory"
            return [None]
        r = subprocess.run([os.path.join(HERE, "netem.sh"), "10gbit", "true"], capture_output=True, text=True)
        if r.returncode != 0:
            self.netem_note = ("no network emulation (bench/netem.sh could not set up a namespace: "
                               + (r.stderr.strip().splitlines() or ["?"])[-1] + "): ranks talk over shared memory")
            return [None]
        self.netem_note = ("emulated networks: every rank behind a rate-limited loopback in a private network "
                           "namespace (bench/netem.sh: tc tbf, MPI over TCP; bandwidth only, no added latency)")
        return ["1gbit", "10gbit"]

    # -- datasets ---------------------------------------------------------------------------

    def dataset(self, key):
        """Generates (once) and returns the path of a dataset: criteo/avazu (the presets) or
        criteo-small/avazu-small (the presets' shapes with tables over 1000 rows cut 100x)."""
        if key in self.datasets:
            return self.datasets[key]
        os.makedirs(self.data, exist_ok=True)
        path = os.path.join(self.data, key + ".bin")
        q = self.quick
        n = {"criteo": 60000 if q else 1000000, "avazu": 60000 if q else 1000000,
             "criteo-small": 40000 if q else 400000, "avazu-small": 40000 if q else 400000}[key]
        argv = [self.bin, "synth", "--rows", str(n), "--seed", "1", "-o", path]
        if key == "criteo":
            argv += ["--preset", "criteo-kaggle"]
        elif key == "avazu":
            argv += ["--preset", "avazu"]
        elif key == "criteo-small":
            argv += ["--preset", "custom", "--dense", "13", "--tables", ",".join(map(str, reduced(CRITEO_CARD))),
                     "--split", "kaggle"]
        else:
            argv += ["--preset", "custom", "--dense", "0", "--ctr", "0.17",
                     "--tables", ",".join(map(str, reduced(AVAZU_CARD)))]
        self.sh(argv)
        self.datasets[key] = path
        return path

    # -- training runs ----------------------------------------------------------------------

    def model_flags(self, model, D):
        f = ["--model", model, "--arch-sparse-feature-size", str(D), "--arch-mlp-top", "64-1"]
        if model == "dlrm":
            f += ["--arch-mlp-bot", f"13-64-{D}"]
        if model == "dcn":
            f += ["--dcn-cross-layers", "2", "--dcn-rank", "16"]
        return f

    def mode_flags(self, mode, T, S, cache):
        f = ["--mode", mode, "--trainers", str(T)]
        if mode == "sharded":
            return f + ["--servers", "0"]
        f += ["--servers", str(S)]
        if mode == "bagpipe":
            f += ["--cache-rows", str(cache), "--lookahead", "32", "--prefetch", "2"]
        return f

    def train(self, tag, data, model, mode, T=2, S=1, rate=None, iters=None, D=32, B=1024, cache=40000,
              extra=()):
        """One training run; returns its summary event plus the metrics path."""
        iters = iters or (12 if self.quick else 100)
        rawdir = os.path.join(self.out, "raw")
        os.makedirs(rawdir, exist_ok=True)
        m = os.path.join(rawdir, tag + ".jsonl")
        if os.path.exists(m):
            os.remove(m)
        argv = [self.bin, "train", *self.mode_flags(mode, T, S, cache), *self.model_flags(model, D),
                "--batch-size", str(B), "--iters", str(iters), "--seed", "1", "--metrics", m, *extra]
        if "--eval-rows" not in extra:
            argv.append("--no-eval")
        if "--print-every" not in extra:
            argv += ["--print-every", str(iters)]
        argv.append(self.dataset(data))
        if rate:
            argv = [os.path.join(HERE, "netem.sh"), rate] + argv
        self.sh(argv)
        s = summary_of(m)
        s["_metrics"] = m
        return s

    # -- experiments ------------------------------------------------------------------------

    def add(self, num, name, title, intro, table, plots, headline, extra_md=""):
        md = f"{num:02d}-{name}.md"
        cmds = [c for e, c in self.commands if e == name]
        body = [f"# {num}. {title}\n", intro.strip() + "\n", table]
        if extra_md:
            body.append(extra_md)
        for p in plots:
            body.append(f"![{title}]({p})\n")
        if cmds:
            body.append("<details><summary>commands</summary>\n\n```\n" + "\n".join(cmds) + "\n```\n</details>\n")
        with open(os.path.join(self.out, md), "w") as f:
            f.write("\n".join(body))
        self.results.append((num, title, md, plots, headline, table + ("\n" + extra_md if extra_md else "")))

    def exp_skew(self):
        self.exp = name = "skew"
        keys = ["criteo", "avazu", "criteo-small", "avazu-small"]
        rows, raw = [], []
        for k in keys:
            out = self.sh([self.bin, "analyze", "--json", "--split", "all", self.dataset(k)])
            j = json.loads(out)
            raw.append(j)
            o = j["overall"]
            share = {round(t["frac"] * 1000): t["share"] for t in o["top"]}
            touched = {round(t["frac"] * 1000): t["share_of_touched"] for t in o["top"]}
            u = j["unique_per_batch"]
            rows.append([k, j["tables"], o["rows"], j["samples"], o["touched"], 100 * share[1], 100 * share[10],
                         100 * share[100], 100 * touched[10], 100 * u["mean_frac"]])
        with open(os.path.join(self.out, "01-skew.jsonl"), "w") as f:
            for j in raw:
                f.write(json.dumps(j) + "\n")
        hdr = ["dataset", "tables", "rows", "samples", "rows touched", "top 0.1% share (%)", "top 1% share (%)",
               "top 10% share (%)", "top 1% of touched rows share (%)", "unique lookups per batch (%)"]
        write_tsv(os.path.join(self.out, "01-skew.tsv"), hdr, rows)
        dat = os.path.join(self.out, "01-skew.dat")
        with open(dat, "w") as f:
            for r in rows:
                f.write(f"{r[0]} {r[5]:.3f} {r[6]:.3f} {r[7]:.3f}\n")
        p = self.plot("01-skew", f"""
set title "Share of lookups taken by the hottest rows"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set ylabel "share of all lookups (%)"
set yrange [0:105]
set grid ytics
set key top left
plot '01-skew.dat' using 2:xtic(1) title "top 0.1% of rows", '' using 3 title "top 1%", '' using 4 title "top 10%"
""")
        c = rows[0]
        headline = [f"Skew: the top 1% of rows take {c[6]:.1f}% of the lookups on the Criteo-shaped preset "
                    f"(the top 1% of the rows touched: {c[8]:.1f}%; avazu {rows[1][6]:.1f}%; paper: >92% on Criteo)."]
        intro = ("Share of all embedding lookups (every split, every table) that go to the hottest 0.1 / 1 / 10% of "
                 "all table rows (`bagpipe analyze --json --split all`), and the mean share of a 2048-sample "
                 "batch's lookups that are distinct rows.  `criteo` and `avazu` are the `synth` presets with the "
                 "real datasets' table sizes; `-small` are the same shapes with every table above 1000 rows cut "
                 "100x (to no fewer than 1000 rows), which the training experiments use.  The generator is calibrated so that the top 1% take "
                 "90% (`--hot-share 0.9`); the table shows what the analysis measures.  With few samples most rows "
                 "of the big tables are never drawn, so the top 1% of all rows covers every row touched (100%); the "
                 "share of the top 1% of the rows actually touched is then the tighter figure.")
        self.add(1, name, "Access skew", intro, md_table(hdr, rows), [p], headline)

    def exp_hitrate(self):
        self.exp = name = "hitrate"
        q = self.quick
        dkey = "criteo-small" if q else "criteo"
        data = self.dataset(dkey)
        if q:
            T, B, W, C, caches, windows = 4, 1024, 25, 30000, [15000, 30000, 60000], [5, 25]
        else:
            T, B, W, C = 8, 2048, 50, 100000
            caches, windows = [25000, 50000, 100000, 200000, 400000, 800000], [2, 5, 10, 25, 50, 100]
        nrows = 30000 if q else 400000
        card = reduced(CRITEO_CARD) if q else CRITEO_CARD
        pdir = os.path.join(self.out, "raw", "02-cachesim")
        os.makedirs(pdir, exist_ok=True)
        self.sh([self.bin, "analyze", "--cache", str(C), "--lookahead", str(W), "--trainers", str(T),
                 "--batch-size", str(B), "--sweep-cache", ",".join(map(str, caches)),
                 "--sweep-lookahead", ",".join(map(str, windows)), "--rows", str(nrows),
                 "--plot-dir", pdir, data])
        with open(os.path.join(pdir, "cachesim.json")) as f:
            j = json.load(f)
        shutil.copy(os.path.join(pdir, "cachesim.json"), os.path.join(self.out, "02-hitrate.json"))

        def hit(policy, cache, window):
            for r in j["runs"]:
                if r["policy"] == policy and (policy == "none" or r["cache"] == cache) and \
                        (policy != "lookahead" or r["lookahead"] == window):
                    return None if "error" in r else 100 * r["hit_rate"]
            return None

        crow = [[c, round(100 * c / sum(card), 3), hit("none", 0, 0), hit("static", c, 0), hit("lru", c, 0),
                 hit("lookahead", c, W)] for c in sorted(set(caches + [C]))]
        wrow = [[w, hit("lookahead", C, w), hit("lru", C, 0), hit("static", C, 0), hit("none", 0, 0)]
                for w in sorted(set(windows + [W]))]
        h1 = ["cache rows per trainer", "% of all rows", "none (%)", "static (%)", "LRU (%)", f"lookahead W={W} (%)"]
        h2 = ["lookahead W", "lookahead (%)", "LRU (%)", "static (%)", "none (%)"]
        write_tsv(os.path.join(self.out, "02-hitrate-cache.tsv"), h1, crow)
        write_tsv(os.path.join(self.out, "02-hitrate-window.tsv"), h2, wrow)
        nan = lambda v: "NaN" if v is None else f"{v:.4f}"
        with open(os.path.join(self.out, "02-hitrate-cache.dat"), "w") as f:
            f.writelines(f"{r[0]} {' '.join(nan(v) for v in r[2:])}\n" for r in crow)
        with open(os.path.join(self.out, "02-hitrate-window.dat"), "w") as f:
            f.writelines(f"{r[0]} {' '.join(nan(v) for v in r[1:])}\n" for r in wrow)
        common = 'set grid\nset ylabel "hit rate (%)"\nset yrange [0:100]\nset key bottom right box opaque\n' \
                 'set datafile missing "NaN"\n'
        p1 = self.plot("02-hitrate-cache", common + f"""
set title "Hit rate vs cache size (T={T}, B={B}, {dkey})"
set xlabel "cache rows per trainer"
set logscale x
plot '02-hitrate-cache.dat' using 1:2 w lp lw 2 t "no cache", '' using 1:3 w lp lw 2 t "static (FAE)", \\
     '' using 1:4 w lp lw 2 t "LRU", '' using 1:5 w lp lw 2 t "lookahead W={W}"
""")
        p2 = self.plot("02-hitrate-window", common + f"""
set title "Hit rate vs lookahead window W ({C} rows per trainer)"
set xlabel "lookahead window W (batches)"
set logscale x
plot '02-hitrate-window.dat' using 1:2 w lp lw 2 t "lookahead", '' using 1:3 w l dt 2 lw 2 t "LRU", \\
     '' using 1:4 w l dt 3 lw 2 t "static (FAE)", '' using 1:5 w l dt 4 lw 2 t "no cache"
""")
        at = next(r for r in crow if r[0] == C)
        headline = [f"Hit rate at {C} rows per trainer (T={T}): static {fmt(at[3], 1)}%, LRU {fmt(at[4], 1)}%, "
                    f"lookahead (W={W}) {fmt(at[5], 1)}% (paper: static ~15% vs lookahead >70%)."]
        intro = (f"Cache simulation (`bagpipe analyze --cache`) of the `{dkey}` dataset's train split "
                 f"({nrows} samples), T = {T} trainers sharing each batch of {B}, prefetch 1: "
                 "the share of (trainer, row, batch) accesses served from the trainer's own cache.  `static` pins "
                 "the rows most accessed over the whole split (FAE, profiled on the very data it is measured "
                 "on, so an upper bound for it); LRU keeps the most recent; lookahead is the oracle's plan.  A "
                 "'-' is a cache smaller than what one lookahead step needs (the planner refuses it).  The "
                 "synthetic popularity does not change over the run (no `--drift`), the case most favourable to a "
                 "static cache; the paper's ~15% for static comes from real logs.")
        tables = md_table(h1, crow) + "\n" + md_table(h2, wrow)
        self.add(2, name, "Hit rate vs cache size and lookahead", intro, tables, [p1, p2], headline)

    def mode_runs(self):
        """Experiments 3 and 4 share these runs: (dataset, model, rate, mode) -> summary."""
        if hasattr(self, "_mode_runs"):
            return self._mode_runs
        self.exp = "modes"
        if self.quick:
            combos = [("criteo-small", "dlrm", MODES), ("avazu-small", "deepfm", ["sync", "bagpipe"])]
        else:
            combos = [(d, m, MODES) for d in ("criteo-small", "avazu-small") for m in ("dlrm", "wdl", "deepfm", "dcn")
                      if not (d == "avazu-small" and m == "dlrm")]
        runs = {}
        for rate in self.rates:
            for d, m, modes in combos:
                for mode in modes:
                    tag = f"03-{d}-{m}-{rate or 'shm'}-{mode}"
                    self.progress(f"modes: {d} {m} {rate or 'shared memory'} {mode}")
                    cache = 40000 if d.startswith("criteo") else 15000
                    runs[(d, m, rate, mode)] = self.train(tag, d, m, mode, rate=rate, cache=cache)
        self._mode_runs = runs
        with open(os.path.join(self.out, "03-modes.jsonl"), "w") as f:
            for (d, m, rate, mode), s in runs.items():
                f.write(json.dumps({"dataset": d, "model": m, "network": rate or "shm", **s}) + "\n")
        return runs

    def exp_modes(self):
        runs = self.mode_runs()
        name = "modes"
        hdr = ["dataset", "model", "network", "mode", "ms/iter (this machine)", "compute ms", "row wait ms",
               "emb sync ms", "all-reduce ms", "speedup vs sync", "bytes/iter", "bytes vs sync"]
        rows, plots, headline = [], [], []
        for rate in self.rates:
            dat = os.path.join(self.out, f"03-modes-{rate or 'shm'}.dat")
            with open(dat, "w") as f:
                f.write("# label compute wait sync allreduce other\n")
                prev = None
                for (d, m, r, mode), s in runs.items():
                    if r != rate:
                        continue
                    n = s["iters"]
                    ms = steady_ms(s)
                    parts = [steady_ms(s, k) for k, _ in TIME_KINDS]
                    sync = runs.get((d, m, r, "sync"))
                    sms = steady_ms(sync) if sync else None
                    b = total_bytes(s) / n
                    sb = total_bytes(sync) / sync["iters"] if sync else None
                    rows.append([d, m, r or "shm", mode, ms, *parts, ratio(sms, ms), b, ratio(b, sb)])
                    if prev is not None and prev != (d, m):
                        f.write('"" 0 0 0 0 0\n')
                    prev = (d, m)
                    other = max(0.0, ms - sum(parts))
                    f.write(f'"{d.split("-")[0]} {m} {mode}" {" ".join(f"{x:.4f}" for x in parts)} {other:.4f}\n')
            label = {None: "shared memory (no emulation)", "1gbit": "1 Gbit/s emulated", "10gbit": "10 Gbit/s emulated"}
            plots.append(self.plot(f"03-modes-{rate or 'shm'}", f"""
set title "Time per iteration by mode, a trainer's breakdown ({label[rate]}; this machine, oversubscribed)"
set style data histograms
set style histogram rowstacked
set style fill solid 0.85 border -1
set boxwidth 0.8
set ylabel "ms per iteration"
set xtics rotate by -60 font ",8"
set grid ytics
set key outside right top
plot '{os.path.basename(dat)}' using 2:xtic(1) title "compute", '' using 3 title "row wait", \\
     '' using 4 title "emb sync", '' using 5 title "all-reduce", '' using 6 title "other"
""", size="1280,600"))
        write_tsv(os.path.join(self.out, "03-modes.tsv"), hdr, rows)
        for rate in self.rates:
            sp = {mode: [r[9] for r in rows if r[2] == (rate or "shm") and r[3] == mode and r[9]] for mode in MODES}
            gm = {mode: geomean(v) for mode, v in sp.items() if v}
            headline.append(f"Speedup over sync ({rate or 'no emulation'}), geometric mean over the models and "
                            "datasets: " + ", ".join(f"{mode} {gm[mode]:.2f}x" for mode in MODES if mode in gm) + ".")
        intro = ("Every mode trains the same model on the same batches (T = 2 trainers, S = 1 server; sharded: no "
                 "servers; static: the hottest 1% of rows pinned; bagpipe: 40,000-row cache on Criteo-small and "
                 "15,000 on Avazu-small, W = 32, P = 2), batch 1024, D = 32, "
                 f"{12 if self.quick else 100} iterations; times per iteration leave the first iteration out (it "
                 "connects and warms every cache), bytes count them all.  " + self.netem_note + ".  The time split is a "
                 "trainer's (summary of `train --metrics`); bytes are summed over the trainers; the ranks share this machine's 2 cores "
                 "(oversubscribed), which every mode pays.  Avazu has no dense features, so DLRM (which needs a "
                 "bottom MLP) runs on Criteo only.  Speedup and bytes are relative to sync at the same network.")
        self.add(3, name, "Iteration time by mode", intro, md_table(hdr, rows), plots, headline)

    def exp_bytes(self):
        runs = self.mode_runs()
        self.exp = name = "bytes"
        rate = self.rates[0]
        kinds = [k for k in BYTE_KINDS if any(s.get("bytes_" + k) for (_, _, r, _), s in runs.items() if r == rate)]
        hdr = ["dataset", "model", "mode", *[k.replace("_", " ") for k in kinds], "total", "vs sync",
               "embedding only", "embedding vs sync"]
        rows = []
        dat = os.path.join(self.out, "04-bytes.dat")
        with open(dat, "w") as f:
            f.write("# label " + " ".join(kinds) + "\n")
            prev = None
            for (d, m, r, mode), s in runs.items():
                if r != rate:
                    continue
                n = s["iters"]
                per = [s.get("bytes_" + k, 0) / n for k in kinds]
                sync = runs.get((d, m, r, "sync"))
                tot, emb = total_bytes(s) / n, emb_bytes(s) / n
                stot = total_bytes(sync) / sync["iters"] if sync else None
                semb = emb_bytes(sync) / sync["iters"] if sync else None
                rows.append([d, m, mode, *[int(round(x)) for x in per], int(round(tot)), ratio(tot, stot),
                             int(round(emb)), ratio(emb, semb)])
                if prev is not None and prev != (d, m):
                    f.write('"" ' + " ".join("0" for _ in kinds) + "\n")
                prev = (d, m)
                f.write(f'"{d.split("-")[0]} {m} {mode}" ' + " ".join(f"{x / 1e6:.6f}" for x in per) + "\n")
        write_tsv(os.path.join(self.out, "04-bytes.tsv"), hdr, rows)
        cols = ", ".join(f"'' using {i + 2} title \"{k.replace('_', ' ')}\"" for i, k in enumerate(kinds[1:], 1))
        p = self.plot("04-bytes", f"""
set title "Bytes per iteration by mode and kind (summed over trainers)"
set style data histograms
set style histogram rowstacked
set style fill solid 0.85 border -1
set boxwidth 0.8
set ylabel "MB per iteration"
set xtics rotate by -60 font ",8"
set grid ytics
set key outside right top
plot '04-bytes.dat' using 2:xtic(1) title "{kinds[0].replace('_', ' ')}"{", " + cols if cols else ""}
""", size="1280,600")
        headline = []
        for mode in MODES[1:]:
            e = [r[-1] for r in rows if r[2] == mode and r[-1]]
            t = [r[-3] for r in rows if r[2] == mode and r[-3]]
            if e:
                headline.append(f"Bytes per iteration, {mode} vs sync (geometric mean): embedding traffic "
                                f"{geomean(e):.2f}x ({100 * (1 - geomean(e)):.0f}% less), all traffic "
                                f"{geomean(t):.2f}x.")
        intro = ("Bytes each kind of message moves per iteration, summed over the trainers (the runs of experiment "
                 "3" + (f", network {rate}" if rate else "") + "; bytes do not depend on the network).  row fetch = "
                 "requests + replies of rows from the servers; grad push = gradients sent to the servers; forward = "
                 "bagpipe's fetch-once forwarding; write back = rows evicted back to their servers; emb sync = "
                 "gradients of shared cached rows between trainers; hot sync = static's pinned-row gradients; "
                 "allreduce = the dense model's.  'embedding only' leaves the dense all-reduce out (the paper's "
                 "65-70% less communication is about embeddings).")
        self.add(4, name, "Bytes moved per iteration", intro, md_table(hdr, rows), [p], headline)

    def exp_scaling(self):
        self.exp = name = "scaling"
        q = self.quick
        Ts = [1, 2] if q else [1, 2, 4, 8]
        Ss = [1, 2] if q else [1, 2, 4]
        iters = 12 if q else 40
        rows = []
        tmodes = ["sync", "bagpipe"] if q else MODES
        smodes = ["bagpipe"] if q else ["sync", "static", "bagpipe"]
        reuse = self.mode_runs() if q else {}  # quick: the T = 2, S = 1 points are experiment 3's runs
        for mode in tmodes:
            for T in Ts:
                s = reuse.get(("criteo-small", "dlrm", None, mode)) if T == 2 else None
                if s is None:
                    self.progress(f"scaling: {mode} T={T}")
                    s = self.train(f"05-{mode}-T{T}-S1", "criteo-small", "dlrm", mode, T=T, S=1, iters=iters)
                rows.append(["trainers", mode, T, 0 if mode == "sharded" else 1, *scale_cells(s, T)])
        for mode in smodes:
            for S in Ss:
                if S == 1 and mode in tmodes:
                    continue
                self.progress(f"scaling: {mode} S={S}")
                s = self.train(f"05-{mode}-T2-S{S}", "criteo-small", "dlrm", mode, T=2, S=S, iters=iters)
                rows.append(["servers", mode, 2, S, *scale_cells(s, 2)])
        for mode in smodes:  # the S = 1 points of the server sweep come from the trainer sweep
            for r in rows:
                if r[0] == "trainers" and r[1] == mode and r[2] == 2:
                    rows.append(["servers", *r[1:]])
                    break
        rows.sort(key=lambda r: (r[0] != "trainers", r[1], r[2], r[3]))
        hdr = ["sweep", "mode", "T", "S", "bytes/iter per trainer", "emb bytes/iter per trainer",
               "row wait ms/iter", "emb sync ms/iter", "ms/iter (this machine)", "hit rate (%)"]
        write_tsv(os.path.join(self.out, "05-scaling.tsv"), hdr, rows)
        for sweep, col in (("trainers", 2), ("servers", 3)):
            with open(os.path.join(self.out, f"05-scaling-{sweep}.dat"), "w") as f:
                for mode in MODES:
                    pts = [r for r in rows if r[0] == sweep and r[1] == mode]
                    if pts:
                        f.write(f'"{mode}"\n')
                        f.writelines(f"{r[col]} {r[4] / 1e3:.4f} {r[6]:.4f}\n" for r in pts)
                        f.write("\n\n")
        body = "set grid\nset key top left box opaque\nset multiplot layout 1,2\n"
        p1 = self.plot("05-scaling-trainers", body + f"""
set title "Bytes per iteration per trainer vs T (S=1)"
set xlabel "trainers T"; set ylabel "KB per iteration per trainer"
set logscale x 2
plot for [i=0:*] '05-scaling-trainers.dat' index i using 1:2 w lp lw 2 title columnheader(1)
set title "Row wait per iteration vs T (this machine, oversubscribed)"
set ylabel "ms per iteration"
plot for [i=0:*] '05-scaling-trainers.dat' index i using 1:3 w lp lw 2 title columnheader(1)
unset multiplot
""", size="1200,480")
        p2 = self.plot("05-scaling-servers", body + f"""
set title "Bytes per iteration per trainer vs S (T=2)"
set xlabel "servers S"; set ylabel "KB per iteration per trainer"
set xtics 1
plot for [i=0:*] '05-scaling-servers.dat' index i using 1:2 w lp lw 2 title columnheader(1)
set title "Row wait per iteration vs S (this machine)"
set ylabel "ms per iteration"
plot for [i=0:*] '05-scaling-servers.dat' index i using 1:3 w lp lw 2 title columnheader(1)
unset multiplot
""", size="1200,480")
        first = {r[1]: r for r in rows if r[0] == "trainers" and r[2] == Ts[0]}
        last = {r[1]: r for r in rows if r[0] == "trainers" and r[2] == Ts[-1]}
        headline = ["Embedding bytes per trainer per iteration from T=" + str(Ts[0]) + " to T=" + str(Ts[-1]) + ": " +
                    ", ".join(f"{m} {first[m][5] / 1e3:.0f} -> {last[m][5] / 1e3:.0f} KB" for m in tmodes
                              if m in first and m in last) + "."]
        intro = (f"DLRM on Criteo-small (batch 1024, D = 32, {iters} iterations).  Trainer sweep at S = 1 (sharded: "
                 f"no servers), server sweep at T = 2.  All ranks (T + S + 1) share this machine's 2 cores, so "
                 "ms/iter grows with the ranks for every mode (the first iteration left out); bytes per trainer are "
                 f"exact and the waits keep their order.  {self.netem_note.split(':')[0]}.")
        self.add(5, name, "Scaling with trainers and servers", intro, md_table(hdr, rows), [p1, p2], headline)

    def exp_convergence(self):
        self.exp = name = "convergence"
        q = self.quick
        iters, every = (30, 15) if q else (300, 30)
        eval_every = iters // 2 if q else 60
        common = dict(iters=iters, B=512, cache=20000)
        flags = ("--eval-rows", "20000", "--print-every", str(every), "--emb-optimizer", "adagrad")
        saved = {m: os.path.join(self.out, "raw", f"06-model-{m}") for m in ("sync", "bagpipe")}
        for d in saved.values():
            shutil.rmtree(d, ignore_errors=True)
        # Both evaluate during training (--eval-every works in every mode: bagpipe first lays the
        # dirty rows still cached on the trainers over the servers' shards), one run each.
        curves = {}
        for m in ("sync", "bagpipe"):
            self.progress(f"convergence: {m}")
            s = self.train(f"06-{m}", "criteo-small", "dlrm", m, extra=flags + (
                "--eval-every", str(eval_every), "--save", saved[m]), **common)
            curves[m] = load_curve(s["_metrics"])
        a, b = curves["sync"], curves["bagpipe"]
        same_model = all(filecmp.cmp(os.path.join(saved["sync"], f), os.path.join(saved["bagpipe"], f), shallow=False)
                         for f in sorted(os.listdir(saved["sync"])))
        for d in saved.values():
            shutil.rmtree(d, ignore_errors=True)
        pts = sorted(set(a) | set(b))
        rows = []
        for smp in pts:
            ra, rb = a.get(smp, {}), b.get(smp, {})
            rows.append([smp, ra.get("loss"), rb.get("loss"), ra.get("auc"), rb.get("auc"),
                         absdiff(ra.get("loss"), rb.get("loss")), absdiff(ra.get("auc"), rb.get("auc"))])
        diffs = [d for r in rows for d in (r[5], r[6]) if d is not None]
        compared = len(diffs)
        for r in rows:  # exact: 0, or the difference in full
            r[5], r[6] = [None if d is None else ("0" if d == 0 else f"{d:.3e}") for d in (r[5], r[6])]
        identical = compared > 0 and all(d == 0 for d in diffs) and \
            all(("loss" in a.get(smp, {})) == ("loss" in b.get(smp, {})) for smp in pts)
        hdr = ["samples", "sync train loss", "bagpipe train loss", "sync val AUC", "bagpipe val AUC",
               "loss difference", "AUC difference"]
        write_tsv(os.path.join(self.out, "06-convergence.tsv"), hdr, rows)
        with open(os.path.join(self.out, "06-convergence.dat"), "w") as f:
            nan = lambda v: "NaN" if v is None else repr(v)
            f.writelines(f"{r[0]} {' '.join(nan(v) for v in r[1:5])}\n" for r in rows)
        p = self.plot("06-convergence", """
set datafile missing "NaN"
set grid
set xlabel "samples"
set multiplot layout 1,2 title "sync vs bagpipe (T=2): the curves coincide"
set ylabel "training loss"
set key top right
plot '06-convergence.dat' using 1:2 w lp lw 6 pt 7 ps 1.6 lc rgb "#9ecae1" t "sync", '' using 1:3 w p pt 7 ps 0.7 lc rgb "#d95f02" t "bagpipe"
set ylabel "validation AUC"
set key bottom right
plot '06-convergence.dat' using 1:4 w lp lw 6 pt 7 ps 1.6 lc rgb "#9ecae1" t "sync", '' using 1:5 w p pt 7 ps 0.7 lc rgb "#d95f02" t "bagpipe"
unset multiplot
""", size="1200,480")
        check = md_table(["check", "result (1 = yes)"],
                         [["values compared", compared], ["every logged loss and AUC equal", identical],
                          ["saved models byte-identical", same_model]])
        if not identical or not same_model:
            print("suite: WARNING: sync and bagpipe diverged (see 06-convergence.md)", file=sys.stderr)
        headline = [f"Convergence: sync and bagpipe give {'identical' if identical else 'DIFFERENT'} loss and AUC "
                    f"at every logged point ({compared} values) and {'byte-identical' if same_model else 'DIFFERENT'} "
                    "saved models."]
        intro = (f"DLRM on Criteo-small, T = 2, S = 1, batch 512, {iters} iterations, Adagrad embeddings, validation "
                 f"AUC on up to 20,000 samples; bagpipe with a 20,000-row cache, so rows are evicted and refetched.  "
                 "Training loss is the mean over the iterations since the previous line.  Both evaluate during "
                 f"the run, every {eval_every} iterations (`--eval-every`; bagpipe first lays the dirty rows cached "
                 "on its trainers over the servers' shards).  The two must coincide exactly: every mode sums "
                 "gradients in trainer-rank order.")
        self.add(6, name, "Convergence: sync vs bagpipe", intro, md_table(hdr, rows), [p], headline, extra_md=check)

    def exp_oracle(self):
        self.exp = name = "oracle"
        q = self.quick
        # Next to the binary (build/bench), else the default build's (a sanitizer build of the
        # tests builds no benchmarks).
        exe = next((e for e in (os.path.join(self.bench, "bench_plan"), os.path.join(ROOT, "build", "bench", "bench_plan"))
                    if os.access(e, os.X_OK)), None)
        if exe is None:
            raise SuiteError(f"{os.path.join(self.bench, 'bench_plan')} missing: run make")
        dkey = "criteo-small" if q else "criteo"
        data = self.dataset(dkey)
        windows = "5,25" if q else "10,25,50,100,200"
        trainers = "1,4" if q else "1,2,4,8,16"
        fw, ft = (10, 4) if q else (50, 8)
        out = self.sh([exe, "--windows", windows, "--trainers", trainers, "--fixed-window", str(fw),
                       "--fixed-trainers", str(ft), "-b", "2048", "--cache", "100000" if q else "400000",
                       "--rows", str(30000 if q else 400000), data])
        with open(os.path.join(self.out, "07-oracle.tsv"), "w") as f:
            f.write("\n".join(l for l in out.splitlines() if not l.startswith("#")) + "\n")
        lines = [l.split("\t") for l in out.splitlines() if l and not l.startswith("#")]
        head, recs = lines[0], [dict(zip(lines[0], l)) for l in lines[1:]]
        rows = [[r["sweep"], int(r["W"]), int(r["T"]), float(r["samples_per_s"]), float(r["ms_per_batch"]),
                 float(r["cpu_index_ms"]) + float(r["cpu_plan_ms"]), 1e3 * 2048 / max(1e-9, float(r["cpu_index_ms"]) +
                                                                                    float(r["cpu_plan_ms"])),
                 100 * float(r["hit_rate"]), float(r["fetches_per_batch"]), round(int(r["mem_bytes"]) / 2 ** 20, 1)]
                for r in recs]
        hdr = ["sweep", "W", "T", "samples/s (wall, this machine)", "ms per batch (wall)", "CPU ms per batch",
               "samples per CPU-second", "hit rate (%)", "fetches per batch", "oracle memory (MiB)"]
        for sweep, col in (("window", 1), ("trainers", 2)):
            with open(os.path.join(self.out, f"07-oracle-{sweep}.dat"), "w") as f:
                f.writelines(f"{r[col]} {r[3]:.1f} {r[6]:.1f}\n" for r in rows if r[0] == sweep)
        body = "set grid\nset key top right box opaque\nset ylabel \"samples planned per second\"\nset logscale x 2\n" \
               "set multiplot layout 1,2\n"
        p = self.plot("07-oracle", body + f"""
set title "Planning throughput vs lookahead W (T={ft}, B=2048)"
set xlabel "lookahead window W (batches)"
plot '07-oracle-window.dat' using 1:3 w lp lw 2 t "per CPU-second", '' using 1:2 w lp lw 2 t "wall (this machine)"
set title "Planning throughput vs trainers T (W={fw}, B=2048)"
set xlabel "trainers T"
plot '07-oracle-trainers.dat' using 1:3 w lp lw 2 t "per CPU-second", '' using 1:2 w lp lw 2 t "wall (this machine)"
unset multiplot
""", size="1200,480")
        w = [r for r in rows if r[0] == "window"]
        headline = [f"Oracle (one planner thread, B=2048, T={ft}): {w[0][6] / 1e6:.2f}M samples per CPU-second at "
                    f"W={w[0][1]}, {w[-1][6] / 1e6:.2f}M at W={w[-1][1]}."]
        intro = (f"The oracle planning the `{dkey}` dataset's train split (`build/bench/bench_plan`, one planner "
                 f"thread, P = 2, {100000 if q else 400000} cache rows per trainer), swept over W at T = {ft} and over T at W = {fw}.  "
                 "Samples per CPU-second (the oracle's own CPU accounting) hold on a loaded machine; the wall "
                 "rate is this machine's at the time, including start-up of each run.")
        self.add(7, name, "Oracle planning throughput", intro, md_table(hdr, rows), [p], headline)

    def exp_async(self):
        script = os.path.join(HERE, "bench_async.sh")
        if not os.path.exists(script):
            return
        self.exp = "async"
        self.progress("async (bench/bench_async.sh)")
        # Where the suite emulates no network (--quick, --no-netem, no root), neither does this script.
        no_netem = ["env", "RATES=none"] if self.rates == [None] else []
        self.sh(no_netem + ["sh", script, self.out] + (["--quick"] if self.quick else []))
        md = "async.md"
        plots = [p for p in ("async_convergence.png", "async_convergence.svg") if os.path.exists(os.path.join(self.out, p))]
        if os.path.exists(os.path.join(self.out, md)):
            with open(os.path.join(self.out, md)) as f:
                table = f.read()
            self.results.append((8, "Asynchronous mode", md, plots, [], table))

    # -- report -----------------------------------------------------------------------------

    def machine(self):
        def read(p):
            try:
                with open(p) as f:
                    return f.read()
            except OSError:
                return ""
        cpu = next((l.split(":", 1)[1].strip() for l in read("/proc/cpuinfo").splitlines()
                    if l.startswith("model name")), platform.processor() or "?")
        mem = next((int(l.split()[1]) / 2 ** 20 for l in read("/proc/meminfo").splitlines()
                    if l.startswith("MemTotal")), 0)
        try:
            commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                    cwd=ROOT).stdout.strip()
        except OSError:
            commit = "?"
        return [["CPU", cpu], ["cores (nproc)", str(os.cpu_count())], ["memory", f"{mem:.1f} GiB"],
                ["kernel", platform.release()], ["OS", platform.platform()],
                ["OPENBLAS_CORETYPE", os.environ.get("OPENBLAS_CORETYPE", "(unset)")],
                ["load average at start", self.load0], ["load average at end", " ".join(read("/proc/loadavg").split()[:3])],
                ["git commit", commit or "?"], ["network", self.netem_note]]

    def write_index(self, argv, failures):
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        L = [f"# bagpipe benchmark suite{' (--quick)' if self.quick else ''}\n",
             f"Run {now}, {time.time() - self.t_start:.0f} s wall.  Command: `{argv}`\n",
             "Figures are ratios or counts measured side by side in this run; absolute times are this "
             "machine's, shared with other work at the time (see the load average), so they are lower bounds.\n",
             "## Machine\n", "| what | value |\n|---|---|"]
        L += [f"| {k} | {v} |" for k, v in self.machine()]
        L.append("\n## Headline figures\n")
        for r in self.results:
            L += [f"- {h}" for h in r[4]]
        if failures:
            L.append("\n## Failed experiments\n")
            L += [f"- {f}" for f in failures]
        L.append("\n## Experiments\n")
        L.append("| # | experiment | table | plots |\n|---|---|---|---|")
        for num, title, md, plots, _, _ in self.results:
            L.append(f"| {num} | {title} | [{md}]({md}) | " + ", ".join(f"[{p}]({p})" for p in plots) + " |")
        for num, title, md, plots, _, table in self.results:
            L.append(f"\n## {num}. {title}\n\n[{md}]({md})\n")
            L.append(table)
            L += [f"![{title}]({p})\n" for p in plots]
        L.append("\n## Commands\n\nEvery command this run made, in order (`$OUT` is the results folder); "
                 "`suite.log` has their output.\n\n```")
        L += [c for _, c in self.commands]
        L.append("```\n")
        with open(os.path.join(self.out, "index.md"), "w") as f:
            f.write("\n".join(L))


def total_bytes(s):
    return sum(v for k, v in s.items() if k.startswith("bytes_") and k != "bytes_per_iter" and isinstance(v, (int, float)))


def emb_bytes(s):
    return total_bytes(s) - s.get("bytes_allreduce", 0)


def geomean(v):
    v = [x for x in v if x and x > 0]
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else float("nan")


def absdiff(x, y):
    return None if x is None or y is None else abs(x - y)


def scale_cells(s, T):
    n = s["iters"]
    return [int(round(total_bytes(s) / n / T)), int(round(emb_bytes(s) / n / T)), steady_ms(s, "wait_rows_s"),
            steady_ms(s, "emb_sync_s"), steady_ms(s),
            100 * s["hit_rate"] if "hit_rate" in s else None]


def load_curve(path):
    """samples -> {"loss", "auc"} from a metrics file's train, eval and summary events."""
    pts = {}
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            r = json.loads(line)
            e, smp = r.get("event"), r.get("samples")
            if e == "train" and r.get("loss") is not None:
                pts.setdefault(smp, {})["loss"] = r["loss"]
            elif e in ("eval", "summary") and r.get("auc") is not None:
                pts.setdefault(smp, {})["auc"] = r["auc"]
    return pts


EXPERIMENTS = [(1, "skew", "exp_skew"), (2, "hitrate", "exp_hitrate"), (3, "modes", "exp_modes"),
               (4, "bytes", "exp_bytes"), (5, "scaling", "exp_scaling"), (6, "convergence", "exp_convergence"),
               (7, "oracle", "exp_oracle"), (8, "async", "exp_async")]


def main():
    ap = argparse.ArgumentParser(description="bagpipe benchmark suite (the BagPipe paper's experiments)")
    ap.add_argument("--quick", action="store_true", help="tiny datasets, few iterations, no network emulation")
    ap.add_argument("--out", help="results folder (default results/bench-YYYYMMDD-HHMMSS)")
    ap.add_argument("--bin", default=os.environ.get("BAGPIPE_BIN", os.path.join(ROOT, "build", "bagpipe")),
                    help="the bagpipe binary (its folder's bench/ holds the benchmarks)")
    ap.add_argument("--only", help="comma-separated experiment numbers or names (default: all)")
    ap.add_argument("--no-netem", action="store_true", help="never emulate the network")
    a = ap.parse_args()
    want = set((a.only or "").split(",")) - {""}
    unknown = sorted(want - {str(num) for num, _, _ in EXPERIMENTS} - {name for _, name, _ in EXPERIMENTS})
    if unknown:
        ap.error(f"--only {a.only}: no experiment {', '.join(unknown)} (numbers 1-{len(EXPERIMENTS)} or names: "
                 + ", ".join(name for _, name, _ in EXPERIMENTS) + ")")
    # Relative paths are the caller's (bench/suite.sh runs this from the repository root).
    caller = os.environ.get("BAGPIPE_CALLER_DIR", os.getcwd())
    if a.out and not os.path.isabs(a.out):
        a.out = os.path.join(caller, a.out)
    if a.bin and not os.path.isabs(a.bin) and os.path.exists(os.path.join(caller, a.bin)):
        a.bin = os.path.join(caller, a.bin)
    if not a.out:
        a.out = os.path.join(ROOT, "results", "bench-" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))
    os.makedirs(a.out, exist_ok=True)
    load0 = open("/proc/loadavg").read().split()[:3] if os.path.exists("/proc/loadavg") else ["?"]
    try:
        s = Suite(a)
    except SuiteError as e:
        print(f"suite: {e}", file=sys.stderr)
        return 1
    s.load0 = " ".join(load0)
    failures = []
    s.progress(f"results in {a.out}; {s.netem_note}")
    for num, name, fn in EXPERIMENTS:
        if want and str(num) not in want and name not in want:
            continue
        s.progress(f"experiment {num}: {name}")
        try:
            getattr(s, fn)()
        except Exception as e:  # one experiment failing must not lose the others
            failures.append(f"{num} {name}: {e}")
            print(f"suite: experiment {num} ({name}) failed: {e}", file=sys.stderr)
    shutil.rmtree(s.data, ignore_errors=True)
    argv = " ".join(["bench/suite.sh"] + [shlex.quote(x) for x in sys.argv[1:]])
    s.write_index(argv, failures)
    s.progress(f"wrote {os.path.join(a.out, 'index.md')}")
    for r in s.results:
        for h in r[4]:
            print("  " + h)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
