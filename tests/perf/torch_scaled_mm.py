#!/usr/bin/env python3
"""torch._scaled_mm on the shapes of `mkx_perf gemm --dtype fp8`.

    python3 tests/perf/torch_scaled_mm.py [--reps N] [--shapes MxNxK ...]

One GPU: A M x K row-major e4m3, B stored N x K (a weight as in
nn.Linear, handed over as its K x N transposed view, no copy), per-tensor
fp32 scales, C bf16, as a PyTorch user writes an fp8 linear layer; with
use_fast_accum off (the promoted accumulation MKX's fp8 GEMM and the
cuBLASLt baseline use) and on.  The median time over --reps and TFLOP/s
with 2 * M * N * K FLOPs.  One line per measurement:
    scaled_mm <accum> M N K ms tflops     (accum: promoted or fast)
(or "... unavailable <why>").
"""
import argparse

import torch
from torch_timing import timed

SHAPES = [f"{m}x{n}x{k}" for m in (4096, 8192, 16384)
          for n, k in ((8192, 8192), (28672, 8192), (8192, 28672))]


def e4m3(rows, cols):
    """Values of magnitude 0.25 to 1.875, as mkx_perf fills its operands."""
    x = torch.empty(rows, cols, device="cuda").uniform_(0.25, 1.875)
    sign = torch.randint(0, 2, (rows, cols), device="cuda") * 2 - 1
    return (x * sign).to(torch.float8_e4m3fn)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--shapes", nargs="*", default=SHAPES)
    a = ap.parse_args()
    one = torch.ones((), device="cuda", dtype=torch.float32)
    for shape in a.shapes:
        m, n, k = (int(x) for x in shape.split("x"))
        A, W = e4m3(m, k), e4m3(n, k)
        for name, fast in (("promoted", False), ("fast", True)):
            tag = f"scaled_mm {name} {m} {n} {k}"
            try:
                def fn():
                    return torch._scaled_mm(A, W.t(), scale_a=one,
                                            scale_b=one,
                                            out_dtype=torch.bfloat16,
                                            use_fast_accum=fast)
                ms = timed(fn, a.reps)
            except (RuntimeError, TypeError, AttributeError) as e:
                print(f"{tag} unavailable {str(e).splitlines()[0][:80]}")
                continue
            print(f"{tag} {ms:.4f} {2.0 * m * n * k / ms / 1e9:.1f}",
                  flush=True)
        del A, W


if __name__ == "__main__":
    main()
