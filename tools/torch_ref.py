#!/usr/bin/env python3
"""Reference run of a small DLRM in PyTorch, for the C model's reference test.

Builds the DLRM of the reference implementation (bottom MLP with ReLU, pairwise dot interaction
without self-interaction concatenated with the bottom output, top MLP with ReLU except the last
layer, BCE on the logit), draws initial weights and batches from a fixed seed, and runs several
SGD steps on dense and embedding parameters, optionally under the DLRM reference's learning-rate
schedule (warmup, quadratic decay, then the last rate held).  Writes everything the C side needs
to repeat the run into one tensor file:

  config                 [Nd, F, D, B, steps] and lr*1e6 (float32)
  lr_schedule            [warmup, decay start, decay steps]
  lr                     (steps)         the rate each step's update used
  card                   (F)
  bot_dims, top_dims     layer sizes
  init.<param>           initial values of every parameter
  batch.dense            (steps, B, Nd)
  batch.ids              (steps, B, F)   ids as exact float32
  batch.label            (steps, B)
  loss                   (steps)         loss of each step before its update
  grad0.<param>          gradient of every parameter at step 0 (embeddings: full tables)
  final.<param>          parameters after all steps

Parameters are named bot.<i>.weight / bot.<i>.bias / top.<i>.weight / top.<i>.bias / emb.<f>;
weights are (out, in) as in torch.nn.Linear.

Tensor file format: records of  b"<name>\n<ndim> <d0> <d1> ...\n"  followed by the float32
little-endian data; the file starts with b"bagpipe-tensors 1\n".
"""
import argparse
import struct
import sys

import torch


def write_tensors(path, tensors):
    with open(path, "wb") as f:
        f.write(b"bagpipe-tensors 1\n")
        for name, t in tensors:
            t = t.detach().to(torch.float32).contiguous()
            dims = list(t.shape)
            f.write(name.encode() + b"\n")
            f.write((" ".join([str(len(dims))] + [str(d) for d in dims]) + "\n").encode())
            f.write(t.numpy().astype("<f4").tobytes())


class DLRM(torch.nn.Module):
    def __init__(self, nd, card, d, bot, top):
        super().__init__()
        self.F, self.D = len(card), d
        self.emb = torch.nn.ModuleList([torch.nn.Embedding(n, d) for n in card])
        self.bot = torch.nn.ModuleList([torch.nn.Linear(bot[i], bot[i + 1]) for i in range(len(bot) - 1)])
        n_int = d + (self.F + 1) * self.F // 2
        dims = [n_int] + top
        self.top = torch.nn.ModuleList([torch.nn.Linear(dims[i], dims[i + 1]) for i in range(len(dims) - 1)])

    def forward(self, dense, ids):
        z = dense
        for lin in self.bot:
            z = torch.relu(lin(z))
        e = [self.emb[f](ids[:, f]) for f in range(self.F)]
        T = torch.stack([z] + e, dim=1)                 # (B, F+1, D)
        Z = torch.bmm(T, T.transpose(1, 2))             # (B, F+1, F+1)
        li = [i for i in range(self.F + 1) for j in range(i)]
        lj = [j for i in range(self.F + 1) for j in range(i)]
        x = torch.cat([z, Z[:, li, lj]], dim=1)
        for k, lin in enumerate(self.top):
            x = lin(x)
            if k < len(self.top) - 1:
                x = torch.relu(x)
        return x.squeeze(1)                             # logits (B)

    def named_params(self):
        out = []
        for i, l in enumerate(self.bot):
            out += [(f"bot.{i}.weight", l.weight), (f"bot.{i}.bias", l.bias)]
        for i, l in enumerate(self.top):
            out += [(f"top.{i}.weight", l.weight), (f"top.{i}.bias", l.bias)]
        for f, e in enumerate(self.emb):
            out.append((f"emb.{f}", e.weight))
        return out


class DlrmSchedule:
    """The DLRM reference's learning-rate policy, stepped as its scheduler is: step i (1-based)
    is the one the i-th update runs at; warmup while i < W, quadratic decay over [S, S + N) (at
    least 1e-7), and with N > 0 the last rate of those phases held outside them."""

    def __init__(self, base, warmup, decay_start, decay_steps):
        self.base, self.w, self.s, self.n = base, warmup, decay_start, decay_steps
        self.last = base

    def rate(self, i):
        if i < self.w:
            self.last = self.base * (1.0 - (self.w - i) / self.w)
            return self.last
        if self.s <= i < self.s + self.n:
            scale = ((self.n - (i - self.s)) / self.n) ** 2
            self.last = max(1e-7, self.base * scale)
            return self.last
        return self.last if self.n > 0 else self.base


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--lr-warmup", type=int, default=0)
    ap.add_argument("--lr-decay-start", type=int, default=0)
    ap.add_argument("--lr-decay-steps", type=int, default=0)
    a = ap.parse_args()

    torch.manual_seed(a.seed)
    torch.set_num_threads(1)
    nd, card, d = 5, [7, 11, 4], 4
    bot, top = [nd, 8, d], [8, 1]
    m = DLRM(nd, card, d, bot, top)
    # Initialisation as the DLRM reference: N(0, sqrt(2/(in+out))) weights, N(0, sqrt(1/out))
    # biases, embeddings U(-sqrt(1/n), sqrt(1/n)).
    with torch.no_grad():
        for l in list(m.bot) + list(m.top):
            o, i = l.weight.shape
            l.weight.normal_(0.0, (2.0 / (i + o)) ** 0.5)
            l.bias.normal_(0.0, (1.0 / o) ** 0.5)
        for f, e in enumerate(m.emb):
            r = (1.0 / card[f]) ** 0.5
            e.weight.uniform_(-r, r)

    B, S, F = a.batch, a.steps, len(card)
    dense = torch.log1p(torch.randint(0, 50, (S, B, nd)).float())
    ids = torch.stack([torch.randint(0, c, (S, B)) for c in card], dim=2)
    label = (torch.rand(S, B) < 0.3).float()

    out = [("config", torch.tensor([nd, F, d, B, S, a.lr * 1e6], dtype=torch.float32)),
           ("card", torch.tensor(card, dtype=torch.float32)),
           ("bot_dims", torch.tensor(bot, dtype=torch.float32)),
           ("top_dims", torch.tensor(top, dtype=torch.float32)),
           ("lr_schedule", torch.tensor([a.lr_warmup, a.lr_decay_start, a.lr_decay_steps], dtype=torch.float32))]
    out += [("init." + n, p.clone()) for n, p in m.named_params()]
    out += [("batch.dense", dense), ("batch.ids", ids.float()), ("batch.label", label)]

    opt = torch.optim.SGD(m.parameters(), lr=a.lr)
    sched = DlrmSchedule(a.lr, a.lr_warmup, a.lr_decay_start, a.lr_decay_steps)
    losses, rates = [], []
    for s in range(S):
        rates.append(sched.rate(s + 1))
        for g in opt.param_groups:
            g["lr"] = rates[-1]
        opt.zero_grad()
        logit = m(dense[s], ids[s])
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logit, label[s])
        loss.backward()
        losses.append(loss.item())
        if s == 0:
            out += [("grad0." + n, p.grad.clone()) for n, p in m.named_params()]
        opt.step()
    out.append(("loss", torch.tensor(losses)))
    out.append(("lr", torch.tensor(rates)))
    out += [("final." + n, p.clone()) for n, p in m.named_params()]
    write_tensors(a.out, out)
    print(f"wrote {a.out}: losses " + " ".join(f"{x:.6f}" for x in losses))
    return 0


if __name__ == "__main__":
    sys.exit(main())
