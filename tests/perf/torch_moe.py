#!/usr/bin/env python3
"""A MoE layer in PyTorch around torch._grouped_mm, on the shapes of
`mkx_perf moe`.

    python3 tests/perf/torch_moe.py [--reps N] [--shapes T,H,E,K,F ...]
                                    [--small]

One GPU, bf16, forward.  Shapes T,H,E,K,F: tokens, hidden size, experts,
experts per token (top-k), FFN size of one expert; the defaults are those
of `mkx_perf moe` (--small: its small list; --shapes replaces the list).
For each shape: X [T][H], W1 [E][H][2F] (gate columns, then up columns),
W2 [E][F][H], uniform in [-1, 1]; K distinct uniformly random experts per
token (int32) and random positive gate weights summing to 1 (fp32), the
buffers `mkx_perf moe` hands to MKX_Moe_layer.  The chain a PyTorch user
runs for the layer: a stable argsort of the flat expert ids, the token rows
gathered in that order, rows per expert counted and summed into int32 end
offsets (torch.cumsum), torch._grouped_mm by W1, silu(gate) * up,
torch._grouped_mm by W2, each row scaled by its gate weight and added back
to its token in fp32 (index_add_), cast to bf16.  Timed: the whole chain,
and each grouped GEMM alone on the chain's own operands; median over --reps
(CUDA events, after warm-up).  One line per shape:
    moe T H E K F chain_ms w1_ms w2_ms
    moe T H E K F unavailable <why>
read back by `mkx_perf moe --versus FILE`, which computes the GEMMs'
TFLOP/s from w1_ms and w2_ms.
"""
import argparse

import torch
import torch.nn.functional as F
from torch_timing import timed

SHAPES = ["4096,7168,256,8,2048", "4096,4096,8,2,14336"]
SMALL = ["1024,2048,8,2,4096", "512,1024,16,4,512"]


def uniform(*size):
    # in place: the weights are several GB, a temporary would double them
    return torch.empty(*size, device="cuda",
                       dtype=torch.bfloat16).uniform_(-1, 1)


def routing(t, e, k):
    """K distinct experts per token, every K-subset equally likely (the top
    K of uniform scores), and positive gate weights summing to 1."""
    ids = torch.rand(t, e, device="cuda").topk(k, dim=1).indices.int()
    w = torch.rand(t, k, device="cuda") + 1e-3
    return ids, w / w.sum(dim=1, keepdim=True)


def permute(ids, e):
    """The rows in expert order: the sort order of the flat slots, the
    token of each, and the int32 end offset of each expert's rows."""
    flat = ids.view(-1)
    order = torch.argsort(flat, stable=True)
    # torch.bincount would read the largest id back to the host;
    # scatter_add_ keeps the chain on the GPU
    counts = torch.zeros(e, device="cuda", dtype=torch.int32)
    counts.scatter_add_(0, flat.long(), torch.ones_like(flat))
    offs = torch.cumsum(counts, 0, dtype=torch.int32)
    return order, order // ids.shape[1], offs


def chain(x, ids, w, w1, w2):
    """The layer: out[t] = sum_j w[t][j] * FFN_{ids[t][j]}(x[t])."""
    e, f = w1.shape[0], w2.shape[1]
    order, tok, offs = permute(ids, e)
    h = torch._grouped_mm(x.index_select(0, tok), w1, offs=offs)
    act = F.silu(h[:, :f]) * h[:, f:]
    y = torch._grouped_mm(act, w2, offs=offs)
    y = y.float() * w.view(-1)[order].unsqueeze(1)
    out = torch.zeros(x.shape, device="cuda", dtype=torch.float32)
    return out.index_add_(0, tok, y).to(torch.bfloat16)


def measure(shape, reps):
    """chain_ms, w1_ms, w2_ms of one shape."""
    t, hid, e, k, f = shape
    x = uniform(t, hid)
    w1 = uniform(e, hid, 2 * f)
    w2 = uniform(e, f, hid)
    ids, w = routing(t, e, k)
    chain_ms = timed(lambda: chain(x, ids, w, w1, w2), reps)
    _, tok, offs = permute(ids, e)
    xs = x.index_select(0, tok)
    h = torch._grouped_mm(xs, w1, offs=offs)
    act = (F.silu(h[:, :f]) * h[:, f:]).contiguous()
    del h
    w1_ms = timed(lambda: torch._grouped_mm(xs, w1, offs=offs), reps)
    w2_ms = timed(lambda: torch._grouped_mm(act, w2, offs=offs), reps)
    return chain_ms, w1_ms, w2_ms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--shapes", nargs="+")
    ap.add_argument("--small", action="store_true")
    a = ap.parse_args()
    shapes = (SMALL if a.small else []) + (a.shapes or [])
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    print(f"# torch_moe.py: torch {torch.__version__} on {gpu or 'no GPU'}",
          flush=True)
    missing = ("no CUDA device" if gpu is None else
               None if hasattr(torch, "_grouped_mm") else
               f"torch {torch.__version__} has no torch._grouped_mm")
    for text in shapes or SHAPES:
        shape = tuple(int(v) for v in text.split(","))
        tag = "moe " + " ".join(str(v) for v in shape)
        if missing:
            print(f"{tag} unavailable {missing}", flush=True)
            continue
        try:
            ms = measure(shape, a.reps)
        except RuntimeError as err:  # torch.cuda.OutOfMemoryError included
            why = (str(err).splitlines() or ["?"])[0][:80]
            print(f"{tag} unavailable {why}", flush=True)
            continue
        finally:
            torch.cuda.empty_cache()
        print(f"{tag} {ms[0]:.4f} {ms[1]:.4f} {ms[2]:.4f}", flush=True)


if __name__ == "__main__":
    main()
