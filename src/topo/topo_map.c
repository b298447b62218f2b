/* The GPU map: nearest NICs shared fairly, proxy cores, peer domain.
 *
 * Every rank of a node computes the whole node's assignment from the same
 * inputs (topology, GPUs in use, peer matrix) and keeps its own GPU's part,
 * so the ranks agree without exchanging anything.  Rules (docs/topology.md):
 *  - a GPU's candidate NICs are those at the smallest distance: same PCIe
 *    switch (fewest PCI hops first), then same host bridge, NUMA node,
 *    package, and finally any NIC;
 *  - GPUs with identical candidate sets share them evenly: with more NICs
 *    than GPUs each GPU gets a contiguous slice (p5: 4 EFA each), with fewer
 *    each NIC serves a contiguous group of GPUs (8 GPUs, 4 NICs: 2 each);
 *    NICs not yet taken by another group are preferred;
 *  - the cores of a NUMA node are cut into one contiguous slice per GPU in
 *    use on that node, so proxy threads never share a core unless there are
 *    more GPUs than cores. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "topo/topo_internal.h"

typedef struct {
  int n, cls;
  int nics[MKX_TOPO_MAX_NICS];
} nic_choice;

/* Distance class of two devices, and (within a switch) the PCI hops. */
static int distance(const mkx_topo_dev *a, const mkx_topo_dev *b, int *hops) {
  *hops = 0;
  for (int i = 0; i < a->depth; i++)
    for (int j = 0; j < b->depth; j++) {
      if (a->path[i].id != b->path[j].id) continue;
      char k = a->path[i].kind;
      if (k == 'D' || k == 'S') {
        *hops = i + j;
        return MKX_TOPO_SAME_SWITCH;
      }
      if (k == 'H') return MKX_TOPO_SAME_HOSTBRIDGE;
      i = a->depth; /* a CPU-side object: decide by locality below */
      break;
    }
  if (a->pub.numa >= 0 && a->pub.numa == b->pub.numa) return MKX_TOPO_SAME_NUMA;
  if (a->package >= 0 && a->package == b->package) return MKX_TOPO_SAME_PACKAGE;
  return MKX_TOPO_SYSTEM;
}

/* One comparable number: class first, hops only inside a switch (beyond it,
 * the depth of a PCI tree says nothing about speed). */
static int distance_key(const mkx_topo_dev *g, const mkx_topo_dev *n,
                        int *cls) {
  int hops;
  *cls = distance(g, n, &hops);
  return *cls * 1000 + (*cls == MKX_TOPO_SAME_SWITCH ? hops : 0);
}

/* cand[g * nnics + n] = 1 for the NICs nearest to in-use GPU g. */
static void find_candidates(const mkx_topo *t, unsigned char *cand, int *cls) {
  for (int g = 0; g < t->ngpus; g++) {
    if (!t->in_use[g]) continue;
    int best = -1, c;
    for (int n = 0; n < t->nnics; n++) {
      int k = distance_key(&t->gpus[g], &t->nics[n], &c);
      if (best < 0 || k < best) best = k, cls[g] = c;
    }
    for (int n = 0; n < t->nnics; n++)
      cand[g * t->nnics + n] =
          distance_key(&t->gpus[g], &t->nics[n], &c) == best;
  }
}

static int count_row(const unsigned char *row, int n) {
  int c = 0;
  for (int i = 0; i < n; i++) c += row[i];
  return c;
}

/* Next group to place: the unplaced in-use GPU with the fewest candidates
 * (most constrained first), lowest index on ties; -1 when all are placed. */
static int next_leader(const mkx_topo *t, const unsigned char *cand,
                       const unsigned char *done) {
  int lead = -1, best = 0;
  for (int g = 0; g < t->ngpus; g++) {
    if (!t->in_use[g] || done[g]) continue;
    int c = count_row(cand + g * t->nnics, t->nnics);
    if (lead < 0 || c < best) lead = g, best = c;
  }
  return lead;
}

