/* The options table and its parsers.  Precedence: default < environment
 * (MKX_NAME) < MPI_Info key (mkx_name).  One table (base's rows and the
 * registered ones) feeds the parser, the printer and the man page of
 * mkx_info, so they cannot drift apart. */
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "core/error.h"
#include "core/options.h"

#define OPT(field) offsetof(mkx_options, field)

static const mkx_option_desc base_rows[] = {
    {"log_level", MKX_OPT_ENUM, OPT(log_level), "warn",
     "none|error|warn|info|debug",
     "Messages printed on stderr: errors, warnings (default), the path each "
     "call takes and why (info), everything (debug)."},
    {"path", MKX_OPT_ENUM, OPT(path), "auto", "auto|host|gpu",
     "Where operations run. auto: on the GPU for device pointers, on the "
     "host for host pointers; host: always on the host (device buffers are "
     "staged through host memory); gpu: fail with MKX_ERR_UNSUPPORTED when "
     "no GPU is usable."},
    {"device", MKX_OPT_INT, OPT(device), "-1", "-1:4096",
     "CUDA device ordinal for this rank; -1 chooses from the launcher's "
     "local rank (SLURM_LOCALID, OMPI_COMM_WORLD_LOCAL_RANK) modulo the "
     "visible devices."},
    {"timeout_ms", MKX_OPT_LONG, OPT(timeout_ms), "300000", "1:86400000",
     "Upper bound in milliseconds on every wait for another rank; when it "
     "runs out the call returns MKX_ERR_TIMEOUT and the communicator "
     "becomes unusable."},
    {"fused", MKX_OPT_ENUM, OPT(fused), "auto", "off|auto",
     "Fused single-kernel GPU paths for device buffers. auto: used where "
     "the shape and types fit (else the staged path, logged at info); off: "
     "device buffers always take the staged host path.",
     1},
    {"blocking", MKX_OPT_BOOL, OPT(blocking), "no", "yes|no",
     "yes: a call on the fused GPU path waits for its own GPU work before "
     "returning and returns its status (MKX_ERR_TIMEOUT naming the rank and "
     "tile a wait ran out on, MKX_ERR_PEER when another rank gave up on the "
     "run, or MKX_ERR_CUDA); not while the stream is "
     "being captured into a CUDA graph. no: calls only enqueue work, and a "
     "timeout on the GPU is returned by the next fused call on the "
     "communicator."},
    {"tp_partials", MKX_OPT_ENUM, OPT(tp_partials), "out", "out|fp32",
     "Type in which the fused GEMM+ReduceScatter and GEMM+AllReduce send "
     "each rank's partial product to the rank that sums it. out: C's type, "
     "as cuBLAS followed by NCCL would (the owner still adds in fp32 and "
     "rounds once); fp32: unrounded partials, twice the NVLink bytes.",
     1},
    {"tp_push", MKX_OPT_ENUM, OPT(tp_push), "auto", "auto|copy|sm",
     "Who moves each rank's partial rows to their owner on the overlapped "
     "path of GEMM+ReduceScatter and GEMM+AllReduce inside a node. copy: "
     "the GEMM stores them into a local staging buffer and the copy engines "
     "move each finished chunk (no SM time on NVLink); sm: the GEMM's "
     "epilogue stores them straight into the owner's receive slot and "
     "counts them there; auto: sm where every rank of the node shares one "
     "GPU (the stores are then local memory writes), else copy.",
     1},
    {"tp_pull", MKX_OPT_ENUM, OPT(tp_pull), "auto", "auto|yes|no",
     "Fused calls inside a node whose ranks read each other's A and B in "
     "place: AllGather+GEMM loads each rank's rows of A from that rank's "
     "own A, GEMM+ReduceScatter and GEMM+AllReduce compute each rank's own "
     "rows over the whole K from every rank's slice, so no rows or partial "
     "products move (GEMM+AllReduce still stores each rank's rows into "
     "every C). Meant for ranks that share one GPU; between GPUs every tile "
     "would read its operands over NVLink. auto: where every rank of the "
     "node is on one GPU; yes: on any node; no: never. Only where every "
     "rank's operands can be mapped into its peers (else the usual path, "
     "logged at info); AllGather+GEMM also needs every rank's rows but the "
     "last to be a multiple of 128. fp8 operands: AllGather+GEMM only, "
     "and only with yes (auto keeps their split path).",
     1},
    {"fused_pad", MKX_OPT_BOOL, OPT(fused_pad), "yes", "yes|no",
     "yes: fused-path calls whose k, n, leading dimensions or pointer "
     "alignment do not suit the fused kernels (multiples of 8 elements, "
     "16-byte aligned), or whose allreduce C cannot be mapped into node "
     "peers, go through padded, aligned temporaries on the GPU (one extra "
     "copy of A, B and C); no: they take the staged host path.",
     1},
    {"tp_overlap", MKX_OPT_ENUM, OPT(tp_overlap), "auto", "auto|yes|no",
     "Single-node GPU path of the three tensor-parallel calls. yes: one "
     "GEMM kernel overlapped with the NVLink transfers (copy engines); no: "
     "the GEMM, then a separate one-shot NVLink collective kernel (two "
     "kernels, lower fixed cost, nothing overlapped); auto: no for small "
     "products (fewer than 1024 product rows per rank), where overlap "
     "cannot pay for its set-up, else yes.",
     1},
    {"tp_split_gemm", MKX_OPT_ENUM, OPT(tp_split_gemm), "engine",
     "engine|cublas",
     "The GEMM of the split path (tp_overlap). engine: MKX's; cublas: "
     "cuBLAS (not for fp16 inputs with bf16 output or the reverse, which "
     "keep the engine).",
     1},
    {"tp_ag_oneshot", MKX_OPT_ENUM, OPT(tp_ag_oneshot), "auto", "auto|yes|no",
     "AllGather+GEMM on the split path (tp_overlap) with the engine's GEMM. "
     "yes: products of at most 116 GEMM tiles run as one kernel whose spare "
     "CTAs copy the rows over NVLink in K chunks while the GEMM CTAs "
     "consume them; no: a copy kernel, then the GEMM; auto: yes where "
     "K >= 2048 and the engine's usual tile leaves 16 of 132 SMs free.",
     1},
    {"tp_stream_k", MKX_OPT_BOOL, OPT(tp_stream_k), "yes", "yes|no",
     "AllGather+GEMM on the overlapped path (tp_overlap). yes: when the "
     "GEMM's tiles leave its last wave under 90% full, that wave's tiles "
     "are split along K over every SM (stream-K; each tile's shares summed "
     "in a fixed order, the same bits every run); no: whole tiles only.",
     1},
    {"shared_gpu", MKX_OPT_ENUM, OPT(shared_gpu), "auto",
     "auto|fused|split|staged",
     "Single-node GPU path of the fused calls when ranks of a node share a "
     "GPU. auto: under MPS, where every rank sharing a GPU has SMs of its "
     "own (gpu_partition), as with one GPU per rank (tp_overlap), else the "
     "staged path; without MPS (time slices) the split path, whose few "
     "waits cannot starve a time slice; fused: as with one GPU per rank in "
     "both cases (without SMs of their own each rank's kernels take an even "
     "share of the SMs, which does not keep them from holding an SM a "
     "peer's kernel needs; without MPS the overlapped path may wait for "
     "whole time slices, up to timeout_ms); split: the split path; staged: "
     "the staged host path.",
     1},
    {"gpu_partition", MKX_OPT_ENUM, OPT(gpu_partition), "auto",
     "auto|green|none",
     "SM partitions for ranks of a node that share a GPU under MPS. auto: "
     "where the ranks' MPS clients may each use every SM, each rank's "
     "kernels of MKX run in a partition of its own (a green context on an "
     "even share of the SMs, rounded down to the GPU's partition step), so "
     "that a kernel waiting for a peer can never hold the SMs the peer's "
     "kernel needs; where the user gave each client a share "
     "(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, an execution affinity) that share "
     "is used as it is; green: a partition or an error on every rank; "
     "none: no partition (see shared_gpu).",
     1},
    {"gpu_ctas", MKX_OPT_INT, OPT(gpu_ctas), "0", "0:4096",
     "Most CTAs a fused kernel that waits for other ranks may take (the "
     "persistent GEMMs, the split path's copy and sum kernels). 0: one per "
     "SM this rank has (the GPU's; on a GPU shared under MPS its partition "
     "or its MPS client's share, less 2 for copies and launches), so that "
     "no kernel waits for a peer that cannot get an SM. The smallest value "
     "of any rank is used."},
    {"hier_gemm", MKX_OPT_ENUM, OPT(hier_gemm), "auto",
     "host|gpu|nvlink|proxy|auto",
     "Device buffers on a communicator of several nodes. host: staged "
     "through host memory, GEMM included; gpu: the GEMM on the GPU and only "
     "A rows, partials and output blocks through the host (row-major "
     "bf16/fp16/fp8 in); nvlink: as gpu, with the node's part as the "
     "single-node GPU call (over NVLink) on a communicator of the node's "
     "ranks, the network part pipelined with it in up to 4 slices; ranks "
     "not numbered node by node take gpu; proxy: on nodes of one rank (at "
     "most 8) driven by the GPU: kernels post rows and partial chunks to the "
     "network proxy as they exist, AllGather+GEMM's tiles start as their "
     "rows land, the reductions sum the chunks as they land (plans "
     "capturable in CUDA graphs); all three also on equal nodes of several "
     "ranks (at most 8 in all); other nodes as nvlink; auto: proxy where it "
     "applies, else nvlink. Same results and network bytes for all. fp8 "
     "operands (the _scaled calls) take gpu unless the option is host.",
     1},
    {"attn_layout", MKX_OPT_ENUM, OPT(attn_layout), "contiguous",
     "contiguous|zigzag|striped",
     "Which sequence positions each rank's Q, K and V of MKX_Ring_attention "
     "hold (p ranks, seq_local positions each, sequence p x seq_local). "
     "contiguous: rank r holds r*seq_local ... (r+1)*seq_local-1; zigzag: "
     "the sequence in 2p chunks of seq_local/2 (seq_local even), rank r "
     "holds chunks r and 2p-1-r, so that causal work is even; striped: "
     "rank r holds r, r+p, r+2p, ...",
     1},
    {"attn_block_n", MKX_OPT_ENUM, OPT(attn_block_n), "auto", "auto|128|192",
     "Keys per block of MKX_Ring_attention's GPU engine. auto and 128: 128 "
     "keys (head dims up to 64 with three consumer warpgroups); 192: head dims "
     "up to 64 with two warpgroups (larger head "
     "dims take 128). Results may differ between sizes in the last bits."},
    {"hier_attn", MKX_OPT_ENUM, OPT(hier_attn), "auto", "host|proxy|auto",
     "Who moves MKX_Ring_attention's key/value chunks between nodes on its "
     "GPU path. host: the host, through pinned host memory, after launching "
     "the engine; proxy (the rank with a GPU, equal nodes): the GPU "
     "posts this rank's chunk to the network proxy, each arriving chunk "
     "lands in the engine's ring and its signal word releases it (nodes of "
     "several ranks: a kernel hands it on into every node rank's ring), "
     "with no host work in the call (capturable in CUDA graphs); elsewhere "
     "as host; auto: proxy on nodes of one rank, and on nodes of several "
     "ranks where its region is in host memory (net_gpu_region), else host. "
     "Same results and network bytes for all.",
     1},
    {"hier_moe", MKX_OPT_ENUM, OPT(hier_moe), "auto", "host|proxy|auto",
     "Who moves the token rows and expert outputs of MoE calls on the GPU "
     "between nodes. host: the host, between the kernels, through the "
     "communicator's pinned areas; proxy (a rank with a GPU, at most 32 "
     "ranks): the kernels post each owner's block to the network proxy "
     "straight into the owner's area (the network region in host memory) "
     "and wait for their senders' signal words, with no host wait after "
     "the routing; auto: proxy where it can. Same results and network "
     "bytes for all.",
     1},
    {"net_fwd_ctas", MKX_OPT_INT, OPT(net_fwd_ctas), "0", "0:1024",
     "CTAs of the network forward (calls driven by the GPU on nodes of "
     "several ranks: AllGather+GEMM, ring attention), pinned by hand. 0: a "
     "sixteenth of the rank's CTAs, 1-8. At most the rank's CTAs less one "
     "are used; the kernels beside it take the rest.",
     1},
    {"net_sum_ctas", MKX_OPT_INT, OPT(net_sum_ctas), "0", "0:1024",
     "CTAs of the node sums of GEMM+ReduceScatter and GEMM+AllReduce driven "
     "by the GPU on nodes of several ranks, pinned by hand. 0: a quarter of "
     "the rank's CTAs, 1-8. At most the rank's CTAs less one are used.",
     1},
    {"tune", MKX_OPT_ENUM, OPT(tune), "off", "off|fixed|adapt",
     "How the runs of one shape (a plan's, or repeated plain calls') "
     "choose the CTAs of a role beside their main kernels (net_fwd_ctas, "
     "net_sum_ctas). off: the role's share (or the pinned count); fixed: "
     "the split the tuner cache (tune_cache) holds for the shape, searched "
     "no further, else the share; adapt: a "
     "search on that shape's own run times, from the share, within the "
     "role's range, timed with CUDA events read once the GPU has passed them "
     "(no host wait); a pinned count is kept. Each rank searches on its own "
     "times.",
     1},
    {"tune_cache", MKX_OPT_STRING, OPT(tune_cache), "", "a file path",
     "With tune=adapt or fixed: a file that keeps the splits the plans' "
     "searches settled on, keyed by GPU model and SMs, ranks per node, nodes, "
     "operation, path, role, shape (powers of two) and datatype. Read when "
     "a plan first looks a split up, written back with tune=adapt (merged, "
     "under a lock, replaced whole) when the communicator is freed; a plan "
     "whose key is there starts settled on its split and (adapt) searches "
     "again only if its runs slow down. A file of another version, or a line "
     "that does not parse, is ignored with a warning; a failure to write is a "
     "warning. "
     "Empty: none.",
     0},
    {"trace", MKX_OPT_STRING, OPT(trace), "", "a file path",
     "A Chrome trace (JSON, for Perfetto or chrome://tracing) of the runs "
     "of the calls whose kernels have roles beside them (net_fwd_ctas, "
     "net_sum_ctas): each run and each role's kernels in it, timed on the "
     "GPU by CUDA events, one track per role and rank, with the role's "
     "CTAs; written by rank 0 when the communicator is freed (every rank's "
     "records gathered, at most 16384 per rank). Runs under graph capture "
     "are not traced. A failure to write is a warning. Empty: none.",
     1},
    {"tiles_ag_sm_bytes", MKX_OPT_LONG, OPT(tiles_ag_sm_bytes), "1048576",
     "0:1099511627776",
     "MKX_Allgather_tiles on this rank: its rows go to the node's copies by "
     "an SM kernel of up to 16 CTAs when they are at most this many bytes, "
     "else by the copy engines (per destination, copies of 1, 2, 4, ... "
     "data-tile rows); 0: always the copy engines.",
     0},
    {"tiles_reduce", MKX_OPT_ENUM, OPT(tiles_reduce), "persistent",
     "persistent|staged",
     "How MKX_Reduce_scatter_tiles and MKX_Allreduce_tiles on this rank wait "
     "for the tiles. persistent: one kernel of tiles_reduce_ctas CTAs that "
     "each take a tile as soon as every copy of it is complete, holding "
     "their SMs while the producers write; staged: the rank's block in 8 "
     "groups of data-tile rows, each a one-block wait on the stream, then a "
     "kernel over every SM the rank's kernels may take, so that waiting "
     "holds one SM but a group's sum starts only once all of it is there.",
     0},
    {"tiles_reduce_ctas", MKX_OPT_INT, OPT(tiles_reduce_ctas), "16", "1:1024",
     "CTAs of MKX_Reduce_scatter_tiles and MKX_Allreduce_tiles on this rank "
     "with tiles_reduce=persistent "
     "(at most one per data tile of its block, and half the CTAs its waiting "
     "kernels may take). They persist until the last tile, each holding an "
     "SM while it waits: more finish the last tiles sooner and leave the "
     "kernels that produce the tiles fewer SMs.",
     0},
    {"net_gpu_region", MKX_OPT_ENUM, OPT(net_gpu_region), "auto",
     "device|host|auto",
     "Where the network region of the calls driven by the GPU "
     "(hier_gemm=proxy, hier_attn=proxy) lives on this rank. device: GPU "
     "memory, which tcp and shm send and land with CUDA copies made by "
     "threads of their own, on streams that share the GPU's hardware queues "
     "with the application's (verbs and EFA make none); host: pinned host "
     "memory mapped for the GPU, which no transport copies with CUDA, the "
     "kernels reading and writing it over the host link (slower where a "
     "GEMM reads or writes the region itself: nodes of one rank). auto: "
     "device, but host on nodes of several ranks over tcp or shm (ring "
     "attention and the tensor-parallel calls), where the transports' "
     "copies of a device region can queue behind the kernels that wait for "
     "them and stall a call until timeout_ms. Same results and network "
     "bytes for all."},
    {"moe_gpu", MKX_OPT_ENUM, OPT(moe_gpu), "all", "one|all|off",
     "Which MoE calls on bf16/fp16 device buffers run on the GPU (the rest "
     "take the staged path). one: those of a one-rank communicator; all: "
     "also those of several ranks, whose token rows go into the experts' "
     "owners' workspaces by GPU stores over NVLink inside a node, and "
     "through pinned host memory and the network (driven by the host) "
     "between nodes of equal size; off: none.",
     1},
    {"moe_gemm", MKX_OPT_ENUM, OPT(moe_gemm), "auto", "auto|rows|swap",
     "The grouped expert GEMM kernel of MoE calls on the GPU. rows: tiles of "
     "128 rows of one expert, best where experts have many rows; swap: the "
     "operands swapped, an expert's rows in blocks of up to 256 against 64 "
     "weight columns, so the weights are read once per 256 rows, best where "
     "experts have up to about 200 rows and reading the weights sets the "
     "time; auto: swap where experts average at most 192 rows. "
     "The two may differ in the last bits."},
    {"moe_sync", MKX_OPT_BOOL, OPT(moe_sync), "yes", "yes|no",
     "MoE calls on the GPU path. yes: each call waits for its routing (a few "
     "bytes back to the host), so bad expert ids and MKX_ERR_TRUNCATE are "
     "its own return value; calls over several nodes always do. no: calls "
     "only enqueue work (no host "
     "synchronisation; plans may be captured in a CUDA graph); a run with "
     "bad ids, bad fp8 scales or too many rows writes nothing (on "
     "truncation only "
     "expert_rows) on every rank, and its error is returned by "
     "MKX_Comm_get_async_error, or with option blocking by the call.",
     1},
    {"moe_fp8", MKX_OPT_BOOL, OPT(moe_fp8), "no", "yes|no",
     "The MoE calls' _scaled forms with fp8 on device buffers. yes: on one "
     "node (several ranks: X scales other than per tensor), with the "
     "weights stored transposed (MKX_TRANS), hidden (and the "
     "layer's ffn) multiples of 16 and the layer's out bf16 or fp16, they "
     "run on the GPU (fp8 grouped expert GEMMs; the layer's SwiGLU "
     "activation rounded to fp8 by row and 128 columns as W2's operand, as "
     "mkx.h says); no: the staged path.",
     1},
    {"moe_release", MKX_OPT_ENUM, OPT(moe_release), "auto", "auto|yes|no",
     "MoE calls on the GPU over several ranks of one node. yes: each "
     "expert's rows are released to the first grouped GEMM as soon as every "
     "rank has written them, so a GPU's GEMM starts on the experts whose rows "
     "have landed while other ranks still gather (not under time slices); "
     "no: the ranks meet after the whole gather; auto: yes where each rank "
     "has a GPU of its own, no where ranks share one (there the waiting "
     "tiles would hold SMs the gathers they wait for need).",
     1},
    {"virtual_node_size", MKX_OPT_INT, OPT(virtual_node_size), "0", "0:65536",
     "Treat each group of this many ranks of one host as a separate node "
     "(0: one node per host), so the inter-node path runs on one machine.",
     1},
    {NULL, 0, 0, NULL, NULL, NULL},
};

