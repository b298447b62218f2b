"""GPU timing the PyTorch baselines of mkx_perf share."""
import statistics

import torch


def timed(fn, reps, warmup=3, barrier=None):
    """Median GPU time (ms) of fn over reps calls after warmup calls; with
    barrier (e.g. torch.distributed.barrier) the ranks start each call
    together (this rank's median)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        if barrier:
            torch.cuda.synchronize()
            barrier()
        e0 = torch.cuda.Event(enable_timing=True)
        e1 = torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1))
    return statistics.median(times)