/* Share `pool` (P NICs) among the k GPUs of `members`. */
static void share_pool(const int *members, int k, const int *pool, int P,
                       int *load, nic_choice *ch) {
  for (int i = 0; i < k; i++) {
    nic_choice *c = &ch[members[i]];
    if (P >= k) { /* a contiguous slice of P/k (or one more) NICs each */
      for (int j = i * P / k; j < (i + 1) * P / k && c->n < MKX_TOPO_MAX_NICS;
           j++)
        c->nics[c->n++] = pool[j], load[pool[j]]++;
    } else { /* a contiguous group of k/P GPUs on each NIC */
      c->nics[c->n++] = pool[i * P / k];
      load[pool[i * P / k]]++;
    }
  }
}

/* Place one group: the GPUs whose candidate set equals the leader's. */
static void place_group(const mkx_topo *t, const unsigned char *cand, int lead,
                        unsigned char *done, int *load, int *scratch,
                        nic_choice *ch) {
  const unsigned char *row = cand + lead * t->nnics;
  int *members = scratch, *pool = scratch + t->ngpus, k = 0, P = 0, nfree = 0;
  for (int g = 0; g < t->ngpus; g++)
    if (t->in_use[g] && !done[g] &&
        !memcmp(cand + g * t->nnics, row, (size_t)t->nnics))
      members[k++] = g, done[g] = 1;
  for (int n = 0; n < t->nnics; n++) nfree += row[n] && load[n] == 0;
  for (int n = 0; n < t->nnics; n++) /* untaken NICs if they suffice */
    if (row[n] && (nfree < k || load[n] == 0)) pool[P++] = n;
  share_pool(members, k, pool, P, load, ch);
}

static int assign_nics(const mkx_topo *t, nic_choice *ch, int *load) {
  size_t G = (size_t)t->ngpus, N = (size_t)t->nnics;
  unsigned char *cand = calloc(G * N + 1, 1), *done = calloc(G, 1);
  int *cls = calloc(G, sizeof *cls),
      *scratch = malloc((G + N) * sizeof *scratch);
  int rc = MKX_SUCCESS;
  if (!cand || !done || !cls || !scratch) {
    rc = mkx_error(MKX_ERR_NOMEM, "topology map: no memory");
    goto out;
  }
  find_candidates(t, cand, cls);
  for (int lead; N > 0 && (lead = next_leader(t, cand, done)) >= 0;)
    place_group(t, cand, lead, done, load, scratch, ch);
  for (size_t g = 0; g < G; g++) ch[g].cls = ch[g].n ? cls[g] : -1;
out:
  free(cand), free(done), free(cls), free(scratch);
  return rc;
}

static int fill_nics(const mkx_topo *t, int g, mkx_gpu_map *m) {
  size_t G = (size_t)t->ngpus;
  nic_choice *ch = calloc(G, sizeof *ch);
  int *load = calloc((size_t)t->nnics + 1, sizeof *load);
  int rc = ch && load ? assign_nics(t, ch, load)
                      : mkx_error(MKX_ERR_NOMEM, "topology map: no memory");
  if (rc == MKX_SUCCESS) {
    m->num_nics = ch[g].n;
    m->nic_distance = ch[g].cls;
    for (int i = 0; i < ch[g].n; i++) {
      int n = ch[g].nics[i];
      m->nics[i] = n;
      snprintf(m->nic_names[i], sizeof m->nic_names[i], "%s",
               t->nics[n].pub.name);
      if (load[n] > m->nic_sharers) m->nic_sharers = load[n];
    }
  }
  free(ch), free(load);
  return rc;
}

/* The NUMA node whose core list a GPU uses: its own, or -1 (all cores)
 * when its node is unknown or has no cores (memory-only node). */