/* Base's rows, then the arrays of the layers above in the order they came.
 * Slots are only appended: a reader takes the count (acquire), and the
 * slots below it were written before it was published (release). */
enum { MAX_TABLES = 8 };
static const mkx_option_desc *tables[MAX_TABLES] = {base_rows};
static atomic_size_t ntables = 1;
static pthread_mutex_t add_lock = PTHREAD_MUTEX_INITIALIZER;

const mkx_option_desc *mkx_option_at(size_t i) {
  size_t n = atomic_load_explicit(&ntables, memory_order_acquire);
  for (size_t t = 0; t < n; t++)
    for (const mkx_option_desc *d = tables[t]; d->name; d++)
      if (i-- == 0) return d;
  return NULL;
}

static const mkx_option_desc *find_row(const char *name) {
  const mkx_option_desc *d;
  for (size_t i = 0; (d = mkx_option_at(i)); i++)
    if (strcasecmp(d->name, name) == 0) return d;
  return NULL;
}

static size_t field_size(mkx_opt_type type) {
  return type == MKX_OPT_LONG     ? sizeof(int64_t)
         : type == MKX_OPT_STRING ? MKX_OPT_STRING_MAX
                                  : sizeof(int);
}

/* A bad row would write outside mkx_options or shadow another row: refused
 * whole, before any of it is visible. */
