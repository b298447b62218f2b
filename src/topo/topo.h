/* Node topology: which NIC(s), NUMA node, cores and peer (NVLink) domain
 * belong to each GPU, read with hwloc 2.x from this machine or an XML file.
 *
 * Used at communicator creation: every rank loads the topology of its node,
 * names the GPUs its node's ranks use (by PCI bus id, as
 * cudaDeviceGetPCIBusId gives them), records which of them can reach each
 * other by peer access (a CUDA question answered by the caller), and asks
 * for the map of its own GPU.  The map is a pure function of the topology
 * and those inputs, so every rank of a node computes the same assignment
 * without talking to the others.  See docs/topology.md. */
#ifndef MKX_TOPO_TOPO_H
#define MKX_TOPO_TOPO_H

#include <stddef.h>
#include <stdint.h>

#define MKX_TOPO_MAX_NICS 8 /* NICs one GPU's map can hold (p5: 4) */
#define MKX_TOPO_NAME_LEN 32

typedef struct mkx_topo mkx_topo;

/* How far a GPU is from its NIC(s), nearest first (cf. nvidia-smi topo:
 * PIX/PXB, PHB, NODE, SYS). */
enum mkx_topo_distance {
  MKX_TOPO_SAME_SWITCH = 0,     /* below one PCIe switch (or root port) */
  MKX_TOPO_SAME_HOSTBRIDGE = 1, /* below one host bridge */
  MKX_TOPO_SAME_NUMA = 2,       /* different host bridges, same NUMA node */
  MKX_TOPO_SAME_PACKAGE = 3,    /* same socket, other NUMA node */
  MKX_TOPO_SYSTEM = 4           /* across sockets */
};

/* A GPU or NIC as found in the topology. */
typedef struct {
  char pci[MKX_TOPO_NAME_LEN]; /* "0000:1b:00.0" (lower case, hwloc style) */
  char name
      [MKX_TOPO_NAME_LEN]; /* GPU: "cuda0"/"nvml0"/"" (bare PCI); NIC: "mlx5_0" */
  int numa;                /* NUMA node (OS index), -1 unknown */
} mkx_topo_device;

/* The map of one GPU (see mkx_topo_map_gpu). */
typedef struct {
  int gpu_index; /* position among the node's GPUs, PCI order */
  char pci[MKX_TOPO_NAME_LEN];
  char name[MKX_TOPO_NAME_LEN];
  int numa;                    /* the GPU's NUMA node, -1 unknown */
  int num_nics;                /* 0: no RDMA device on the node */
  int nics[MKX_TOPO_MAX_NICS]; /* indices for mkx_topo_nic() */
  char nic_names[MKX_TOPO_MAX_NICS][MKX_TOPO_NAME_LEN];
  int nic_distance;     /* enum mkx_topo_distance; -1 without NIC */
  int nic_sharers;      /* GPUs in use on the busiest of these NICs (1: own) */
  char cpus[256];       /* proxy-thread cpuset as a list, "0-13,112-125" */
  int domain;           /* peer domain: its lowest gpu_index; -1 unknown */
  int domain_size;      /* GPUs in the domain (0 unknown) */
  uint64_t domain_mask; /* bit i: gpu_index i is in the domain (i < 64) */
} mkx_gpu_map;

/* Load the topology of this machine (xml_path NULL; hwloc then honours
 * HWLOC_XMLFILE) or of an hwloc 2.x XML file.  Errors:
 * MKX_ERR_NULL_POINTER, MKX_ERR_INVALID_ARG (file missing or not a
 * topology), MKX_ERR_NOMEM, MKX_ERR_UNSUPPORTED (built without hwloc: the
 * caller falls back to no topology).  A node without GPUs loads fine. */
int mkx_topo_load(const char *xml_path, mkx_topo **t);
void mkx_topo_free(mkx_topo *t);

int mkx_topo_num_gpus(const mkx_topo *t);
int mkx_topo_num_nics(const mkx_topo *t);
/* The i-th GPU / NIC in PCI order; MKX_ERR_INVALID_ARG if out of range. */
int mkx_topo_gpu(const mkx_topo *t, int i, mkx_topo_device *d);
int mkx_topo_nic(const mkx_topo *t, int i, mkx_topo_device *d);
/* Index of the GPU with this PCI bus id ("0000:1B:00.0", "00000000:1b:00.0"
 * or "1b:00.0"), or a negative error code (MKX_ERR_INVALID_ARG negated). */
int mkx_topo_find_gpu(const mkx_topo *t, const char *pci);

/* The GPUs the node's ranks use (default: all).  NICs and cores are shared
 * among these only.  n == 0 resets to all.  Errors: MKX_ERR_INVALID_ARG for a
 * PCI id that is not a GPU of the topology. */
int mkx_topo_set_gpus_in_use(mkx_topo *t, int n, const char *const *pcis);

/* Record peer access among n GPUs: can_access[i * n + j] != 0 when GPU
 * pcis[i] can access GPU pcis[j] (cudaDeviceCanAccessPeer, asked by the
 * caller).  GPUs that can access each other both ways form a domain. */
int mkx_topo_set_peer_matrix(mkx_topo *t, int n, const char *const *pcis,
                             const int *can_access);

/* The map for the GPU with this PCI bus id.  Errors: MKX_ERR_NULL_POINTER,
 * MKX_ERR_UNSUPPORTED (the topology has no GPU), MKX_ERR_INVALID_ARG
 * (malformed id, no such GPU, or a GPU outside the set in use). */
int mkx_topo_map_gpu(const mkx_topo *t, const char *gpu_pci, mkx_gpu_map *m);

/* One line for mkx_info and logs, e.g.
 * "GPU 0 0000:1b:00.0 cuda0: NUMA 0, cores 0-13,112-125, NIC mlx5_0 (same
 * PCIe switch, own), peer domain 0 (8 GPUs)".  MKX_ERR_TRUNCATE if it did not
 * fit (buf then holds the truncated line). */
int mkx_topo_describe(const mkx_gpu_map *m, char *buf, size_t len);
const char *mkx_topo_distance_name(int distance);

#endif
