/* Provider selection and the parts of the interface every provider shares:
 * the address exchange over the bootstrap, argument checks, counters and
 * the bounded signal wait. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "core/error.h"
#include "core/log.h"
#include "net/net.h"

/* The order `auto` tries them in: RDMA first, sockets last. */
static const mkx_net_provider *const by_option[] = {
    [MKX_NET_VERBS] = &mkx_net_verbs_provider,
    [MKX_NET_EFA] = &mkx_net_efa_provider,
    [MKX_NET_TCP] = &mkx_net_tcp_provider,
    [MKX_NET_SHM] = &mkx_net_shm_provider,
};

static const mkx_option_desc net_options[] = {
    {"net", MKX_OPT_ENUM, offsetof(mkx_options, net), "auto",
     "auto|verbs|efa|tcp|shm",
     "Network transport between nodes. auto: verbs if an RDMA (InfiniBand "
     "or RoCE) device exists, else efa if an EFA device exists, else tcp; "
     "every rank must end up with the same choice. shm (never chosen by "
     "auto): shared memory between the virtual nodes of one host, with an "
     "optional emulated link (net_shm_bandwidth, net_shm_latency_us).",
     1},
    {NULL, 0, 0, NULL, NULL, NULL},
};

/* The order mkx_info lists the providers' rows in: tcp, which runs
 * everywhere, before the RDMA providers. */
static const mkx_net_provider *const by_listing[] = {
    &mkx_net_tcp_provider, &mkx_net_verbs_provider, &mkx_net_efa_provider,
    &mkx_net_shm_provider};

int mkx_net_options_register(void) {
  MKX_TRY(mkx_options_add_rows(net_options));
  for (size_t i = 0; i < sizeof by_listing / sizeof *by_listing; i++)
    if (by_listing[i]->options)
      MKX_TRY(mkx_options_add_rows(by_listing[i]->options));
  return MKX_SUCCESS;
}

int64_t mkx_net_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int mkx_net_signals_alloc(uint32_t num, _Atomic uint64_t **out) {
  size_t page = 4096,
         bytes = ((size_t)num * sizeof(uint64_t) + page - 1) & ~(page - 1);
  void *mem = NULL;
  *out = NULL;
  if (posix_memalign(&mem, page, bytes ? bytes : page) != 0)
    return mkx_error(MKX_ERR_NOMEM, "net: %u signal words", num);
  memset(mem, 0, bytes ? bytes : page);
  *out = mem;
  return MKX_SUCCESS;
}

int mkx_net_fifo_push(mkx_net_fifo *f, uint64_t cookie, int peer) {
  if (f->head + f->n == f->cap) {
    if (f->head > 0) { /* slide down before growing */
      memmove(f->v, f->v + f->head, f->n * sizeof *f->v);
      f->head = 0;
    } else {
      size_t cap = f->cap ? 2 * f->cap : 64;
      mkx_net_completion *v = realloc(f->v, cap * sizeof *v);
      if (!v) return mkx_error(MKX_ERR_NOMEM, "net: completion queue");
      f->v = v, f->cap = cap;
    }
  }
  f->v[f->head + f->n++] = (mkx_net_completion){cookie, peer};
  return MKX_SUCCESS;
}

int mkx_net_fifo_pop(mkx_net_fifo *f, mkx_net_completion *out, int max) {
  int k = 0;
  for (; k < max && f->n; k++, f->n--) out[k] = f->v[f->head++];
  if (f->n == 0) f->head = 0;
  return k;
}

void mkx_net_fifo_free(mkx_net_fifo *f) {
  free(f->v);
  *f = (mkx_net_fifo){0};
}