static int check_rows(const mkx_option_desc *rows) {
  for (const mkx_option_desc *d = rows; d->name; d++) {
    if (d->offset + field_size(d->type) > sizeof(mkx_options))
      return mkx_error(MKX_ERR_INTERNAL,
                       "option %s: field outside "
                       "mkx_options",
                       d->name);
    if (find_row(d->name))
      return mkx_error(MKX_ERR_INTERNAL, "option %s: registered twice",
                       d->name);
  }
  return MKX_SUCCESS;
}

static int append_rows(const mkx_option_desc *rows) {
  size_t n = atomic_load_explicit(&ntables, memory_order_relaxed);
  for (size_t t = 0; t < n; t++)
    if (tables[t] == rows) return MKX_SUCCESS;
  if (n == MAX_TABLES)
    return mkx_error(MKX_ERR_INTERNAL,
                     "options: more than %d tables of "
                     "rows",
                     MAX_TABLES);
  MKX_TRY(check_rows(rows));
  tables[n] = rows;
  atomic_store_explicit(&ntables, n + 1, memory_order_release);
  return MKX_SUCCESS;
}

int mkx_options_add_rows(const mkx_option_desc *rows) {
  pthread_mutex_lock(&add_lock);
  int rc = append_rows(rows);
  pthread_mutex_unlock(&add_lock);
  return rc;
}

