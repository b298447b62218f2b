/* The topology object: lifetime, lookups by PCI bus id, and the inputs the
 * caller adds after loading (GPUs in use, peer access).  No hwloc here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "topo/topo_internal.h"

void mkx_topo_free(mkx_topo *t) {
  if (!t) return;
  free(t->gpus);
  free(t->nics);
  free(t->cores);
  free(t->in_use);
  free(t->peer);
  free(t);
}

int mkx_topo_init_state(mkx_topo *t) {
  size_t n = t->ngpus > 0 ? (size_t)t->ngpus : 1;
  t->in_use = malloc(n);
  t->peer = malloc(n * n);
  if (!t->in_use || !t->peer)
    return mkx_error(MKX_ERR_NOMEM, "topology: no memory");
  memset(t->in_use, 1, n);
  memset(t->peer, -1, n * n);
  return MKX_SUCCESS;
}

int mkx_topo_num_gpus(const mkx_topo *t) { return t ? t->ngpus : 0; }
int mkx_topo_num_nics(const mkx_topo *t) { return t ? t->nnics : 0; }

static int get_dev(const mkx_topo_dev *arr, int n, int i, mkx_topo_device *d,
                   const char *what) {
  if (!d)
    return mkx_error(MKX_ERR_NULL_POINTER, "mkx_topo_%s: output is NULL", what);
  if (i < 0 || i >= n)
    return mkx_error(MKX_ERR_INVALID_ARG,
                     "mkx_topo_%s: index %d not in [0, %d)", what, i, n);
  *d = arr[i].pub;
  return MKX_SUCCESS;
}

int mkx_topo_gpu(const mkx_topo *t, int i, mkx_topo_device *d) {
  if (!t)
    return mkx_error(MKX_ERR_NULL_POINTER, "mkx_topo_gpu: topology is NULL");
  return get_dev(t->gpus, t->ngpus, i, d, "gpu");
}

int mkx_topo_nic(const mkx_topo *t, int i, mkx_topo_device *d) {
  if (!t)
    return mkx_error(MKX_ERR_NULL_POINTER, "mkx_topo_nic: topology is NULL");
  return get_dev(t->nics, t->nnics, i, d, "nic");
}

/* Exactly one hex field of at most `max` digits, then `sep` (or the end). */
static const char *hex_field(const char *s, int max, char sep, unsigned *v) {
  int n = 0;
  *v = 0;
  for (; n < max; n++, s++) {
    int c = (unsigned char)*s, d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
      d = c - 'A' + 10;
    else
      break;
    *v = *v * 16 + (unsigned)d;
  }
  if (n == 0 || *s != sep) return NULL;
  return sep ? s + 1 : s;
}

int mkx_topo_parse_pci(const char *s, unsigned *dom, unsigned *bus,
                       unsigned *dev, unsigned *fn) {
  if (!s) return -1;
  /* Two colons: the id starts with a domain; one: it does not. */
  int colons = 0;
  for (const char *p = s; *p; p++) colons += *p == ':';
  if (colons != 1 && colons != 2) return -1;
  *dom = 0;
  if (colons == 2 && !(s = hex_field(s, 8, ':', dom))) return -1;
  if (!(s = hex_field(s, 2, ':', bus)) || !(s = hex_field(s, 2, '.', dev)) ||
      !hex_field(s, 1, '\0', fn))
    return -1;
  return *dev <= 0x1f && *fn <= 7 ? 0 : -1;
}

int mkx_topo_find_gpu(const mkx_topo *t, const char *pci) {
  unsigned dom, bus, dev, fn;
  if (!t || !pci)
    return -mkx_error(MKX_ERR_NULL_POINTER,
                      "mkx_topo_find_gpu: topology or PCI id is NULL");
  if (mkx_topo_parse_pci(pci, &dom, &bus, &dev, &fn) != 0)
    return -mkx_error(MKX_ERR_INVALID_ARG,
                      "GPU PCI id \"%s\" is malformed (want 0000:1b:00.0)",
                      pci);
  for (int i = 0; i < t->ngpus; i++) {
    const mkx_topo_dev *g = &t->gpus[i];
    if (g->dom == dom && g->bus == bus && g->dev == dev && g->fn == fn)
      return i;
  }
  return -mkx_error(MKX_ERR_INVALID_ARG,
                    "no GPU with PCI id %s in the topology (%d GPUs)", pci,
                    t->ngpus);
}

int mkx_topo_set_gpus_in_use(mkx_topo *t, int n, const char *const *pcis) {
  if (!t)
    return mkx_error(MKX_ERR_NULL_POINTER,
                     "mkx_topo_set_gpus_in_use: topology is NULL");
  if (n < 0 || (n > 0 && !pcis))
    return mkx_error(MKX_ERR_INVALID_ARG,
                     "mkx_topo_set_gpus_in_use: n=%d, list %p", n,
                     (const void *)pcis);
  int idx[256];
  if (n > 256)
    return mkx_error(MKX_ERR_INVALID_ARG, "mkx_topo_set_gpus_in_use: %d GPUs",
                     n);
  for (int i = 0; i < n; i++) /* validate all before changing anything */
    if ((idx[i] = mkx_topo_find_gpu(t, pcis[i])) < 0) return -idx[i];
  memset(t->in_use, n == 0, t->ngpus > 0 ? (size_t)t->ngpus : 1);
  for (int i = 0; i < n; i++) t->in_use[idx[i]] = 1;
  return MKX_SUCCESS;
}

int mkx_topo_set_peer_matrix(mkx_topo *t, int n, const char *const *pcis,
                             const int *can_access) {
  if (!t || (n > 0 && (!pcis || !can_access)))
    return mkx_error(MKX_ERR_NULL_POINTER,
                     "mkx_topo_set_peer_matrix: NULL argument");
  if (n < 0 || n > 256)
    return mkx_error(MKX_ERR_INVALID_ARG, "mkx_topo_set_peer_matrix: n=%d", n);
  int idx[256];
  for (int i = 0; i < n; i++)
    if ((idx[i] = mkx_topo_find_gpu(t, pcis[i])) < 0) return -idx[i];
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++)
      t->peer[idx[i] * t->ngpus + idx[j]] =
          (signed char)(i == j || can_access[i * n + j] != 0);
  return MKX_SUCCESS;
}
