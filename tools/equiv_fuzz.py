#!/usr/bin/env python3
"""Differential check of the modes' contract: every synchronous mode trains the byte-identical
model of `sync` at the same T (and of `local` at T = 1).

Each configuration draws a small synthetic dataset (Criteo-shaped with dense features, Avazu-shaped
without, tiny tables, strongly skewed), a model, optimizers, a learning-rate schedule, T, S, a
batch size (including ones that leave a trainer an empty slice), iterations or epochs, mid-run
evaluations and each mode's own settings (bagpipe's window, prefetch distance and a cache at the
minimum the oracle names, async with --staleness 0, static's pinned rows), trains every mode with
--save and compares dense.bin and emb.bin byte for byte with the reference.  Some configurations
also stop a run at a checkpoint and resume it (in the same mode, and in another mode, which must be
refused clearly).

    tools/equiv_fuzz.py [--bin build/bagpipe] [-n CONFIGS] [--seed S] [--dir DIR] [--keep]

Every mismatch, crash, hang or unexpected refusal is printed with the commands that show it and
counted; the exit status is 1 when there was any.  The runs are tiny (about a second each, most of
it mpirun's start): one configuration takes 5-20 s.  Python 3 standard library only.
"""
import argparse
import filecmp
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OPENBLAS_CORETYPE=os.environ.get("OPENBLAS_CORETYPE", "Haswell"))

SHAPES = {
    # name: (tables, dense features, synth extras)
    "criteo": ("3,40,300,2000", 4, []),
    "avazu": ("1,5,50,700,30,9", 0, []),
    "tiny": ("1,2,7", 2, []),
    "skewed": ("60,500,4000", 3, ["--skew", "2.5"]),
    # raw text through `prep` (ids by frequency, rare values sharing one id): the presets' real
    # table count, Criteo with its day split
    "criteo-tsv": (None, 13, ["--preset", "criteo-kaggle", "--format", "tsv"],
                   ["--format", "criteo", "--split", "kaggle", "--min-count", "2"]),
    "avazu-csv": (None, 0, ["--preset", "avazu", "--format", "csv"],
                  ["--format", "avazu", "--split", "ratio:0.8,0.1,0.1", "--min-count", "2"]),
}


def run(cmd, timeout=90):
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=ENV, timeout=timeout)
        return p.returncode, p.stdout.decode(errors="replace")
    except subprocess.TimeoutExpired as e:
        return 124, (e.stdout or b"").decode(errors="replace") + "\n[timed out]"


def same_model(a, b):
    for f in ("dense.bin", "emb.bin"):
        pa, pb = os.path.join(a, f), os.path.join(b, f)
        if not (os.path.isfile(pa) and os.path.isfile(pb)):
            return "%s missing" % f
        if not filecmp.cmp(pa, pb, shallow=False):
            return "%s differs" % f
    return None


def evals(out):
    """The evaluation lines of a run's output (mid-run and final), which every mode prints alike."""
    return [l.strip() for l in out.splitlines() if re.match(r"^(iteration \d+: )?(train|val|test) +AUC", l.strip())]


def quote(cmd):
    return " ".join(c if re.match(r"^[\w./:,=+-]+$", c) else "'%s'" % c for c in cmd)


