/* The network transport: one small interface, three providers (verbs, efa,
 * tcp), in the manner of a libfabric provider or an NCCL net plugin.
 *
 * One endpoint (mkx_net) per rank of a communicator.  Its life:
 *   mkx_net_open      pick a provider (option `net`), open the device
 *   mkx_net_connect   exchange address blobs through the bootstrap's
 *                     allgather, then connect to every other rank
 *   mkx_net_reg       register memory; mkx_net_exchange_keys gives every
 *                     rank the remote keys of everyone's region
 *   mkx_net_write_signal   one-sided write of `len` bytes into a peer's
 *                     region, then the peer's signal word `slot` becomes
 *                     `value`, never before the data is visible there
 *   mkx_net_poll      progress: local completions (send buffers reusable)
 *                     and arrived signals; errors of any peer surface here
 *   mkx_net_close
 *
 * Signals.  Every endpoint owns `num_signals` 64-bit words that peers set.
 * Use each slot as a sequence number: values written to one slot increase,
 * and a reader waits until the word is >= the value it expects
 * (mkx_net_wait_signal).  verbs and tcp store the value exactly; efa
 * carries only the low 16 bits in the immediate data and rebuilds the
 * value as the smallest one above the word's current value, so on efa the
 * values in flight to one slot must stay within 2^15 of each other.
 *
 * Memory.  MKX_NET_MEM_HOST regions work on every provider.
 * MKX_NET_MEM_DEVICE (GPU memory): verbs and efa register it through
 * DMA-BUF (ibv_reg_dmabuf_mr, when configure found it and a dmabuf fd is
 * given) and fall back to ibv_reg_mr on the device pointer, which works
 * where the nvidia-peermem module is loaded.  tcp stages device memory
 * through pinned host buffers (mkx_net_stager below): the sending thread
 * copies device -> pinned before it sends, the receiving thread copies
 * pinned -> device before it sets the signal.  tcp recognises device
 * pointers by themselves (cudaPointerGetAttributes), so a device pointer
 * registered as MKX_NET_MEM_HOST is staged too; MKX_NET_MEM_DEVICE on
 * memory that is not device memory (or in a build without CUDA) is
 * MKX_ERR_UNSUPPORTED.
 *
 * Signal words are page-aligned, whole pages (mkx_net_signals_alloc), so
 * they can be registered with CUDA and polled by a kernel
 * (src/proxy/proxy_gpu.h).
 *
 * Threads.  One thread drives an endpoint at a time (the proxy thread);
 * providers may run their own progress thread inside (tcp does).
 * Errors never hang: a broken connection or a dead peer becomes
 * MKX_ERR_NET or MKX_ERR_PEER (message names the peer) on the next
 * mkx_net_poll, and every wait is bounded by the timeout. */
#ifndef MKX_NET_NET_H
#define MKX_NET_NET_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "boot/bootstrap.h"
#include "core/options.h"

/* Values of the `net` option (order of its choices
 * "auto|verbs|efa|tcp|shm"). */
enum { MKX_NET_AUTO = 0, MKX_NET_VERBS, MKX_NET_EFA, MKX_NET_TCP, MKX_NET_SHM };

enum { MKX_NET_MEM_HOST = 0, MKX_NET_MEM_DEVICE = 1 };

typedef struct mkx_net mkx_net;
typedef struct mkx_net_provider mkx_net_provider;

typedef struct mkx_net_params {
  int rank, size;
  uint32_t num_signals;   /* signal words of this endpoint (<= 65536) */
  int64_t timeout_ms;     /* bound on connects and waits */
  const mkx_options *opt; /* net, net_tcp_bind, net_tcp_port_range, ... */
  const char *device;     /* RDMA device name (topology map); NULL: first */
} mkx_net_params;

/* A registered region, local side. */
typedef struct mkx_net_mr {
  uint32_t id; /* index in the endpoint's region table */
  int kind;    /* MKX_NET_MEM_* */
  void *base;
  size_t len;
  uint32_t lkey; /* verbs/efa local key (0 on tcp) */
  uint32_t rkey; /* verbs/efa remote key (0 on tcp) */
  void *handle;  /* provider's object (struct ibv_mr *) */
} mkx_net_mr;

/* What a peer needs to write into a region: exchanged by the caller
 * (mkx_net_exchange_keys), fixed size so it goes through an allgather. */
typedef struct mkx_net_rkey {
  uint64_t addr; /* remote virtual address of byte 0 */
  uint64_t len;
  uint32_t rkey; /* verbs/efa remote key */
  uint32_t id;   /* region id (tcp addresses regions by id) */
} mkx_net_rkey;

typedef struct mkx_net_reg_args {
  void *base;
  size_t len;
  int kind;               /* MKX_NET_MEM_* */
  int dmabuf_fd;          /* device memory: DMA-BUF fd, -1 if none */
  uint64_t dmabuf_offset; /* offset of base inside the DMA-BUF */
} mkx_net_reg_args;

