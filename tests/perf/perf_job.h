/* The MPI job side the mkx_perf subcommands on device buffers share
 * (tests/perf/perf_job.c): failure checks that name the rank, the job's
 * GPUs, the MKX communicator, a stream and two events, and the lines that
 * describe a run. */
#ifndef MKX_PERF_JOB_H
#define MKX_PERF_JOB_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <cuda_runtime.h>
#include <mpi.h>
#include "cuda_check.h"
#include "mkx.h"

/* This process's rank and the subcommand ("mkx_perf attn"), for messages;
 * set by perf_env_init (or by the subcommand). */
extern int perf_rank;
extern const char *perf_cmd;

/* A CUDA call, on this job's rank (cuda_check.h: a "not ok" line naming
 * the rank and the call, then MPI_Abort). */
#define AK(x) MT_CUDA_AT(perf_rank, x)
/* An MKX call: the error string and MKX's message, then MPI_Abort. */
#define AM(x)                                                                  \
  do {                                                                         \
    int r_ = (x);                                                              \
    if (r_ != MKX_SUCCESS) {                                                   \
      fprintf(stderr, "%s: rank %d: %s:%d: %s: %s (%d): %s\n", perf_cmd,       \
              perf_rank, __FILE__, __LINE__, #x, MKX_Error_string(r_), r_,     \
              MKX_Get_last_error());                                           \
      MPI_Abort(MPI_COMM_WORLD, 1);                                            \
    }                                                                          \
  } while (0)
/* An MPI call (MPI's default handler aborts first; this covers a job that
 * changed it). */
#define AI(x)                                                                  \
  do {                                                                         \
    int r_ = (x), n_ = 0;                                                      \
    char s_[MPI_MAX_ERROR_STRING];                                             \
    if (r_ != MPI_SUCCESS) {                                                   \
      if (MPI_Error_string(r_, s_, &n_) != MPI_SUCCESS)                        \
        snprintf(s_, sizeof s_, "MPI error %d", r_);                           \
      fprintf(stderr, "%s: rank %d: %s:%d: %s: %s\n", perf_cmd, perf_rank,     \
              __FILE__, __LINE__, #x, s_);                                     \
      MPI_Abort(MPI_COMM_WORLD, 1);                                            \
    }                                                                          \
  } while (0)

typedef struct perf_env {
  int rank, size, dev;
  int gpus;   /* distinct GPUs of the job */
  int shared; /* two ranks of the job on one GPU */
  int mps;    /* this rank's context is an MPS client (-1: unknown) */
  int ctx_sms;
  struct cudaDeviceProp prop;
  MKX_Comm mkx;
  cudaStream_t st;
  cudaEvent_t e0, e1;
} perf_env;

/* The job on MPI_COMM_WORLD with the communicator's options from the
 * MKX_* environment: 0, or 77 (said on rank 0) when some rank has no GPU
 * (MKX runs the host path there, and the subcommands time device
 * buffers). */
int perf_env_init(perf_env *e, const char *cmd);
void perf_env_fini(perf_env *e);

/* The physical bounds a figure is measured against: this GPU's HBM
 * bandwidth from its memory clock and bus width (bytes/s), and the MKX
 * GEMM engine's sustained rate, timed here on rank 0's GPU (bf16 8192^3,
 * median of 10 after 3 warm-ups) while the other ranks wait, and shared
 * (TFLOP/s).  Collective. */
typedef struct perf_bounds {
  double hbm_bytes_s, engine_tflops;
} perf_bounds;
void perf_bounds_measure(const perf_env *e, perf_bounds *b);

/* Appended to s: the MKX_* variables set ("none" if none). */
void perf_mkx_environment(char *s, size_t len);
/* Appended to s: the section title "### <cmd>, <date UTC>, N rank(s) on
 * G x <GPU> (SMs)" and the sentence on whether ranks share a GPU (MPS,
 * time slices) or each has its own. */
void perf_table_title(const perf_env *e, char *s, size_t len);
/* Rank 0: head on stdout and appended to the file outname (NULL: none);
 * returns that file (open for the rows) or NULL. */
FILE *perf_table_open(const char *head, const char *outname);

/* One timed call of a subcommand. */
typedef void (*perf_call_fn)(const perf_env *e, const void *ctx);
/* warmup calls, then reps timed calls on e->st (each after a stream
 * synchronisation and an MPI barrier, between e->e0 and e->e1); fails the
 * job if GPU work of a call failed after it returned.  Returns the slowest
 * rank's median (ms); paths: the MKX paths the timed calls took, with
 * their counts where not every call took them. */
float perf_time_calls(const perf_env *e, int warmup, int reps,
                      perf_call_fn call, const void *ctx, char *paths,
                      size_t paths_len);
/* --graph: MKX_Start of plan r captured once into a CUDA graph on every
 * rank, then warmup replays and reps timed ones, timed as
 * perf_time_calls times calls.  The slowest rank's median (ms), or -1
 * where r's path may not be captured (MKX_Request_get_path, on any
 * rank). */
float perf_time_graph(const perf_env *e, int warmup, int reps, MKX_Request r);
/* --graph's cells: the replay's ms and call ms / replay ms ("-" twice
 * where graph_ms < 0), and the sentence of the method that says so. */
void perf_graph_cells(char *line, size_t len, double call_ms, double graph_ms);
extern const char perf_graph_legend[];

#endif