class Fuzz:
    def __init__(self, args):
        self.bin, self.dir = args.bin, args.dir
        self.configs = self.runs = self.failures = 0
        self.datasets = {}
        self.seen = {}

    def note(self, key, val):
        self.seen.setdefault(key, set()).add(str(val))

    def fail(self, what, cmds, out=""):
        self.failures += 1
        print("FAIL: %s" % what)
        for c in cmds:
            print("  $ %s" % quote(c))
        lines = [l for l in out.strip().splitlines() if l.startswith("bagpipe") or "rror" in l or "ssert" in l]
        if lines:
            print("  | " + "\n  | ".join(lines[-12:]))
        sys.stdout.flush()

    def dataset(self, shape, rows, seed):
        key = (shape, rows, seed)
        if key not in self.datasets:
            tables, dense, extra = SHAPES[shape][:3]
            path = os.path.join(self.dir, "%s-%d-%d.bin" % key)
            raw = path[:-4] + ".txt"
            cmd = [self.bin, "synth", "-n", str(rows), "--seed", str(seed), "-t", "1", "-o", raw if not tables else path]
            cmd += ["--preset", "custom", "--tables", tables, "--dense", str(dense)] + extra if tables else extra
            rc, out = run(cmd)
            if rc:
                self.fail("synth exited %d" % rc, [cmd], out)
                return None
            if not tables:
                cmd = [self.bin, "prep", "-o", path] + SHAPES[shape][3] + [raw]
                rc, out = run(cmd)
                if rc:
                    self.fail("prep exited %d" % rc, [cmd], out)
                    return None
            self.datasets[key] = path
        return self.datasets[key]

    def train(self, data, save, args):
        cmd = [self.bin, "train", data, "--save", save] + args
        if "local" not in args:
            cmd += ["--stall-timeout", "60"]
        self.runs += 1
        rc, out = run(cmd)
        return cmd, rc, out

    def min_cache(self, data, args):
        """The smallest --cache-rows the run accepts (bagpipe: the oracle's minimum; async: the
        most distinct rows of a slice): start at one row and take the minimum each refusal names
        until the run passes."""
        cache = 1
        for _ in range(40):
            save = os.path.join(self.dir, "probe")
            cmd, rc, out = self.train(data, save, args + ["--cache-rows", str(cache)])
            if rc == 0:
                return cache, save
            m = (re.search(r"minimum cache size for this batch is (\d+) rows", out) or
                 re.search(r"needs --cache-rows (\d+) or more", out))
            if not m or int(m.group(1)) <= cache:
                self.fail("cache %d refused unclearly (exit %d)" % (cache, rc), [cmd], out)
                return None, None
            cache = int(m.group(1))
        return None, None

    def one(self, i, rng):
        self.configs += 1
        shape = rng.choice(list(SHAPES))
        rows = rng.choice([60, 200, 600, 1500])
        data = self.dataset(shape, rows, rng.randrange(1, 4))
        if not data:
            return
        dense = SHAPES[shape][1]
        kinds = ["wdl", "deepfm", "dcn"] + (["dlrm", "dlrm"] if dense else [])
        kind = rng.choice(kinds)
        D = rng.choice([1, 2, 3, 4, 4, 9, 16])
        m = ["--model", kind, "--arch-sparse-feature-size", str(D), "--arch-mlp-top", rng.choice(["1", "6-1", "5-3-1"])]
        if kind == "dlrm":
            m += ["--arch-mlp-bot", "%d-%s%d" % (dense, rng.choice(["", "5-"]), D)]
            m += ["--arch-interaction-op", rng.choice(["dot", "cat"])]
        if kind == "dcn":
            m += ["--dcn-cross-layers", str(rng.randrange(0, 3)), "--dcn-rank", str(rng.choice([0, 0, 1]))]
        m += ["--optimizer", rng.choice(["sgd", "adagrad"]),
              "--emb-optimizer", rng.choice(["sgd", "adagrad", "rowwise-adagrad"]),
              "--learning-rate", rng.choice(["0.05", "0.2"])]
        if rng.random() < 0.3:
            m += ["--emb-learning-rate", rng.choice(["0.01", "0.3"])]
        T = rng.randrange(1, 5)
        S = rng.randrange(1, 4)
        n_train = int(rows * 0.8)
        batch = rng.choice([1, T, T, T + 1, 7, 13, 32, n_train // 3 + 1, n_train])
        batch = max(1, batch)
        if rng.random() < 0.6 or batch < 4:
            length = ["--iters", str(rng.randrange(1, 40))]
        else:
            length = ["--epochs", str(rng.choice([1, 2]))]
        iters_est = int(length[1]) if length[0] == "--iters" else int(length[1]) * -(-n_train // batch)
        if iters_est > 400:
            length = ["--iters", str(rng.randrange(1, 40))]
            iters_est = int(length[1])
        if rng.random() < 0.4:
            w = rng.randrange(1, 4)
            m += ["--lr-num-warmup-steps", str(w)]
            if rng.random() < 0.7:
                m += ["--lr-decay-start-step", str(w + rng.randrange(0, 5)), "--lr-num-decay-steps",
                      str(rng.randrange(1, 10))]
        common = m + ["--batch-size", str(batch), "--eval-rows", str(rng.choice([0, 30])), "--print-every", "5",
                      "--seed", str(rng.randrange(1, 100)), "--threads", str(rng.choice([1, 1, 2])),
                      "--eval-split", rng.choice(["val", "val", "test", "train"]),
                      "--eval-batch-size", str(rng.choice([4096, 1, 7, 64]))] + length
        if rng.random() < 0.4:
            common += ["--eval-every", str(rng.randrange(1, 10))]
        if rng.random() < 0.2:
            common += ["--no-eval"]
        for k, v in (("shape", shape), ("model", kind), ("T", T), ("S", S), ("D", D),
                     ("length", length[0])):
            self.note(k, v)

        tag = "c%04d" % i
        ref_dir = os.path.join(self.dir, tag + "-sync")
        ref_args = common + ["--mode", "sync", "--trainers", str(T), "--servers", str(S)]
        cmd, rc, out = self.train(data, ref_dir, ref_args)
        if rc != 0:
            if rc == 2 and "bagpipe:" in out:
                self.note("refused", out.strip().splitlines()[-1][:100])
                return  # a usage error: the configuration is invalid (the message is listed at the end)
            if rc == 1 and "lower --learning-rate" in out:
                self.note("refused", "diverged (the loss is not a number)")
                return  # the drawn rate is too high for this model: every mode stops alike
            self.fail("sync exited %d" % rc, [cmd], out)
            return
        ref = (cmd, ref_dir)
        ref_evals = evals(out)
        m_it = re.search(r"trained (\d+) iterations", out)
        if m_it:
            iters_est = int(m_it.group(1))

        modes = []
        if T == 1:
            modes.append(("local", ["--mode", "local"]))
        modes.append(("sharded", ["--mode", "sharded", "--trainers", str(T), "--servers", "0"]))
        modes.append(("static", ["--mode", "static", "--trainers", str(T), "--servers", str(S),
                                 "--static-rows", str(rng.choice([0, 1, 5, 50, 100000]))]))
        asy = ["--mode", "async", "--trainers", str(T), "--servers", str(S), "--staleness", "0",
               "--cache-policy", rng.choice(["lru", "lfu"])]
        cache, probe = self.min_cache(data, common + asy)
        if cache is not None:
            modes.append(("async", asy + ["--cache-rows", str(cache + rng.choice([0, 0, 1, 20, 5000]))]))
        W = rng.choice([0, 1, 2, 3, 8])
        P = rng.choice([0, 1, 2, 3])
        bp = ["--mode", "bagpipe", "--trainers", str(T), "--servers", str(S), "--lookahead", str(W),
              "--prefetch", str(P), "--oracle-threads", str(rng.choice([1, 2]))]
        parts = rng.choice([1, 2])
        bp += ["--oracle-parts", str(parts)]
        self.note("W", W)
        self.note("P", P)
        self.note("oracle-parts", parts)
        cache, probe = self.min_cache(data, common + bp)
        if cache is not None:
            extra = rng.choice([0, 0, 1, 7])
            self.note("cache-over-min", extra)
            modes.append(("bagpipe", bp + ["--cache-rows", str(cache + extra)]))
        for name, margs in modes:
            d = os.path.join(self.dir, "%s-%s" % (tag, name))
            cmd, rc, out = self.train(data, d, common + margs)
            if rc != 0:
                self.fail("%s exited %d (sync passed)" % (name, rc), [ref[0], cmd], out)
                continue
            diff = same_model(ref_dir, d)
            if diff:
                self.fail("%s: %s from sync's" % (name, diff), [ref[0], cmd])
            elif evals(out) != ref_evals:
                self.fail("%s: the same model, other evaluation lines than sync's:\n  %s\n  %s" %
                          (name, "\n  ".join(ref_evals), "\n  ".join(evals(out))), [ref[0], cmd])
            self.note("mode", name)

        # A run that writes checkpoints (its model: sync's), and a run resumed from its newest
        # checkpoint (sync's model again).  The first run is either the whole run or a shorter one
        # (--iters STOP) that the resumed run continues, with --iters or --epochs as drawn.
        if iters_est >= 3 and rng.random() < 0.5:
            name, margs = rng.choice([x for x in modes if x[0] != "async"] +
                                     [("sync", ["--mode", "sync", "--trainers", str(T), "--servers", str(S)])])
            whole = rng.random() < 0.5
            stop = iters_est if whole else rng.randrange(2, iters_est)
            every = rng.randrange(1, stop)
            ck = os.path.join(self.dir, tag + "-ck")
            k = common.index(length[0])
            first = common[:k] + ["--iters", str(stop)] + common[k + 2:]
            part = os.path.join(self.dir, tag + "-part")
            cmd1, rc, out = self.train(data, part, first + margs + ["--checkpoint-every", str(every),
                                                                   "--checkpoint-dir", ck])
            self.note("checkpointed", "%s %s" % (name, "whole" if whole else "stopped"))
            if rc != 0:
                self.fail("%s with checkpoints exited %d" % (name, rc), [cmd1], out)
                return
            if whole:
                diff = same_model(ref_dir, part)
                if diff:
                    self.fail("%s writing checkpoints: %s from sync's" % (name, diff), [ref[0], cmd1])
            d = os.path.join(self.dir, tag + "-resumed")
            cmd2, rc, out = self.train(data, d, common + margs + ["--resume", ck])
            self.note("resumed", name)
            if rc != 0:
                self.fail("%s resumed exited %d" % (name, rc), [cmd1, cmd2], out)
            else:
                diff = same_model(ref_dir, d)
                if diff:
                    self.fail("%s resumed at %d: %s from sync's" % (name, (stop - 1) // every * every, diff),
                              [ref[0], cmd1, cmd2])
            # another mode from the same checkpoint: refused with a message naming the mode
            oname, oargs = rng.choice([x for x in modes if x[0] not in (name, "async")] or [modes[0]])
            if oname != name:
                cmd3, rc, out = self.train(data, os.path.join(self.dir, tag + "-other"),
                                           common + oargs + ["--resume", ck])
                self.note("resume-other", "%s->%s rc %d" % (name, oname, rc))
                if rc == 0:
                    diff = same_model(ref_dir, os.path.join(self.dir, tag + "-other"))
                    if diff:
                        self.fail("%s checkpoint resumed as %s: %s from sync's" % (name, oname, diff),
                                  [ref[0], cmd1, cmd3])
                elif "mode" not in out:
                    self.fail("%s checkpoint resumed as %s: refused without naming the mode" % (name, oname),
                              [cmd1, cmd3], out)
        for e in os.listdir(self.dir):
            if e.startswith(tag):
                shutil.rmtree(os.path.join(self.dir, e), ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build",
                                                  "bagpipe"),
                    help="the binary (default: the repository's build/bagpipe; copy it first if you rebuild while this "
                         "runs)")
    ap.add_argument("-n", type=int, default=20, help="configurations to draw (default 20)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dir", default=None, help="work directory (default: a new temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()
    args.bin = os.path.abspath(args.bin)
    made = args.dir is None
    args.dir = args.dir or tempfile.mkdtemp(prefix="equiv_fuzz.")
    os.makedirs(args.dir, exist_ok=True)
    fz = Fuzz(args)
    try:
        for i in range(args.n):
            rng = random.Random(args.seed * 1000003 + i)
            print("config %d" % i)
            sys.stdout.flush()
            fz.one(i, rng)
    finally:
        print("%d configurations, %d runs, %d failures" % (fz.configs, fz.runs, fz.failures))
        for k in sorted(fz.seen):
            print("  %s: %s" % (k, ", ".join(sorted(fz.seen[k]))))
        if made and not args.keep:
            shutil.rmtree(args.dir, ignore_errors=True)
    sys.exit(1 if fz.failures else 0)


if __name__ == "__main__":
    main()