/* A finished write: its send buffer may be reused. */
typedef struct mkx_net_completion {
  uint64_t cookie; /* as given to mkx_net_write_signal */
  int peer;
} mkx_net_completion;

/* What a provider offers, for callers that adapt to it (a fourth provider
 * says what it is here, not in the callers). */
enum {
  /* registers GPU memory itself (else it stages it through host memory) */
  MKX_NET_CAP_DEVICE_MEM = 1u << 0,
  /* a peer sees the writes to it in the order they were posted (else only
   * each write's own data before its signal) */
  MKX_NET_CAP_ORDERED = 1u << 1,
};

/* The provider table.  Every function returns an MKX error code and
 * records a message (mkx_error) on failure. */
struct mkx_net_provider {
  const char *name;
  unsigned caps;   /* MKX_NET_CAP_* */
  int signal_bits; /* low bits of a signal value carried (64: all) */
  /* The options only this provider reads (NULL: none), rows it owns and
   * mkx_net_options_register hands to the options table. */
  const mkx_option_desc *options;
  /* MKX_SUCCESS if this provider can run here (device present). */
  int (*probe)(const mkx_net_params *p);
  /* Fill n->impl; n->signals is allocated by the provider (it may need
   * to register it). */
  int (*open)(mkx_net *n, const mkx_net_params *p);
  /* This rank's address blob, identical length on every rank. */
  int (*address)(mkx_net *n, const void **blob, size_t *len);
  /* blobs: size * len bytes, rank order (this rank's own included). */
  int (*connect)(mkx_net *n, const void *blobs, size_t len);
  int (*reg)(mkx_net *n, const mkx_net_reg_args *a, mkx_net_mr *mr);
  int (*dereg)(mkx_net *n, mkx_net_mr *mr);
  int (*write_signal)(mkx_net *n, int peer, const mkx_net_mr *src,
                      size_t src_off, const mkx_net_rkey *dst, size_t dst_off,
                      size_t len, uint32_t slot, uint64_t value,
                      uint64_t cookie);
  /* Completions into done[0..max), count in *ndone; arrived signals are
   * applied to n->signals. */
  int (*poll)(mkx_net *n, mkx_net_completion *done, int max, int *ndone);
  void (*close)(mkx_net *n);
};

/* The endpoint: fields common to every provider. */
struct mkx_net {
  const mkx_net_provider *prov;
  int rank, size;
  uint32_t num_signals;
  int64_t timeout_ms;
  _Atomic uint64_t *signals;    /* [num_signals], set by peers */
  _Atomic uint64_t *bytes_sent; /* [size] payload bytes posted per peer */
  int connected;
  void *impl; /* provider state */
};

extern const mkx_net_provider mkx_net_tcp_provider;
extern const mkx_net_provider mkx_net_verbs_provider;
extern const mkx_net_provider mkx_net_efa_provider;
extern const mkx_net_provider mkx_net_shm_provider;

/* Registers the transports' option rows (the `net` choice, then each
 * provider's) with the options table, as core/options.h says: before
 * options are loaded, again as often as wanted.  comm calls it before
 * it loads a communicator's options; tests that load options without a
 * communicator call it first. */
int mkx_net_options_register(void);

/* Open with the provider the `net` option names (auto: verbs, efa, tcp,
 * the first whose probe succeeds). */
int mkx_net_open(const mkx_net_params *p, mkx_net **out);
/* The same with an explicit provider (tests). */
int mkx_net_open_with(const mkx_net_provider *prov, const mkx_net_params *p,
                      mkx_net **out);
/* Collective: allgather the blobs over oob (which checks every rank chose
 * the same provider), then connect. */
int mkx_net_connect(mkx_net *n, const mkx_oob *oob);
int mkx_net_reg(mkx_net *n, const mkx_net_reg_args *a, mkx_net_mr *mr);
int mkx_net_dereg(mkx_net *n, mkx_net_mr *mr);
void mkx_net_rkey_of(const mkx_net_mr *mr, mkx_net_rkey *key);
/* Collective: keys[r] = the rkey of rank r's `mr`. */
int mkx_net_exchange_keys(mkx_net *n, const mkx_oob *oob, const mkx_net_mr *mr,
                          mkx_net_rkey *keys);
int mkx_net_write_signal(mkx_net *n, int peer, const mkx_net_mr *src,
                         size_t src_off, const mkx_net_rkey *dst,
                         size_t dst_off, size_t len, uint32_t slot,
                         uint64_t value, uint64_t cookie);
int mkx_net_poll(mkx_net *n, mkx_net_completion *done, int max, int *ndone);
/* Current value of a signal word (acquire: data before it is visible). */
uint64_t mkx_net_signal(const mkx_net *n, uint32_t slot);
/* Poll until signal `slot` >= value; MKX_ERR_TIMEOUT after timeout_ms.
 * Completions seen meanwhile are counted in *completed (may be NULL) and
 * otherwise dropped: use it where nothing tracks send completions. */