static int check_params(const mkx_net_params *p) {
  if (!p || !p->opt) return mkx_error(MKX_ERR_NULL_POINTER, "net: params");
  if (p->size < 1 || p->rank < 0 || p->rank >= p->size)
    return mkx_error(MKX_ERR_INVALID_ARG, "net: rank %d of %d", p->rank,
                     p->size);
  if (p->num_signals < 1 || p->num_signals > 65536)
    return mkx_error(MKX_ERR_INVALID_ARG,
                     "net: %u signal slots (1 to 65536: efa carries the "
                     "slot in 16 bits of immediate data)",
                     p->num_signals);
  return MKX_SUCCESS;
}

int mkx_net_open_with(const mkx_net_provider *prov, const mkx_net_params *p,
                      mkx_net **out) {
  MKX_TRY(check_params(p));
  mkx_net *n = calloc(1, sizeof *n);
  if (!n) return mkx_error(MKX_ERR_NOMEM, "net: endpoint");
  n->bytes_sent = calloc((size_t)p->size, sizeof *n->bytes_sent);
  if (!n->bytes_sent) {
    free(n);
    return mkx_error(MKX_ERR_NOMEM, "net: counters");
  }
  n->prov = prov;
  n->rank = p->rank;
  n->size = p->size;
  n->num_signals = p->num_signals;
  n->timeout_ms = p->timeout_ms > 0 ? p->timeout_ms : 300000;
  int rc = prov->open(n, p);
  if (rc != MKX_SUCCESS) {
    free(n->bytes_sent);
    free(n);
    return rc;
  }
  *out = n;
  mkx_log(MKX_LOG_INFO,
          "net: rank %d uses the %s transport (GPU memory %s, "
          "writes %s, %d-bit signals)",
          p->rank, prov->name,
          prov->caps & MKX_NET_CAP_DEVICE_MEM ? "registered" : "staged",
          prov->caps & MKX_NET_CAP_ORDERED ? "in order" : "unordered",
          prov->signal_bits);
  return MKX_SUCCESS;
}

/* auto: the first provider whose probe succeeds; probes leave a message
 * saying why they declined, logged at info. */
static int pick_auto(const mkx_net_params *p, const mkx_net_provider **out) {
  for (int i = MKX_NET_VERBS; i <= MKX_NET_TCP; i++) {
    if (by_option[i]->probe(p) == MKX_SUCCESS) {
      *out = by_option[i];
      return MKX_SUCCESS;
    }
    mkx_log(MKX_LOG_INFO, "net: %s not usable: %s", by_option[i]->name,
            MKX_Get_last_error());
  }
  return mkx_error(MKX_ERR_NET, "net: no transport usable (tcp: %s)",
                   MKX_Get_last_error());
}

int mkx_net_open(const mkx_net_params *p, mkx_net **out) {
  const mkx_net_provider *prov = NULL;
  MKX_TRY(check_params(p));
  int choice = p->opt->net;
  if (choice == MKX_NET_AUTO) {
    MKX_TRY(pick_auto(p, &prov));
  } else if (choice >= MKX_NET_VERBS && choice <= MKX_NET_SHM) {
    prov = by_option[choice];
    MKX_TRY(prov->probe(p)); /* asked for by name: its reason is the error */
  } else {
    return mkx_error(MKX_ERR_INVALID_ARG, "net: option value %d", choice);
  }
  return mkx_net_open_with(prov, p, out);
}

/* What every rank says about itself before the blobs: its provider and
 * blob length, so a mixed choice is an error rather than garbage. */
typedef struct blob_header {
  char magic[8];
  char provider[16];
  uint64_t len;
} blob_header;

