#!/usr/bin/env python3
"""PyTorch SDPA + an NCCL ring of K/V: the several-GPU baseline of
`mkx_perf attn`.

    torchrun --nproc_per_node P tests/perf/torch_ring_attn.py \\
        [--reps N] [--warmup N] [--shapes B,S,HQ,HKV,D ...]

What a user runs instead of MKX_Ring_attention on P GPUs (one rank per
GPU), serially: bf16, tensors stored [batch][seq][heads][head_dim] as MKX
stores them, S the sequence per rank, contiguous layout (rank r holds
positions r*S .. r*S+S-1).  P steps; at step t rank r holds the K/V chunk
of rank (r - t) mod P and computes SDPA of its Q against it (the causal
mask on the diagonal step only, chunks entirely in the future skipped),
merges the partial output with its LSE into an fp32 output and LSE, then
passes the chunk to rank r+1 (dist.batch_isend_irecv, K and V in one
buffer) and waits for rank r-1's.  SDPA is a fused backend that returns
the LSE (aten._scaled_dot_product_cudnn_attention, else
_scaled_dot_product_flash_attention), cuDNN first as in torch_sdpa.py.

Timed per shape and causal = 0, 1 (CUDA events, each call after a
barrier; medians over --reps, slowest rank):
  compute  the P steps' SDPA and merges alone (no exchange),
  ring     the P-1 exchanges alone,
  serial   the whole loop,
and TFLOP/s of the whole attention from the serial time,
4 * B * HQ * (P*S)^2 * D (causal: half).  Rank 0 prints one line each:
    ring B S HQ HKV D causal compute_ms ring_ms serial_ms tflops
(or "ring B S HQ HKV D causal unavailable <why>"), after a header line
"# torch_ring_attn.py: P ranks, ..." (mkx_perf attn --versus reads both).

First, once, the ring's result on small shapes (with and without GQA) is
checked against plain SDPA (math, fp32) over the gathered K/V:
    check <backend> B,S,HQ,HKV,D causal max|dO| max|dLSE| ok|FAILED
A backend is used only where it passed.  Inputs: uniform in [-1, 1), as
mkx_perf attn's.  NVLink multicast stays off (never use it on these
machines).
"""
import argparse
import math
import os
import sys

os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch_timing import timed  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

SHAPES = ["4,4096,16,16,128", "4,8192,16,16,128", "4,16384,16,16,128",
          "1,16384,32,8,128", "4,8192,16,16,64"]
# (B, S, HQ, HKV, D) of the correctness check: grouped and not
CHECK_SHAPES = [(2, 256, 4, 2, 128), (1, 384, 2, 2, 64)]
TOL_O, TOL_LSE = 2e-2, 1e-2


def sdpa_cudnn(q, k, v, causal, scale):
    r = torch.ops.aten._scaled_dot_product_cudnn_attention(
        q, k, v, None, True, 0.0, causal, False, scale=scale)
    return r[0], r[1]


def sdpa_flash(q, k, v, causal, scale):
    r = torch.ops.aten._scaled_dot_product_flash_attention(
        q, k, v, 0.0, causal, False, scale=scale)
    return r[0], r[1]


BACKENDS = [("cudnn", sdpa_cudnn), ("flash", sdpa_flash)]