int mkx_net_wait_signal(mkx_net *n, uint32_t slot, uint64_t value,
                        int64_t timeout_ms, int *completed);
uint64_t mkx_net_bytes_sent(const mkx_net *n, int peer);
const char *mkx_net_name(const mkx_net *n);
unsigned mkx_net_caps(const mkx_net *n);
int mkx_net_signal_bits(const mkx_net *n);
void mkx_net_close(mkx_net *n);

/* tcp only: the port this endpoint listens on (-1 for other providers),
 * for tests that knock on it with wrong handshakes. */
int mkx_net_tcp_port(const mkx_net *n);

/* shm only (0 for other providers): writes placed straight into a peer's
 * region so far; *enabled: whether direct placement is still on (option
 * net_shm_cma, and not refused by the system), for tests. */
uint64_t mkx_net_shm_placed(const mkx_net *n, int *enabled);
/* shm only: writes copied straight into a peer's device region (CUDA IPC)
 * so far; *enabled: whether that is still on (option net_shm_ipc, a stager
 * that offers it, and no peer's mapping refused), for tests. */
uint64_t mkx_net_shm_ipc_copies(const mkx_net *n, int *enabled);

/* How tcp moves device memory: through pinned host buffers of stage_bytes
 * each (one for sending, one for receiving, per endpoint), with these
 * copies.  The CUDA stager (stage_cuda.c) copies with cudaMemcpyAsync on
 * non-blocking streams of its own, so the copies never wait for a kernel
 * (which may be the very kernel waiting for them) and waits for each copy
 * before the bytes go on.  Tests install a fake to test the staging logic
 * without a GPU.  Every function returns an MKX code. */
typedef struct mkx_net_stager {
  const char *name;
  size_t stage_bytes;
  /* The device ordinal of p if it is memory sockets cannot read (device
   * or managed CUDA memory), else -1.  Must not fail. */
  int (*device_of)(const void *p);
  /* Per endpoint and device: whatever the copies need (streams). */
  int (*open)(int device, void **ctx);
  void (*close)(void *ctx);
  int (*host_alloc)(void *ctx, size_t bytes, void **p); /* pinned */
  void (*host_free)(void *ctx, void *p);
  /* Synchronous: done when they return.  to_host is called by sending
   * threads, to_device by tcp's progress thread, possibly at once. */
  int (*to_host)(void *ctx, void *dst, const void *src, size_t len);
  int (*to_device)(void *ctx, void *dst, const void *src, size_t len);
  /* Optional (NULL: not offered): device memory that other processes of
   * the host map (the shm provider copies writes straight into it).
   * ipc_export: a handle of the allocation holding p (at most
   * MKX_NET_IPC_BYTES) and p's offset in it; ipc_import: the allocation of
   * another process's handle mapped here (*base: its byte 0); ipc_release:
   * that mapping undone; copy: synchronous, between two pointers of this
   * process, device or host (called by sending threads). */
  int (*ipc_export)(void *ctx, const void *p, void *handle, uint64_t *offset);
  int (*ipc_import)(void *ctx, const void *handle, void **base);
  void (*ipc_release)(void *ctx, void *base);
  int (*copy)(void *ctx, void *dst, const void *src, size_t len);
} mkx_net_stager;
#define MKX_NET_IPC_BYTES 64

/* The CUDA stager; NULL in a build without CUDA. */
const mkx_net_stager *mkx_net_cuda_stager(void);
/* The stager of tcp endpoints opened from now on (NULL: the CUDA one). */
void mkx_net_tcp_set_stager(const mkx_net_stager *s);
/* Likewise for shm endpoints (tests: a fake with IPC over host memory). */
void mkx_net_shm_set_stager(const mkx_net_stager *s);

/* For providers: `num` zeroed signal words in whole, page-aligned pages
 * (so a GPU mapping of them never shares a page with anything else);
 * release with free(). */
int mkx_net_signals_alloc(uint32_t num, _Atomic uint64_t **out);

/* For providers: a growable FIFO of completions (not thread-safe: guard
 * it where two threads touch it). */
typedef struct mkx_net_fifo {
  mkx_net_completion *v;
  size_t head, n, cap;
} mkx_net_fifo;
int mkx_net_fifo_push(mkx_net_fifo *f, uint64_t cookie, int peer);
int mkx_net_fifo_pop(mkx_net_fifo *f, mkx_net_completion *out, int max);
void mkx_net_fifo_free(mkx_net_fifo *f);

/* For providers: milliseconds on a monotonic clock; argument checks
 * shared by every write_signal. */
int64_t mkx_net_now_ms(void);
int mkx_net_check_write(const mkx_net *n, int peer, const mkx_net_mr *src,
                        size_t src_off, const mkx_net_rkey *dst, size_t dst_off,
                        size_t len, uint32_t slot);

#endif