static int agree_on_provider(mkx_net *n, const mkx_oob *oob, size_t len) {
  blob_header mine = {.magic = "MKXNET1", .len = len}, *all;
  snprintf(mine.provider, sizeof mine.provider, "%s", n->prov->name);
  all = calloc((size_t)n->size, sizeof *all);
  if (!all) return mkx_error(MKX_ERR_NOMEM, "net: headers");
  int rc = oob->allgather(oob->ctx, &mine, all, sizeof mine, n->timeout_ms,
                          "network transport");
  for (int r = 0; rc == MKX_SUCCESS && r < n->size; r++)
    if (memcmp(&all[r], &mine, sizeof mine) != 0)
      rc = mkx_error(MKX_ERR_NET,
                     "net: rank %d chose transport '%.15s' (blob %llu "
                     "bytes), rank %d chose '%s' (%zu): set MKX_NET alike "
                     "on every rank",
                     r, all[r].provider, (unsigned long long)all[r].len,
                     n->rank, n->prov->name, len);
  free(all);
  return rc;
}

int mkx_net_connect(mkx_net *n, const mkx_oob *oob) {
  const void *blob;
  size_t len;
  if (!n || !oob) return mkx_error(MKX_ERR_NULL_POINTER, "net: connect");
  MKX_TRY(n->prov->address(n, &blob, &len));
  MKX_TRY(agree_on_provider(n, oob, len));
  char *all = malloc(len * (size_t)n->size);
  if (!all) return mkx_error(MKX_ERR_NOMEM, "net: address blobs");
  int rc = oob->allgather(oob->ctx, blob, all, len, n->timeout_ms,
                          "network addresses");
  if (rc == MKX_SUCCESS) rc = n->prov->connect(n, all, len);
  free(all);
  if (rc == MKX_SUCCESS) n->connected = 1;
  return rc;
}

int mkx_net_reg(mkx_net *n, const mkx_net_reg_args *a, mkx_net_mr *mr) {
  if (!n || !a || !mr) return mkx_error(MKX_ERR_NULL_POINTER, "net: reg");
  if (!a->base || a->len == 0)
    return mkx_error(MKX_ERR_INVALID_ARG, "net: reg of %p, %zu bytes", a->base,
                     a->len);
  if (a->kind != MKX_NET_MEM_HOST && a->kind != MKX_NET_MEM_DEVICE)
    return mkx_error(MKX_ERR_INVALID_ARG, "net: memory kind %d", a->kind);
  memset(mr, 0, sizeof *mr);
  return n->prov->reg(n, a, mr);
}

int mkx_net_dereg(mkx_net *n, mkx_net_mr *mr) {
  if (!n || !mr) return mkx_error(MKX_ERR_NULL_POINTER, "net: dereg");
  return n->prov->dereg(n, mr);
}

void mkx_net_rkey_of(const mkx_net_mr *mr, mkx_net_rkey *key) {
  memset(key, 0, sizeof *key);
  key->addr = (uint64_t)(uintptr_t)mr->base;
  key->len = mr->len;
  key->rkey = mr->rkey;
  key->id = mr->id;
}

int mkx_net_exchange_keys(mkx_net *n, const mkx_oob *oob, const mkx_net_mr *mr,
                          mkx_net_rkey *keys) {
  mkx_net_rkey mine;
  if (!n || !oob || !mr || !keys)
    return mkx_error(MKX_ERR_NULL_POINTER, "net: exchange_keys");
  mkx_net_rkey_of(mr, &mine);
  return oob->allgather(oob->ctx, &mine, keys, sizeof mine, n->timeout_ms,
                        "network keys");
}

int mkx_net_check_write(const mkx_net *n, int peer, const mkx_net_mr *src,
                        size_t src_off, const mkx_net_rkey *dst, size_t dst_off,
                        size_t len, uint32_t slot) {
  if (!n->connected)
    return mkx_error(MKX_ERR_INVALID_ARG, "net: write before connect");
  if (peer < 0 || peer >= n->size || peer == n->rank)
    return mkx_error(MKX_ERR_INVALID_ARG,
                     "net: write to rank %d (this is "
                     "rank %d of %d)",
                     peer, n->rank, n->size);
  if (!src || !dst) return mkx_error(MKX_ERR_NULL_POINTER, "net: write region");
  if (src_off > src->len || len > src->len - src_off)
    return mkx_error(MKX_ERR_INVALID_ARG,
                     "net: write of %zu bytes at %zu "
                     "overruns the local region (%zu bytes)",
                     len, src_off, src->len);
  if (dst_off > dst->len || len > dst->len - dst_off)
    return mkx_error(MKX_ERR_INVALID_ARG,
                     "net: write of %zu bytes at %zu "
                     "overruns rank %d's region (%llu bytes)",
                     len, dst_off, peer, (unsigned long long)dst->len);
  if (slot >= n->num_signals)
    return mkx_error(MKX_ERR_INVALID_ARG, "net: signal slot %u of %u", slot,
                     n->num_signals);
  return MKX_SUCCESS;
}