static int parse_enum(const mkx_option_desc *d, const char *v, int *out) {
  const char *p = d->choices;
  for (int i = 0; *p; i++) {
    size_t len = strcspn(p, "|");
    if (strlen(v) == len && strncasecmp(p, v, len) == 0) {
      *out = i;
      return 1;
    }
    p += len + (p[len] == '|');
  }
  return 0;
}

static int parse_int(const mkx_option_desc *d, const char *v, int64_t *out) {
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  while (isspace((unsigned char)*end)) end++;
  if (errno || end == v || *end) return 0;
  long long lo, hi;
  if (sscanf(d->choices, "%lld:%lld", &lo, &hi) != 2) return 0;
  if (x < lo || x > hi) return 0;
  *out = x;
  return 1;
}

static int parse_bool(const char *v, int *out) {
  static const char *const yes[] = {"1", "y", "yes", "on", "true"};
  static const char *const no[] = {"0", "n", "no", "off", "false"};
  for (int i = 0; i < 5; i++) {
    if (strcasecmp(v, yes[i]) == 0) return *out = 1, 1;
    if (strcasecmp(v, no[i]) == 0) return *out = 0, 1;
  }
  return 0;
}

int mkx_option_parse(const mkx_option_desc *d, const char *value,
                     const char *source, mkx_options *opt) {
  char *field = (char *)opt + d->offset;
  int ok = 0, iv = 0;
  int64_t lv = 0;
  switch (d->type) {
    case MKX_OPT_ENUM:
      if ((ok = parse_enum(d, value, &iv))) *(int *)field = iv;
      break;
    case MKX_OPT_BOOL:
      if ((ok = parse_bool(value, &iv))) *(int *)field = iv;
      break;
    case MKX_OPT_INT:
      if ((ok = parse_int(d, value, &lv))) *(int *)field = (int)lv;
      break;
    case MKX_OPT_LONG:
      if ((ok = parse_int(d, value, &lv))) *(int64_t *)field = lv;
      break;
    case MKX_OPT_STRING:
      /* strncpy zero-fills the rest, so equal texts compare equal bytewise. */
      if ((ok = strlen(value) < MKX_OPT_STRING_MAX &&
                (!d->valid || d->valid(value))))
        strncpy(field, value, MKX_OPT_STRING_MAX);
      break;
  }
  if (!ok)
    return mkx_error(MKX_ERR_INVALID_ARG, "%s: bad value '%s' (expected %s)",
                     source, value,
                     d->type == MKX_OPT_BOOL ? "yes|no" : d->choices);
  return MKX_SUCCESS;
}

