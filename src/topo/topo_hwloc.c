/* Topology discovery with hwloc 2.x: GPUs, RDMA NICs (OpenFabrics osdevs),
 * their PCI paths, NUMA nodes and the cores of each NUMA node, copied into
 * plain arrays (topo_internal.h) so that nothing else needs hwloc.
 *
 * hwloc pitfalls handled here (../shared/PLATFORM.md): I/O objects are only
 * kept with an explicit I/O type filter; hwloc_get_common_ancestor_obj
 * crashes on I/O objects, so paths are walked through ->parent by hand. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "topo/topo_internal.h"

#if HAVE_HWLOC
#include <hwloc.h>

#define NVIDIA_VENDOR 0x10de

/* hwloc 3 turned the osdev type into a set of flags. */
#if HWLOC_API_VERSION >= 0x00030000
#define IS_OPENFABRICS(o)                                                      \
  (((o)->attr->osdev.types & HWLOC_OBJ_OSDEV_OPENFABRICS) != 0)
#else
#define IS_OPENFABRICS(o) ((o)->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS)
#endif

/* Append one zeroed element to a growing array; NULL when out of memory. */
static void *grow(void **arr, int *n, size_t elem) {
  void *p = realloc(*arr, (size_t)(*n + 1) * elem);
  if (!p) return NULL;
  *arr = p;
  char *e = (char *)p + (size_t)(*n)++ * elem;
  memset(e, 0, elem);
  return e;
}

static int is_io(hwloc_obj_t o) {
  return o->type == HWLOC_OBJ_BRIDGE || o->type == HWLOC_OBJ_PCI_DEVICE ||
         o->type == HWLOC_OBJ_OS_DEVICE;
}

static char hop_kind(hwloc_obj_t o) {
  if (o->type == HWLOC_OBJ_PCI_DEVICE) return 'D';
  if (o->type == HWLOC_OBJ_BRIDGE)
    return o->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST ? 'H' : 'S';
  return 'C';
}

/* The NUMA node and package of the CPU-side object an I/O path ends at. */
static void locate(hwloc_obj_t anchor, mkx_topo_dev *d) {
  d->pub.numa =
      anchor && anchor->nodeset ? hwloc_bitmap_first(anchor->nodeset) : -1;
  d->package = -1;
  for (hwloc_obj_t o = anchor; o; o = o->parent)
    if (o->type == HWLOC_OBJ_PACKAGE) {
      d->package = (int)o->os_index;
      break;
    }
}

/* Record the PCI device's identity and its path up to the first CPU-side
 * object (walking ->parent: the hwloc ancestor helpers crash on I/O). */
static void describe_pci(hwloc_obj_t pci, mkx_topo_dev *d) {
  const struct hwloc_pcidev_attr_s *a = &pci->attr->pcidev;
  d->dom = a->domain;
  d->bus = a->bus;
  d->dev = a->dev;
  d->fn = a->func;
  snprintf(d->pub.pci, sizeof d->pub.pci, "%04x:%02x:%02x.%x", d->dom, d->bus,
           d->dev, d->fn);
  hwloc_obj_t o = pci;
  for (d->depth = 0; o && d->depth < MKX_TOPO_MAX_PATH; o = o->parent) {
    d->path[d->depth].id = o->gp_index;
    d->path[d->depth++].kind = hop_kind(o);
    if (!is_io(o)) break;
  }
  while (o && is_io(o)) o = o->parent; /* path cut: still find the anchor */
  locate(o, d);
}

/* A GPU: an NVIDIA PCI function of display class (0x03xx), or any NVIDIA
 * function hwloc gave a cuda/nvml osdev.  NVSwitch functions (class 0x0680)
 * carry the NVIDIA vendor id too and must not count. */
