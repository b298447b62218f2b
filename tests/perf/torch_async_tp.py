#!/usr/bin/env python3
"""PyTorch async tensor parallelism on the shapes of `mkx_perf tp`.

    TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 \
        torchrun --nproc_per_node 2 tests/perf/torch_async_tp.py [--full] [--reps N]

Times, per shape, torch.ops.symm_mem.fused_all_gather_matmul and
fused_matmul_reduce_scatter (async TP) and the serial NCCL + matmul
versions, bf16, weight stored N x K (as nn.Linear).  M, N, K are the global
GEMM sizes, as in `mkx_perf tp`.  Medians over --reps (ms), slowest rank.
NVLink multicast stays off (never use it on these machines).
"""
import argparse
import os
import statistics

os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.distributed._symmetric_memory as symm_mem  # noqa: E402


def timed(fn, reps, stream):
    """Median GPU time (ms) of fn over reps, ranks started together."""
    times = []
    for _ in range(3):
        fn()
    for _ in range(reps):
        torch.cuda.synchronize()
        dist.barrier()
        e0 = torch.cuda.Event(enable_timing=True)
        e1 = torch.cuda.Event(enable_timing=True)
        e0.record(stream)
        fn()
        e1.record(stream)
        e1.synchronize()
        times.append(e0.elapsed_time(e1))
    t = torch.tensor([statistics.median(times)], device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def bench_ag(m, n, k, reps, group, p):
    a = torch.randn(m // p, k, device="cuda", dtype=torch.bfloat16) / 8
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / 8
    full = torch.empty(m, k, device="cuda", dtype=torch.bfloat16)
    name = group.group_name

    def fused():
        torch.ops.symm_mem.fused_all_gather_matmul(a, [w.t()], gather_dim=0,
                                                   group_name=name)

    def serial():
        dist.all_gather_into_tensor(full, a, group=group)
        torch.matmul(full, w.t())

    return fused, serial


def bench_rs(m, n, k, reps, group, p, allreduce=False):
    a = torch.randn(m, k // p, device="cuda", dtype=torch.bfloat16) / 8
    w = torch.randn(n, k // p, device="cuda", dtype=torch.bfloat16) / 8
    out = torch.empty(m // p, n, device="cuda", dtype=torch.bfloat16)
    name = group.group_name

    def fused():
        torch.ops.symm_mem.fused_matmul_reduce_scatter(
            a, w.t(), "sum", scatter_dim=0, group_name=name)

    def serial():
        c = torch.matmul(a, w.t())
        if allreduce:
            dist.all_reduce(c, group=group)
        else:
            dist.reduce_scatter_tensor(out, c, group=group)

    return fused, serial


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    group = dist.group.WORLD
    p = dist.get_world_size()
    try:
        symm_mem.enable_symm_mem_for_group(group.group_name)
    except AttributeError:
        pass  # newer PyTorch: symmetric memory is on for every group
    stream = torch.cuda.current_stream()
    ms = [4096, 8192, 16384, 32768] if args.full else [8192]
    jobs = []
    for m in ms:
        jobs += [("allgather_gemm", m, 8192, 8192)]
        if args.full:
            jobs += [("allgather_gemm", m, 28672, 8192)]
    for m in ms:
        jobs += [("gemm_rs", m, 8192, 8192)]
        if args.full:
            jobs += [("gemm_rs", m, 8192, 28672)]
    if dist.get_rank() == 0:
        print(f"\nPyTorch {torch.__version__}, {p} x "
              f"{torch.cuda.get_device_name()}, bf16, medians of {args.reps}"
              " (ms, slowest rank)\n")
        print("| call | M | N | K | async TP | serial | serial/async |")
        print("|---|---:|---:|---:|---:|---:|---:|")
    for call, m, n, k in jobs:
        if call == "allgather_gemm":
            fused, serial = bench_ag(m, n, k, args.reps, group, p)
        else:
            fused, serial = bench_rs(m, n, k, args.reps, group, p)
        try:
            tf = timed(fused, args.reps, stream)
        except Exception as e:  # report, keep going with the next shape
            if dist.get_rank() == 0:
                print(f"| {call} | {m} | {n} | {k} | failed: "
                      f"{type(e).__name__} | | |")
            continue
        ts = timed(serial, args.reps, stream)
        if dist.get_rank() == 0:
            print(f"| {call} | {m} | {n} | {k} | {tf:.3f} | {ts:.3f} | "
                  f"{ts / tf:.2f} |", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