static int core_node(const mkx_topo *t, int numa) {
  for (int c = 0; c < t->ncores; c++)
    if (t->cores[c].numa == numa && numa >= 0) return numa;
  return -1;
}

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* "0-13,112-125"; stops at the last whole entry that fits, so a cut list
 * is still a valid (smaller) cpuset. */
static void format_list(const int *v, int n, char *buf, size_t len) {
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < n;) {
    int j = i;
    while (j + 1 < n && v[j + 1] == v[j] + 1) j++;
    char item[32];
    int w = j > i ? snprintf(item, sizeof item, "%s%d-%d", used ? "," : "",
                             v[i], v[j])
                  : snprintf(item, sizeof item, "%s%d", used ? "," : "", v[i]);
    if (used + (size_t)w >= len) break;
    memcpy(buf + used, item, (size_t)w + 1);
    used += (size_t)w;
    i = j + 1;
  }
}

static int fill_cpus(const mkx_topo *t, int g, mkx_gpu_map *m) {
  int node = core_node(t, t->gpus[g].pub.numa), p = 0, k = 0, nc = 0;
  for (int i = 0; i < t->ngpus; i++) /* GPUs in use drawing on these cores */
    if (t->in_use[i] && core_node(t, t->gpus[i].pub.numa) == node) {
      if (i < g) p++;
      k++;
    }
  for (int c = 0; c < t->ncores; c++) nc += t->cores[c].numa == node;
  if (nc == 0) return MKX_SUCCESS; /* no cores known: leave cpus empty */
  int lo = nc >= k ? p * nc / k : p % nc,
      hi = nc >= k ? (p + 1) * nc / k : lo + 1;
  int *pus = malloc((size_t)(hi - lo) * MKX_TOPO_MAX_SMT * sizeof *pus),
      npus = 0;
  if (!pus) return mkx_error(MKX_ERR_NOMEM, "topology map: no memory");
  for (int c = 0, idx = 0; c < t->ncores; c++) {
    if (t->cores[c].numa != node) continue;
    if (idx >= lo && idx < hi)
      for (int u = 0; u < t->cores[c].npus; u++)
        pus[npus++] = t->cores[c].pus[u];
    idx++;
  }
  qsort(pus, (size_t)npus, sizeof *pus, cmp_int);
  format_list(pus, npus, m->cpus, sizeof m->cpus);
  free(pus);
  return MKX_SUCCESS;
}

static int mutual(const mkx_topo *t, int i, int j) {
  return t->peer[i * t->ngpus + j] == 1 && t->peer[j * t->ngpus + i] == 1;
}

/* The connected component of g under mutual peer access. */
static int fill_domain(const mkx_topo *t, int g, mkx_gpu_map *m) {
  m->domain = -1;
  if (t->peer[g * t->ngpus + g] != 1) return MKX_SUCCESS; /* never probed */
  unsigned char *in = calloc((size_t)t->ngpus, 1);
  int *queue = malloc((size_t)t->ngpus * sizeof *queue), head = 0, tail = 0;
  if (!in || !queue) {
    free(in), free(queue);
    return mkx_error(MKX_ERR_NOMEM, "topology map: no memory");
  }
  in[g] = 1, queue[tail++] = g;
  while (head < tail)
    for (int i = queue[head++], j = 0; j < t->ngpus; j++)
      if (!in[j] && mutual(t, i, j)) in[j] = 1, queue[tail++] = j;
  for (int j = 0; j < t->ngpus; j++) {
    if (!in[j]) continue;
    if (m->domain < 0) m->domain = j;
    m->domain_size++;
    if (j < 64) m->domain_mask |= (uint64_t)1 << j;
  }
  free(in), free(queue);
  return MKX_SUCCESS;
}