int mkx_net_write_signal(mkx_net *n, int peer, const mkx_net_mr *src,
                         size_t src_off, const mkx_net_rkey *dst,
                         size_t dst_off, size_t len, uint32_t slot,
                         uint64_t value, uint64_t cookie) {
  if (!n) return mkx_error(MKX_ERR_NULL_POINTER, "net: endpoint");
  MKX_TRY(mkx_net_check_write(n, peer, src, src_off, dst, dst_off, len, slot));
  MKX_TRY(n->prov->write_signal(n, peer, src, src_off, dst, dst_off, len, slot,
                                value, cookie));
  /* Counted once posted: the hierarchical calls assert these totals. */
  atomic_fetch_add_explicit(&n->bytes_sent[peer], len, memory_order_relaxed);
  return MKX_SUCCESS;
}

int mkx_net_poll(mkx_net *n, mkx_net_completion *done, int max, int *ndone) {
  if (!n || !ndone || (max > 0 && !done))
    return mkx_error(MKX_ERR_NULL_POINTER, "net: poll");
  *ndone = 0;
  return n->prov->poll(n, done, max, ndone);
}

uint64_t mkx_net_signal(const mkx_net *n, uint32_t slot) {
  return atomic_load_explicit(&n->signals[slot], memory_order_acquire);
}

int mkx_net_wait_signal(mkx_net *n, uint32_t slot, uint64_t value,
                        int64_t timeout_ms, int *completed) {
  mkx_net_completion done[16];
  int64_t deadline = mkx_net_now_ms() + timeout_ms;
  if (slot >= n->num_signals)
    return mkx_error(MKX_ERR_INVALID_ARG, "net: signal slot %u of %u", slot,
                     n->num_signals);
  for (;;) {
    int got = 0;
    MKX_TRY(mkx_net_poll(n, done, 16, &got));
    if (completed) *completed += got;
    if (mkx_net_signal(n, slot) >= value) return MKX_SUCCESS;
    if (mkx_net_now_ms() > deadline)
      return mkx_error(MKX_ERR_TIMEOUT,
                       "net: rank %d: signal %u stayed at "
                       "%llu, waiting for %llu, for %lld ms",
                       n->rank, slot,
                       (unsigned long long)mkx_net_signal(n, slot),
                       (unsigned long long)value, (long long)timeout_ms);
    if (!got) {
      struct timespec pause = {0, 20000}; /* 20 us: a poll is cheap */
      nanosleep(&pause, NULL);
    }
  }
}

uint64_t mkx_net_bytes_sent(const mkx_net *n, int peer) {
  if (!n || peer < 0 || peer >= n->size) return 0;
  return atomic_load_explicit(&n->bytes_sent[peer], memory_order_relaxed);
}

const char *mkx_net_name(const mkx_net *n) {
  return n ? n->prov->name : "none";
}

unsigned mkx_net_caps(const mkx_net *n) { return n->prov->caps; }

int mkx_net_signal_bits(const mkx_net *n) { return n->prov->signal_bits; }

void mkx_net_close(mkx_net *n) {
  if (!n) return;
  n->prov->close(n);
  free(n->bytes_sent);
  free(n);
}