static int gpu_osdev_name(hwloc_obj_t pci, char *name, size_t len) {
  int found = 0;
  for (hwloc_obj_t c = pci->io_first_child; c; c = c->next_sibling) {
    if (c->type != HWLOC_OBJ_OS_DEVICE || !c->name) continue;
    int cuda = strncmp(c->name, "cuda", 4) == 0;
    if (cuda || (!found && strncmp(c->name, "nvml", 4) == 0)) {
      snprintf(name, len, "%s", c->name);
      found = 1;
      if (cuda) break; /* CUDA's name is what users know */
    }
  }
  return found;
}

static int add_gpu(mkx_topo *t, hwloc_obj_t pci) {
  char name[MKX_TOPO_NAME_LEN] = "";
  const struct hwloc_pcidev_attr_s *a = &pci->attr->pcidev;
  int named = gpu_osdev_name(pci, name, sizeof name);
  if (a->vendor_id != NVIDIA_VENDOR || (!named && (a->class_id >> 8) != 0x03))
    return MKX_SUCCESS;
  mkx_topo_dev *d = grow((void **)&t->gpus, &t->ngpus, sizeof *d);
  if (!d) return mkx_error(MKX_ERR_NOMEM, "topology: no memory for GPU list");
  describe_pci(pci, d);
  snprintf(d->pub.name, sizeof d->pub.name, "%s", name);
  return MKX_SUCCESS;
}

/* A NIC: an OpenFabrics osdev (mlx5_0, efa0, rdmap79s0: verbs devices),
 * located by the PCI function it belongs to. */
static int add_nic(mkx_topo *t, hwloc_obj_t os) {
  mkx_topo_dev *d = grow((void **)&t->nics, &t->nnics, sizeof *d);
  if (!d) return mkx_error(MKX_ERR_NOMEM, "topology: no memory for NIC list");
  snprintf(d->pub.name, sizeof d->pub.name, "%s", os->name ? os->name : "?");
  hwloc_obj_t p = os->parent;
  if (p && p->type == HWLOC_OBJ_PCI_DEVICE) {
    describe_pci(p, d);
    return MKX_SUCCESS;
  }
  /* Not below a PCI function (virtual device): only its locality counts. */
  while (p && is_io(p)) p = p->parent;
  d->path[0].id = p ? p->gp_index : 0;
  d->path[0].kind = 'C';
  d->depth = 1;
  locate(p, d);
  return MKX_SUCCESS;
}

static int collect_devices(mkx_topo *t, hwloc_topology_t h) {
  for (hwloc_obj_t o = NULL; (o = hwloc_get_next_pcidev(h, o)) != NULL;)
    MKX_TRY(add_gpu(t, o));
  for (hwloc_obj_t o = NULL; (o = hwloc_get_next_osdev(h, o)) != NULL;)
    if (IS_OPENFABRICS(o)) MKX_TRY(add_nic(t, o));
  return MKX_SUCCESS;
}

/* Append the cores inside `set` (PUs when the topology has no cores). */
static int add_cores(mkx_topo *t, hwloc_topology_t h, hwloc_const_cpuset_t set,
                     int numa) {
  hwloc_obj_type_t type =
      hwloc_get_nbobjs_inside_cpuset_by_type(h, set, HWLOC_OBJ_CORE) > 0
          ? HWLOC_OBJ_CORE
          : HWLOC_OBJ_PU;
  hwloc_obj_t o = NULL;
  while ((o = hwloc_get_next_obj_inside_cpuset_by_type(h, set, type, o)) !=
         NULL) {
    mkx_topo_core *c = grow((void **)&t->cores, &t->ncores, sizeof *c);
    if (!c)
      return mkx_error(MKX_ERR_NOMEM, "topology: no memory for core list");
    c->numa = numa;
    int pu;
    hwloc_bitmap_foreach_begin(pu, o->cpuset) {
      if (c->npus < MKX_TOPO_MAX_SMT) c->pus[c->npus++] = pu;
    }
    hwloc_bitmap_foreach_end();
  }
  return MKX_SUCCESS;
}