const char *mkx_option_format(const mkx_option_desc *d, const mkx_options *opt,
                              char *buf, size_t len) {
  const char *field = (const char *)opt + d->offset;
  if (d->type == MKX_OPT_ENUM) {
    const char *p = d->choices;
    for (int i = *(const int *)field; i > 0 && strchr(p, '|'); i--)
      p = strchr(p, '|') + 1;
    snprintf(buf, len, "%.*s", (int)strcspn(p, "|"), p);
  } else if (d->type == MKX_OPT_BOOL) {
    snprintf(buf, len, "%s", *(const int *)field ? "yes" : "no");
  } else if (d->type == MKX_OPT_LONG) {
    snprintf(buf, len, "%lld", (long long)*(const int64_t *)field);
  } else if (d->type == MKX_OPT_STRING) {
    snprintf(buf, len, "%s", field);
  } else {
    snprintf(buf, len, "%d", *(const int *)field);
  }
  return buf;
}

static void env_name(const char *name, char *buf, size_t len) {
  snprintf(buf, len, "MKX_%s", name);
  for (char *p = buf; *p; p++) *p = (char)toupper((unsigned char)*p);
}

static int load_info(mkx_options *opt, MPI_Info info) {
  int nkeys;
  if (info == MPI_INFO_NULL) return MKX_SUCCESS;
  if (MPI_Info_get_nkeys(info, &nkeys) != MPI_SUCCESS)
    return mkx_error(MKX_ERR_MPI, "MPI_Info_get_nkeys failed");
  for (int i = 0; i < nkeys; i++) {
    char key[MPI_MAX_INFO_KEY + 1], value[MPI_MAX_INFO_VAL + 1];
    int flag = 0;
    if (MPI_Info_get_nthkey(info, i, key) != MPI_SUCCESS ||
        MPI_Info_get(info, key, MPI_MAX_INFO_VAL, value, &flag) != MPI_SUCCESS)
      return mkx_error(MKX_ERR_MPI, "reading MPI_Info key %d failed", i);
    if (strncasecmp(key, "mkx_", 4) != 0 || !flag) continue;
    const mkx_option_desc *d = find_row(key + 4);
    if (!d)
      return mkx_error(MKX_ERR_INVALID_ARG,
                       "MPI_Info key '%s' is not an MKX option (mkx_info "
                       "lists them)",
                       key);
    char source[MPI_MAX_INFO_KEY + 16];
    snprintf(source, sizeof source, "MPI_Info key %s", key);
    int rc = mkx_option_parse(d, value, source, opt);
    if (rc != MKX_SUCCESS) return rc;
  }
  return MKX_SUCCESS;
}

