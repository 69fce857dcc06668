#!/usr/bin/python3
"""Yardstick for `bench/`: DLRM training throughput in PyTorch on this machine.

The DLRM reference's model (EmbeddingBag with sparse gradients, dot interaction, ReLU MLPs,
BCE, SGD) on the Criteo Kaggle configuration, fed pre-generated tensors (so data loading costs
nothing), at the thread counts given.  Prints one JSON line per (batch, threads):
  {"impl":"pytorch","blas":K,"blas_threads":M,"batch":B,"threads":N,"samples_per_s":X,"ms_per_iter":Y}
K is the OpenBLAS core whose kernels PyTorch's products use: Debian's torch does its float32
GEMMs through the system BLAS (OpenBLAS), so OPENBLAS_CORETYPE selects its kernels as it does
bagpipe's ("unknown" when the BLAS is not OpenBLAS).  N is PyTorch's own thread count
(torch.set_num_threads), M the OPENBLAS_NUM_THREADS it ran under ("default" when unset): the two
pools are separate, and the fastest pair depends on the batch.

  /usr/bin/python3 tools/torch_dlrm_bench.py --batch 128,2048 --threads 1,2 --iters 50
"""
import argparse
import ctypes
import json
import os
import sys
import time

import torch

KAGGLE = [1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194, 27, 14992,
          5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572]


def blas_core():
    try:
        lib = ctypes.CDLL("libblas.so.3")
        lib.openblas_get_corename.restype = ctypes.c_char_p
        return lib.openblas_get_corename().decode()
    except (OSError, AttributeError):
        return "unknown"


class DLRM(torch.nn.Module):
    def __init__(self, card, d, bot, top):
        super().__init__()
        self.F = len(card)
        self.emb = torch.nn.ModuleList([torch.nn.EmbeddingBag(n, d, mode="sum", sparse=True) for n in card])
        layers = []
        for i in range(len(bot) - 1):
            layers += [torch.nn.Linear(bot[i], bot[i + 1]), torch.nn.ReLU()]
        self.bot = torch.nn.Sequential(*layers)
        n_int = d + (self.F + 1) * self.F // 2
        dims = [n_int] + top
        layers = []
        for i in range(len(dims) - 1):
            layers.append(torch.nn.Linear(dims[i], dims[i + 1]))
            if i < len(dims) - 2:
                layers.append(torch.nn.ReLU())
        self.top = torch.nn.Sequential(*layers)
        li = [i for i in range(self.F + 1) for j in range(i)]
        lj = [j for i in range(self.F + 1) for j in range(i)]
        self.li, self.lj = torch.tensor(li), torch.tensor(lj)

    def forward(self, dense, offsets, ids):
        z = self.bot(dense)
        e = [self.emb[f](ids[f], offsets) for f in range(self.F)]
        T = torch.stack([z] + e, dim=1)
        Z = torch.bmm(T, T.transpose(1, 2))
        x = torch.cat([z, Z[:, self.li, self.lj]], dim=1)
        return self.top(x).squeeze(1)


def zipf_ids(n_rows, size, gen):
    # Power-law ranks scattered over the id space, like the project's synthetic data.
    u = torch.rand(size, generator=gen, dtype=torch.float64)
    a = 1.1
    r = ((n_rows + 1.0) ** (1 - a) - 1) * u + 1
    rank = (r ** (1.0 / (1 - a))).long().clamp_(1, n_rows) - 1
    return (rank * 2654435761) % n_rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", default="128,2048")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--lr", type=float, default=0.1)
    a = ap.parse_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    m = DLRM(KAGGLE, 16, [13, 512, 256, 64, 16], [512, 256, 1])
    opt = torch.optim.SGD(m.parameters(), lr=a.lr)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    for B in [int(x) for x in a.batch.split(",")]:
        n = a.iters + a.warmup
        data = []
        for _ in range(n):
            dense = torch.log1p(torch.randint(0, 100, (B, 13)).float())
            ids = [zipf_ids(c, B, gen) for c in KAGGLE]
            label = (torch.rand(B, generator=gen) < 0.25).float()
            data.append((dense, ids, label))
        offsets = torch.arange(B)
        for th in [int(x) for x in a.threads.split(",")]:
            torch.set_num_threads(th)
            for i in range(n):
                if i == a.warmup:
                    t0 = time.perf_counter()
                dense, ids, label = data[i]
                opt.zero_grad()
                loss = loss_fn(m(dense, offsets, ids), label)
                loss.backward()
                opt.step()
            dt = time.perf_counter() - t0
            print(json.dumps({"impl": "pytorch", "torch": torch.__version__, "blas": blas_core(),
                              "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "default"),
                              "batch": B, "threads": th,
                              "samples_per_s": round(a.iters * B / dt, 1),
                              "ms_per_iter": round(1000 * dt / a.iters, 3)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