/* Cores per NUMA node, then the whole machine's as the fallback list. */
static int collect_cores(mkx_topo *t, hwloc_topology_t h) {
  hwloc_obj_t n = NULL;
  while ((n = hwloc_get_next_obj_by_type(h, HWLOC_OBJ_NUMANODE, n)) != NULL)
    if (n->cpuset && !hwloc_bitmap_iszero(n->cpuset))
      MKX_TRY(add_cores(t, h, n->cpuset, (int)n->os_index));
  return add_cores(t, h, hwloc_topology_get_topology_cpuset(h), -1);
}

static int cmp_dev(const void *a, const void *b) {
  const mkx_topo_dev *x = a, *y = b;
  unsigned kx[4] = {x->dom, x->bus, x->dev, x->fn},
           ky[4] = {y->dom, y->bus, y->dev, y->fn};
  for (int i = 0; i < 4; i++)
    if (kx[i] != ky[i]) return kx[i] < ky[i] ? -1 : 1;
  return strcmp(x->pub.name, y->pub.name);
}

/* Check the file first: hwloc's own message for a missing file is vague. */
static int open_xml(hwloc_topology_t h, const char *path) {
  FILE *f = fopen(path, "r");
  if (!f)
    return mkx_error(MKX_ERR_INVALID_ARG, "topology file %s: %s", path,
                     strerror(errno));
  fclose(f);
  if (hwloc_topology_set_xml(h, path) != 0)
    return mkx_error(MKX_ERR_INVALID_ARG,
                     "topology file %s: hwloc cannot read it (%s)", path,
                     strerror(errno));
  return MKX_SUCCESS;
}

static int discover(mkx_topo *t, hwloc_topology_t h, const char *xml_path) {
  /* Without this filter hwloc drops every PCI device and osdev. */
  hwloc_topology_set_io_types_filter(h, HWLOC_TYPE_FILTER_KEEP_ALL);
  if (xml_path) MKX_TRY(open_xml(h, xml_path));
  if (hwloc_topology_load(h) != 0)
    return mkx_error(MKX_ERR_INVALID_ARG,
                     "topology %s: hwloc could not load it (%s)",
                     xml_path ? xml_path : "of this machine", strerror(errno));
  MKX_TRY(collect_devices(t, h));
  MKX_TRY(collect_cores(t, h));
  if (t->ngpus > 1) qsort(t->gpus, (size_t)t->ngpus, sizeof *t->gpus, cmp_dev);
  if (t->nnics > 1) qsort(t->nics, (size_t)t->nnics, sizeof *t->nics, cmp_dev);
  return mkx_topo_init_state(t);
}

int mkx_topo_load(const char *xml_path, mkx_topo **out) {
  if (!out)
    return mkx_error(MKX_ERR_NULL_POINTER,
                     "mkx_topo_load: topology pointer is NULL");
  *out = NULL;
  mkx_topo *t = calloc(1, sizeof *t);
  hwloc_topology_t h;
  if (!t || hwloc_topology_init(&h) != 0) {
    free(t);
    return mkx_error(MKX_ERR_NOMEM, "topology: no memory");
  }
  int rc = discover(t, h, xml_path);
  hwloc_topology_destroy(h); /* everything needed was copied out */
  if (rc != MKX_SUCCESS) {
    mkx_topo_free(t);
    return rc;
  }
  *out = t;
  return MKX_SUCCESS;
}

#else /* !HAVE_HWLOC */

int mkx_topo_load(const char *xml_path, mkx_topo **out) {
  if (out) *out = NULL;
  return mkx_error(MKX_ERR_UNSUPPORTED,
                   "topology%s%s: MKX was built without hwloc (configure "
                   "--with-hwloc); GPU/NIC placement falls back to defaults",
                   xml_path ? " " : "", xml_path ? xml_path : "");
}

#endif
