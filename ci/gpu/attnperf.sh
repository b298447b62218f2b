# Part of stages perf and attn: mkx_perf attn on 1 rank with the GPU to
# itself (MPS stopped, as when SDPA ran), beside PyTorch SDPA on the same
# shapes (sdpa.txt of stage engine, else timed here first); on one GPU also
# 2 ranks sharing it under MPS on the small shapes (S per rank), MKX alone:
# NCCL cannot put two ranks on one GPU, so no baseline.  With several GPUs,
# one rank per GPU beside what a user runs instead: PyTorch SDPA with an
# NCCL ring of K/V, serially, on all of them (torch_ring_attn.py, ring.txt;
# its check lines say it is right).  perf-attn.txt, attn-results.md; bounded
# at MKX_GPU_CHECK_PERF_BOUND s (default 150), the ring at
# MKX_GPU_CHECK_RING_BOUND s (default 600).
# shellcheck shell=bash

[ -x ./mkx_perf ] || return 0
abound=${MKX_GPU_CHECK_PERF_BOUND:-150}
mps_stop
[ -e "$out/sdpa.txt" ] ||
  timeout -k 5 300 python3 ../tests/perf/torch_sdpa.py >"$out/sdpa.txt" 2>&1 ||
  fail "torch_sdpa.py rc=$?"
timeout -k 5 "$abound" mpirun --oversubscribe -np 1 ./mkx_perf attn \
  --versus "$out/sdpa.txt" --out "$out/attn-results.md" \
  >"$out/perf-attn.txt" 2>&1 ||
  fail "mkx_perf attn: rc=$? (bound $abound s)"
if [ "$ngpu" = 1 ]; then
  if mps_start; then
    timeout -k 5 "$abound" mpirun --oversubscribe -np 2 ./mkx_perf attn \
      --small --reps 5 --out "$out/attn-results.md" \
      >>"$out/perf-attn.txt" 2>&1 ||
      { fail "mkx_perf attn -np 2 --small (MPS): rc=$? (bound $abound s)"
        mps_stop; mps_start; }
  else
    no_mps
  fi
fi
if [ "$ngpu" -ge 2 ]; then
  rbound=${MKX_GPU_CHECK_RING_BOUND:-600}
  timeout -k 5 "$rbound" torchrun --nproc_per_node "$ngpu" \
    ../tests/perf/torch_ring_attn.py >"$out/ring.txt" 2>&1 ||
    fail "torch_ring_attn.py on $ngpu GPUs: rc=$? (bound $rbound s)"
  grep -m 8 '^check .*FAILED' "$out/ring.txt" | tee -a "$summary"
  timeout -k 5 "$rbound" mpirun --oversubscribe -np "$ngpu" ./mkx_perf attn \
    --versus "$out/ring.txt" --out "$out/attn-results.md" \
    >>"$out/perf-attn.txt" 2>&1 ||
    fail "mkx_perf attn -np $ngpu: rc=$? (bound $rbound s)"
fi