class Ring:
    """One rank's buffers of the ring for one shape."""

    def __init__(self, b, s, hq, hkv, d, seed):
        self.b, self.s, self.hq, self.hkv, self.d = b, s, hq, hkv, d
        self.rank, self.p = dist.get_rank(), dist.get_world_size()
        self.scale = 1.0 / math.sqrt(d)
        g = torch.Generator(device="cuda")
        g.manual_seed(seed)
        dev, bf = "cuda", torch.bfloat16

        def uniform(*shape):
            x = torch.empty(*shape, device=dev, dtype=torch.float32)
            return x.uniform_(-1, 1, generator=g).to(bf)

        self.q = uniform(b, s, hq, d)
        self.kv = uniform(2, b, s, hkv, d)  # this rank's K and V
        # chunks received: two, so that the one sent is never the one written
        self.bufs = [torch.empty_like(self.kv) for _ in range(2)]
        self.acc = torch.empty(b, s, hq, d, device=dev, dtype=torch.float32)
        self.lse = torch.empty(b, hq, s, device=dev, dtype=torch.float32)
        self.o = torch.empty(b, s, hq, d, device=dev, dtype=bf)
        self.qt = self.q.transpose(1, 2)  # [B][H][S][D] views, no copy
        self.acc_t = self.acc.transpose(1, 2)
        self.o_t = self.o.transpose(1, 2)

    def step(self, sdpa, t, kv, causal):
        """SDPA of Q against chunk (rank - t) mod p, merged in fp32."""
        if causal and (self.rank - t) % self.p > self.rank:
            return  # the chunk is entirely in the future
        out, lse = sdpa(self.qt, kv[0].transpose(1, 2), kv[1].transpose(1, 2),
                        bool(causal) and t == 0, self.scale)
        # flash gives [B][H][S], cuDNN [B][H][S][1]
        lse = lse.reshape(self.b, self.hq, self.s)
        if t == 0:  # the own chunk, always computed first
            self.acc_t.copy_(out)
            self.lse.copy_(lse)
            return
        # acc += w (out - acc), w = exp(lse) / (exp(lse) + exp(lse_acc)),
        # lse_acc = log(exp(lse_acc) + exp(lse)), in the stable form
        # ring-flash-attention and PyTorch's context parallelism use
        w = torch.sigmoid(lse - self.lse).unsqueeze(-1)
        self.acc_t.lerp_(out.float(), w)
        self.lse.sub_(F.logsigmoid(self.lse - lse))

    def exchange(self, src, dst):
        ops = [dist.P2POp(dist.isend, src, (self.rank + 1) % self.p),
               dist.P2POp(dist.irecv, dst, (self.rank - 1) % self.p)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()

    def forward(self, sdpa, causal, compute=True, exchange=True):
        """The serial ring (both), its SDPA steps alone (compute: on the
        own chunk, same steps and masks), or its exchanges alone."""
        cur = self.kv
        for t in range(self.p):
            if compute:
                self.step(sdpa, t, cur, causal)
            if exchange and t < self.p - 1:
                nxt = self.bufs[t % 2]
                self.exchange(cur, nxt)
                cur = nxt
        if compute:
            self.o.copy_(self.acc)


def agree_min(x):
    t = torch.tensor([x], device="cuda", dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return t.item()


def agree_max(xs):
    t = torch.tensor(xs, device="cuda", dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def say(*a):
    if dist.get_rank() == 0:
        print(*a, flush=True)


def check(name, sdpa, shape):
    """The ring against plain SDPA over the gathered K/V: passed (every
    rank agrees), or None where the backend does not run this shape."""
    b, s, hq, hkv, d = shape
    rank, p = dist.get_rank(), dist.get_world_size()
    passed = True
    for causal in (0, 1):
        r = Ring(b, s, hq, hkv, d, seed=7 + rank)
        try:
            r.forward(sdpa, causal)
            torch.cuda.synchronize()
            ran = 1
        except RuntimeError:
            ran = 0
        if not agree_min(ran):
            return None
        full = torch.empty(p * r.kv.numel(), device="cuda", dtype=r.kv.dtype)
        dist.all_gather_into_tensor(full, r.kv.reshape(-1))
        # [P][2][B][S][HKV][D] -> K, V as [B][HQ][P*S][D], heads repeated
        kv = full.view(p, *r.kv.shape).permute(1, 2, 0, 3, 4, 5).reshape(
            2, b, p * s, hkv, d)
        kf, vf = (x.float().transpose(1, 2).repeat_interleave(hq // hkv, 1)
                  for x in kv)
        qf = r.q.float().transpose(1, 2)
        mask = None
        if causal:
            qpos = rank * s + torch.arange(s, device="cuda")
            mask = torch.arange(p * s, device="cuda")[None, :] <= qpos[:, None]
        with sdpa_kernel([SDPBackend.MATH]):
            ref = F.scaled_dot_product_attention(qf, kf, vf, attn_mask=mask,
                                                 scale=r.scale)
        scores = qf @ kf.transpose(-1, -2) * r.scale
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        ref_lse = torch.logsumexp(scores, dim=-1)
        eo, el = agree_max([
            (r.o.float().transpose(1, 2) - ref).abs().max().item(),
            (r.lse - ref_lse).abs().max().item()])
        ok = eo <= TOL_O and el <= TOL_LSE
        passed = passed and ok
        say(f"check {name} {','.join(map(str, shape))} {causal} {eo:.3e} "
            f"{el:.3e} {'ok' if ok else 'FAILED'}")
    return passed


def bench(shape, verified, a):
    b, s, hq, hkv, d = shape
    rank, p = dist.get_rank(), dist.get_world_size()
    tags = [f"ring {b} {s} {hq} {hkv} {d} {c}" for c in (0, 1)]
    try:
        r = Ring(b, s, hq, hkv, d, seed=1000 * (rank + 1))
        ok = 1
    except torch.cuda.OutOfMemoryError:
        ok = 0
    if not agree_min(ok):
        for tag in tags:
            say(f"{tag} unavailable out of GPU memory")
        return
    # the first backend, in the order of BACKENDS, that passed the check on
    # this kind of shape and runs this one on every rank
    use = None
    for name, sdpa in BACKENDS:
        if not verified.get((name, hq != hkv)):
            continue
        try:
            for causal in (0, 1):
                r.step(sdpa, 0, r.kv, causal)
            torch.cuda.synchronize()
            ran = 1
        except RuntimeError:
            ran = 0
        if agree_min(ran):
            use = (name, sdpa)
            break
    if use is None:
        for tag in tags:
            say(f"{tag} unavailable no checked SDPA backend with LSE")
        return
    name, sdpa = use
    say(f"# {b},{s},{hq},{hkv},{d}: SDPA backend {name}")
    for causal, tag in zip((0, 1), tags):
        times = [timed(lambda: r.forward(sdpa, causal, exchange=False),
                       a.reps, a.warmup, dist.barrier),
                 timed(lambda: r.forward(sdpa, causal, compute=False),
                       a.reps, a.warmup, dist.barrier),
                 timed(lambda: r.forward(sdpa, causal),
                       a.reps, a.warmup, dist.barrier)]
        compute, ring, serial = agree_max(times)
        flops = 4.0 * b * hq * (p * s) ** 2 * d / (2 if causal else 1)
        say(f"{tag} {compute:.4f} {ring:.4f} {serial:.4f} "
            f"{flops / serial / 1e9:.1f}")
    del r
    torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--shapes", nargs="*", default=SHAPES)
    a = ap.parse_args()
    shapes = []
    for v in a.shapes:
        sh = tuple(int(x) for x in v.split(","))
        if len(sh) != 5 or min(sh) < 1 or sh[2] % sh[3]:
            ap.error("--shapes takes B,S,HQ,HKV,D (HQ a multiple of HKV): "
                     + v)
        shapes.append(sh)
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    p = dist.get_world_size()
    say(f"# torch_ring_attn.py: {p} ranks, PyTorch {torch.__version__}, "
        f"{p} x {torch.cuda.get_device_name()}, bf16, medians of {a.reps} "
        "(ms, slowest rank); compute: the SDPA steps and LSE merges alone, "
        "ring: the K/V exchanges alone, serial: the whole loop")
    verified = {}
    for name, sdpa in BACKENDS:
        for shape in CHECK_SHAPES:
            passed = check(name, sdpa, shape)
            if passed is None:
                say(f"check {name} {','.join(map(str, shape))} unavailable")
            verified[(name, shape[2] != shape[3])] = bool(passed)
    if not any(verified.values()):
        say("# no SDPA backend with LSE gave the right result: no baseline")
        dist.destroy_process_group()
        sys.exit(1)
    for shape in shapes:
        bench(shape, verified, a)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