int mkx_topo_map_gpu(const mkx_topo *t, const char *gpu_pci, mkx_gpu_map *m) {
  if (!t || !gpu_pci || !m)
    return mkx_error(MKX_ERR_NULL_POINTER, "mkx_topo_map_gpu: NULL argument");
  memset(m, 0, sizeof *m);
  m->gpu_index = m->numa = m->nic_distance = m->domain = -1;
  if (t->ngpus == 0)
    return mkx_error(MKX_ERR_UNSUPPORTED, "topology has no GPU (asked for %s)",
                     gpu_pci);
  int g = mkx_topo_find_gpu(t, gpu_pci);
  if (g < 0) return -g;
  if (!t->in_use[g])
    return mkx_error(MKX_ERR_INVALID_ARG,
                     "GPU %s is not among the GPUs in use on the node",
                     gpu_pci);
  m->gpu_index = g;
  snprintf(m->pci, sizeof m->pci, "%s", t->gpus[g].pub.pci);
  snprintf(m->name, sizeof m->name, "%s", t->gpus[g].pub.name);
  m->numa = t->gpus[g].pub.numa;
  MKX_TRY(fill_nics(t, g, m));
  MKX_TRY(fill_cpus(t, g, m));
  return fill_domain(t, g, m);
}

const char *mkx_topo_distance_name(int d) {
  static const char *const names[] = {"same PCIe switch", "same host bridge",
                                      "same NUMA node", "same package",
                                      "across sockets"};
  return d >= 0 && d <= MKX_TOPO_SYSTEM ? names[d] : "none";
}

/* snprintf that appends and remembers whether anything was cut. */
static void put(char *buf, size_t len, size_t *used, int *cut, const char *fmt,
                ...) MKX_PRINTF(5, 6);
static void put(char *buf, size_t len, size_t *used, int *cut, const char *fmt,
                ...) {
  va_list ap;
  va_start(ap, fmt);
  size_t room = *used < len ? len - *used : 0;
  int w = vsnprintf(room ? buf + *used : NULL, room, fmt, ap);
  va_end(ap);
  if (w < 0 || (size_t)w >= room) *cut = 1;
  *used += w > 0 ? (size_t)w : 0;
}

int mkx_topo_describe(const mkx_gpu_map *m, char *buf, size_t len) {
  if (!m || !buf || len == 0)
    return mkx_error(MKX_ERR_NULL_POINTER, "mkx_topo_describe: NULL argument");
  size_t u = 0;
  int cut = 0;
  put(buf, len, &u, &cut, "GPU %d %s%s%s: NUMA ", m->gpu_index, m->pci,
      m->name[0] ? " " : "", m->name);
  if (m->numa >= 0)
    put(buf, len, &u, &cut, "%d", m->numa);
  else
    put(buf, len, &u, &cut, "?");
  put(buf, len, &u, &cut, ", cores %s, ", m->cpus[0] ? m->cpus : "any");
  if (m->num_nics == 0) put(buf, len, &u, &cut, "no RDMA NIC");
  for (int i = 0; i < m->num_nics; i++)
    put(buf, len, &u, &cut, "%s%s",
        i ? "," : (m->num_nics > 1 ? "NICs " : "NIC "), m->nic_names[i]);
  if (m->num_nics > 0 && m->nic_sharers > 1)
    put(buf, len, &u, &cut, " (%s, shared by %d GPUs)",
        mkx_topo_distance_name(m->nic_distance), m->nic_sharers);
  else if (m->num_nics > 0)
    put(buf, len, &u, &cut, " (%s, own)",
        mkx_topo_distance_name(m->nic_distance));
  if (m->domain >= 0)
    put(buf, len, &u, &cut, ", peer domain %d (%d GPUs)", m->domain,
        m->domain_size);
  else
    put(buf, len, &u, &cut, ", peer domain not probed");
  if (cut)
    return mkx_error(MKX_ERR_TRUNCATE,
                     "mkx_topo_describe: %zu bytes needed, %zu given", u + 1,
                     len);
  return MKX_SUCCESS;
}
