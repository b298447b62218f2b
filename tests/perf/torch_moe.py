#!/usr/bin/env python3
"""A MoE layer in PyTorch around torch._grouped_mm, on the shapes of
`mkx_perf moe`.

    python3 tests/perf/torch_moe.py [--reps N] [--shapes T,H,E,K,F ...]
                                    [--small] [--fp8]

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

--fp8: also the chain in fp8 with torch._scaled_grouped_mm (where this
torch has it), on e4m3 weights stored [E][N][K] (K contiguous: the layout
its column-major right operand takes) with one fp32 scale per expert and
column, and e4m3 tokens with one scale per token (rounded before the
timing: MKX's fp8 layer takes them so): the gathered rows by W1 (out
bf16), SwiGLU, the activation rounded to e4m3 per row (its largest
magnitude over 448), by W2, then as above.  Its scales are per row where
MKX's take 128 x 128 blocks (the nearest torch offers on Hopper), and it
sums K in the tensor cores' own precision (use_fast_accum) where MKX adds
each 128-deep block in fp32.  Lines
    moe8 T H E K F chain_ms w1_ms w2_ms
    moe8 T H E K F unavailable <why>
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


def rowwise_e4m3(x):
    """x (rows x cols) as e4m3 and one fp32 scale per row, x ~ q * s."""
    amax = x.abs().amax(dim=1, keepdim=True).float().clamp(min=1e-30)
    s = amax / 448.0
    return (x.float() / s).to(torch.float8_e4m3fn), s.squeeze(1)


def random_e4m3(*size):
    """Random e4m3 values of either sign, made in uint8 in place (the
    weights are gigabytes): the low bit cleared, so no NaN (0x7f, 0xff)."""
    b = torch.randint(0, 256, size, device="cuda", dtype=torch.uint8)
    return b.bitwise_and_(0xFE).view(torch.float8_e4m3fn)


def gmm8(a, sa, wt, sw, offs):
    """Rows a (e4m3, scales sa) by each expert's wt [E][N][K] (scales sw
    [E][N]), out bf16."""
    return torch._scaled_grouped_mm(a, wt.transpose(-2, -1), sa, sw,
                                    offs=offs, out_dtype=torch.bfloat16,
                                    use_fast_accum=True)


def take_rows(q, idx):
    """Rows idx of an e4m3 matrix (index_select through bytes)."""
    return q.view(torch.uint8).index_select(0, idx).view(q.dtype)


def chain8(xq, xs, ids, w, w1t, s1, w2t, s2):
    """The layer in fp8 on e4m3 tokens xq (scales xs): w1t [E][2F][H], w2t
    [E][H][F] e4m3."""
    e, f = w1t.shape[0], w2t.shape[2]
    order, tok, offs = permute(ids, e)
    h = gmm8(take_rows(xq, tok), xs.index_select(0, tok), w1t, s1, offs)
    aq, as_ = rowwise_e4m3(F.silu(h[:, :f]) * h[:, f:])
    y = gmm8(aq, as_, w2t, s2, offs)
    y = y.float() * w.view(-1)[order].unsqueeze(1)
    out = torch.zeros(xq.shape, device="cuda", dtype=torch.float32)
    return out.index_add_(0, tok, y).to(torch.bfloat16)


def measure8(shape, reps):
    """chain_ms, w1_ms, w2_ms of one shape in fp8."""
    t, hid, e, k, f = shape
    x = uniform(t, hid)
    w1t, w2t = random_e4m3(e, 2 * f, hid), random_e4m3(e, hid, f)
    s1 = torch.rand(e, 2 * f, device="cuda") * 1e-2 + 1e-3
    s2 = torch.rand(e, hid, device="cuda") * 1e-2 + 1e-3
    ids, w = routing(t, e, k)
    xq, xs = rowwise_e4m3(x)
    chain_ms = timed(lambda: chain8(xq, xs, ids, w, w1t, s1, w2t, s2), reps)
    _, tok, offs = permute(ids, e)
    a, sa = take_rows(xq, tok), xs.index_select(0, tok)
    h = gmm8(a, sa, w1t, s1, offs)
    aq, as_ = rowwise_e4m3(F.silu(h[:, :f]) * h[:, f:])
    del h
    w1_ms = timed(lambda: gmm8(a, sa, w1t, s1, offs), reps)
    w2_ms = timed(lambda: gmm8(aq, as_, w2t, s2, offs), reps)
    return chain_ms, w1_ms, w2_ms


def report(tag, run, missing):
    """One line: tag and the three times, or why not."""
    if missing:
        print(f"{tag} unavailable {missing}", flush=True)
        return
    try:
        ms = run()
    # torch.cuda.OutOfMemoryError is a RuntimeError; argument checks raise
    # ValueError
    except (RuntimeError, ValueError) as err:
        why = (str(err).splitlines() or ["?"])[0][:80]
        print(f"{tag} unavailable {why}", flush=True)
        return
    finally:
        torch.cuda.empty_cache()
    print(f"{tag} {ms[0]:.4f} {ms[1]:.4f} {ms[2]:.4f}", flush=True)


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
    ap.add_argument("--fp8", action="store_true")
    a = ap.parse_args()
    shapes = (SMALL if a.small else []) + (a.shapes or [])
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    print(f"# torch_moe.py: torch {torch.__version__} on {gpu or 'no GPU'}",
          flush=True)
    missing = ("no CUDA device" if gpu is None else
               None if hasattr(torch, "_grouped_mm") else
               f"torch {torch.__version__} has no torch._grouped_mm")
    missing8 = missing or (
        None if hasattr(torch, "_scaled_grouped_mm") else
        f"torch {torch.__version__} has no torch._scaled_grouped_mm")
    for text in shapes or SHAPES:
        shape = tuple(int(v) for v in text.split(","))
        dims = " ".join(str(v) for v in shape)
        report(f"moe {dims}", lambda: measure(shape, a.reps), missing)
        if a.fp8:
            report(f"moe8 {dims}", lambda: measure8(shape, a.reps), missing8)


if __name__ == "__main__":
    main()
