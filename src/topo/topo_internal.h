/* The topology as plain data: discovery (topo.c, the only hwloc user) fills
 * it, the mapping (topo_map.c) reads it without hwloc.  Keeping hwloc out of
 * the mapping means its rules are plain C over a few arrays. */
#ifndef MKX_TOPO_INTERNAL_H
#define MKX_TOPO_INTERNAL_H

#include <stdint.h>
#include "topo/topo.h"

#define MKX_TOPO_MAX_PATH 32 /* PCI nesting deeper than this is cut */
#define MKX_TOPO_MAX_SMT 8   /* PUs per core (POWER has 8) */

/* One step from a device towards the root.  Kinds: 'D' the PCI device
 * itself, 'S' a PCI-to-PCI bridge (switch port or root port), 'H' a host
 * bridge, 'C' the first CPU-side object (the path ends there). */
typedef struct {
  uint64_t id; /* hwloc gp_index: unique per object */
  char kind;
} mkx_topo_hop;

typedef struct {
  mkx_topo_device pub;
  unsigned dom, bus, dev, fn;
  int package; /* OS index of the package above it, -1 unknown */
  int depth;
  mkx_topo_hop path[MKX_TOPO_MAX_PATH];
} mkx_topo_dev;

/* A core of a NUMA node (numa -1: the machine-wide list, used for devices
 * whose NUMA node has no cores). */
typedef struct {
  int numa;
  int npus;
  int pus[MKX_TOPO_MAX_SMT];
} mkx_topo_core;

struct mkx_topo {
  int ngpus, nnics, ncores;
  mkx_topo_dev *gpus, *nics; /* sorted by PCI bus id */
  mkx_topo_core *cores;
  unsigned char *in_use; /* ngpus flags */
  signed char *peer;     /* ngpus * ngpus: 1 yes, 0 no, -1 not recorded */
};

/* Parse "DDDD:BB:DD.F" (domain of 1 to 8 hex digits, any case) or
 * "BB:DD.F"; 0 on success, -1 if malformed. */
int mkx_topo_parse_pci(const char *s, unsigned *dom, unsigned *bus,
                       unsigned *dev, unsigned *fn);

/* Allocate the per-GPU state once the GPUs are known (all in use, no peer
 * information); MKX_ERR_NOMEM on failure. */
int mkx_topo_init_state(mkx_topo *t);

#endif
