#!/usr/bin/env python3
"""PyTorch scaled_dot_product_attention on the shapes of `mkx_perf attn`.

    python3 tests/perf/torch_sdpa.py [--reps N] [--shapes B,S,HQ,HKV,D ...]

One GPU, bf16, forward.  Tensors are stored as MKX stores them,
[batch][seq][heads][head_dim], and handed to SDPA as [batch][heads][seq]
views (no copy).  For each backend PyTorch has here (cuDNN, flash) and
causal = 0, 1: the median time over --reps and TFLOP/s with
4 * batch * heads_q * seq^2 * head_dim FLOPs (causal: half).  One line per
measurement:  sdpa <backend> B S HQ HKV D causal ms tflops
(or "... unavailable <why>").
"""
import argparse

import torch
import torch.nn.functional as F
from torch_timing import timed
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = ["4,4096,16,16,128", "4,8192,16,16,128", "4,16384,16,16,128",
          "1,16384,32,8,128", "4,8192,16,16,64"]
BACKENDS = [("cudnn", SDPBackend.CUDNN_ATTENTION),
            ("flash", SDPBackend.FLASH_ATTENTION)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--shapes", nargs="*", default=SHAPES)
    a = ap.parse_args()
    for shape in a.shapes:
        b, s, hq, hkv, d = (int(x) for x in shape.split(","))
        q = torch.randn(b, s, hq, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, s, hkv, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(b, s, hkv, d, device="cuda", dtype=torch.bfloat16)
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
        for name, backend in BACKENDS:
            for causal in (0, 1):
                tag = f"sdpa {name} {b} {s} {hq} {hkv} {d} {causal}"
                try:
                    with sdpa_kernel([backend]):
                        def fn():
                            return F.scaled_dot_product_attention(
                                qt, kt, vt, is_causal=bool(causal),
                                enable_gqa=hq != hkv)
                        ms = timed(fn, a.reps)
                except RuntimeError as e:
                    print(f"{tag} unavailable {str(e).splitlines()[0][:80]}")
                    continue
                flops = 4.0 * b * hq * s * s * d / (2 if causal else 1)
                print(f"{tag} {ms:.4f} {flops / ms / 1e9:.1f}", flush=True)


if __name__ == "__main__":
    main()