static int load_env(const mkx_option_desc *d, mkx_options *opt) {
  char name[64];
  int rc = mkx_option_parse(d, d->defval, "default", opt);
  if (rc != MKX_SUCCESS)
    return mkx_error(MKX_ERR_INTERNAL, "bad default for %s", d->name);
  env_name(d->name, name, sizeof name);
  const char *v = getenv(name);
  return v ? mkx_option_parse(d, v, name, opt) : MKX_SUCCESS;
}

int mkx_options_load(mkx_options *opt, MPI_Info info) {
  const mkx_option_desc *d;
  /* Fields of rows not registered yet are zero, not stale. */
  *opt = (mkx_options){0};
  for (size_t i = 0; (d = mkx_option_at(i)); i++) MKX_TRY(load_env(d, opt));
  return load_info(opt, info);
}

void mkx_options_print(const mkx_options *opt, FILE *f) {
  const mkx_option_desc *d;
  for (size_t i = 0; (d = mkx_option_at(i)); i++) {
    char env[64], cur[64];
    env_name(d->name, env, sizeof env);
    fprintf(f, "  %-24s info key mkx_%s\n", env, d->name);
    fprintf(f, "      %s: %s (default %s, current %s)\n",
            d->type == MKX_OPT_ENUM     ? "one of"
            : d->type == MKX_OPT_BOOL   ? "boolean"
            : d->type == MKX_OPT_STRING ? "text"
                                        : "integer in",
            d->type == MKX_OPT_BOOL ? "yes|no" : d->choices, d->defval,
            mkx_option_format(d, opt, cur, sizeof cur));
    fprintf(f, "      %s\n", d->help);
  }
}
