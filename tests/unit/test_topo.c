/* The topology map on hwloc XML topologies (tests/topo/): a DGX H100, an
 * AWS p5.48xlarge, a 2-GPU/2-NIC machine, 4 GPUs sharing 2 NICs, a node
 * without GPU, and bad input.  Exits 77 (skip) without hwloc. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "mkx.h"
#include "topo/topo.h"
#include "../common/check.h"

#ifndef MKX_TOPO_DIR
#define MKX_TOPO_DIR "tests/topo"
#endif

static mkx_topo *load(const char *name) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", MKX_TOPO_DIR, name);
  mkx_topo *t = NULL;
  int rc = mkx_topo_load(path, &t);
  CHECK(rc == MKX_SUCCESS && t, "load %s: %d %s", path, rc,
        MKX_Get_last_error());
  return t;
}

/* Parse a cpu list ("0-13,112-125") into flags; returns the count. */
static int parse_list(const char *s, unsigned char *set, int max) {
  int n = 0;
  memset(set, 0, (size_t)max);
  while (*s) {
    char *end;
    long a = strtol(s, &end, 10), b = a;
    if (*end == '-') b = strtol(end + 1, &end, 10);
    for (long i = a; i <= b && i < max; i++) n += !set[i], set[i] = 1;
    s = *end == ',' ? end + 1 : end;
    if (end == s && *s) break;
  }
  return n;
}

/* No two maps share a PU. */
static void check_disjoint(const mkx_gpu_map *m, int n, const char *what) {
  static unsigned char a[1024], b[1024];
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++) {
      parse_list(m[i].cpus, a, 1024);
      parse_list(m[j].cpus, b, 1024);
      int overlap = 0;
      for (int k = 0; k < 1024; k++) overlap |= a[k] && b[k];
      CHECK(!overlap, "%s: cpus of GPU %d (%s) and %d (%s) overlap", what, i,
            m[i].cpus, j, m[j].cpus);
    }
}

static int map(const mkx_topo *t, const char *pci, mkx_gpu_map *m) {
  int rc = mkx_topo_map_gpu(t, pci, m);
  CHECK(rc == MKX_SUCCESS, "map %s: %d %s", pci, rc, MKX_Get_last_error());
  return rc;
}

static void test_dgx(void) {
  /* As cudaDeviceGetPCIBusId spells them (upper-case hex). */
  static const char *pci[8] = {"0000:1B:00.0", "0000:43:00.0", "0000:52:00.0",
                               "0000:61:00.0", "0000:9D:00.0", "0000:C3:00.0",
                               "0000:D1:00.0", "0000:DF:00.0"};
  static const char *nic[8] = {"mlx5_0", "mlx5_3", "mlx5_4",  "mlx5_5",
                               "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"};
  mkx_topo *t = load("dgx-h100.xml");
  if (!t) return;
  CHECK(mkx_topo_num_gpus(t) == 8,
        "DGX: 8 GPUs (NVSwitch function excluded), got %d",
        mkx_topo_num_gpus(t));
  CHECK(mkx_topo_num_nics(t) == 12, "DGX: 8 compute + 4 storage NICs, got %d",
        mkx_topo_num_nics(t));
  mkx_gpu_map m[8];
  for (int g = 0; g < 8; g++) {
    if (map(t, pci[g], &m[g]) != MKX_SUCCESS) continue;
    char cpus[64];
    int s = g / 4, p = g % 4, c0 = 56 * s + 14 * p;
    snprintf(cpus, sizeof cpus, "%d-%d,%d-%d", c0, c0 + 13, c0 + 112, c0 + 125);
    CHECK(m[g].gpu_index == g && m[g].numa == s, "DGX GPU %d: index %d numa %d",
          g, m[g].gpu_index, m[g].numa);
    CHECK(m[g].num_nics == 1 && strcmp(m[g].nic_names[0], nic[g]) == 0,
          "DGX GPU %d: want %s alone, got %d NICs, first %s", g, nic[g],
          m[g].num_nics, m[g].nic_names[0]);
    CHECK(m[g].nic_distance == MKX_TOPO_SAME_SWITCH && m[g].nic_sharers == 1,
          "DGX GPU %d: NIC on its switch, own (distance %d, sharers %d)", g,
          m[g].nic_distance, m[g].nic_sharers);
    CHECK(strcmp(m[g].cpus, cpus) == 0, "DGX GPU %d: cpus %s, want %s", g,
          m[g].cpus, cpus);
    CHECK(m[g].domain == -1, "DGX GPU %d: peer domain unknown before probing",
          g);
  }
  check_disjoint(m, 8, "DGX");
  CHECK(
      strcmp(m[0].name, "cuda0") == 0 && strcmp(m[0].pci, "0000:1b:00.0") == 0,
      "DGX GPU 0 named cuda0 at 0000:1b:00.0: %s %s", m[0].name, m[0].pci);
  /* nvidia-smi's 8-digit domain and a domain-less id name the same GPU. */
  CHECK(mkx_topo_find_gpu(t, "00000000:DF:00.0") == 7 &&
            mkx_topo_find_gpu(t, "1b:00.0") == 0,
        "PCI id spellings");

  /* All 8 GPUs reach each other (NVSwitch): one domain. */
  int all[64];
  for (int i = 0; i < 64; i++) all[i] = 1;
  CHECK(mkx_topo_set_peer_matrix(t, 8, pci, all) == MKX_SUCCESS, "peer matrix");
  map(t, pci[5], &m[5]);
  CHECK(m[5].domain == 0 && m[5].domain_size == 8 && m[5].domain_mask == 0xff,
        "DGX: one peer domain of 8: %d %d %llx", m[5].domain, m[5].domain_size,
        (unsigned long long)m[5].domain_mask);
  /* Two halves that cannot reach each other: two domains. */
  int half[64];
  for (int i = 0; i < 64; i++) half[i] = (i / 8) / 4 == (i % 8) / 4;
  mkx_topo_set_peer_matrix(t, 8, pci, half);
  map(t, pci[5], &m[5]);
  CHECK(m[5].domain == 4 && m[5].domain_size == 4 && m[5].domain_mask == 0xf0,
        "DGX: domain of GPU 5 is {4..7}: %d %d %llx", m[5].domain,
        m[5].domain_size, (unsigned long long)m[5].domain_mask);
  char line[256];
  CHECK(mkx_topo_describe(&m[5], line, sizeof line) == MKX_SUCCESS &&
            strstr(line, "mlx5_9") && strstr(line, "NUMA 1") &&
            strstr(line, "(4 GPUs)"),
        "describe: %s", line);
  printf("# %s\n", line);

  /* Two ranks on socket 0: each proxy gets half of the socket's cores. */
  CHECK(mkx_topo_set_gpus_in_use(t, 2, pci) == MKX_SUCCESS,
        "in use: GPUs 0, 1");
  map(t, pci[0], &m[0]);
  map(t, pci[1], &m[1]);
  CHECK(strcmp(m[0].cpus, "0-27,112-139") == 0 &&
            strcmp(m[1].cpus, "28-55,140-167") == 0,
        "two GPUs on NUMA 0 split its cores: %s | %s", m[0].cpus, m[1].cpus);
  CHECK(mkx_topo_map_gpu(t, pci[2], &m[2]) == MKX_ERR_INVALID_ARG,
        "a GPU outside the set in use is refused");
  mkx_topo_free(t);
}

static void test_p5(void) {
  static const char *pci[8] = {"0000:4F:00.0", "0000:60:00.0", "0000:70:00.0",
                               "0000:80:00.0", "0000:90:00.0", "0000:A0:00.0",
                               "0000:B0:00.0", "0000:C0:00.0"};
  mkx_topo *t = load("p5.xml");
  if (!t) return;
  CHECK(mkx_topo_num_gpus(t) == 8 && mkx_topo_num_nics(t) == 32,
        "p5: 8 GPUs, 32 EFA: %d %d", mkx_topo_num_gpus(t),
        mkx_topo_num_nics(t));
  mkx_gpu_map m[8];
  for (int g = 0; g < 8; g++) {
    if (map(t, pci[g], &m[g]) != MKX_SUCCESS) continue;
    CHECK(m[g].num_nics == 4 && m[g].nic_sharers == 1 &&
              m[g].nic_distance == MKX_TOPO_SAME_SWITCH && m[g].numa == g / 4,
          "p5 GPU %d: 4 own EFA on its switch, NUMA %d (got %d, %d, %d, %d)", g,
          g / 4, m[g].num_nics, m[g].nic_sharers, m[g].nic_distance, m[g].numa);
    for (int i = 0; i < m[g].num_nics; i++) {
      char want[16];
      snprintf(want, sizeof want, "efa%d", 4 * g + i);
      CHECK(strcmp(m[g].nic_names[i], want) == 0,
            "p5 GPU %d NIC %d: %s, want %s", g, i, m[g].nic_names[i], want);
    }
  }
  CHECK(strcmp(m[0].cpus, "0-11,96-107") == 0 &&
            strcmp(m[7].cpus, "84-95,180-191") == 0,
        "p5 cpus: %s | %s", m[0].cpus, m[7].cpus);
  check_disjoint(m, 8, "p5");
  /* One rank per socket: each keeps its own 4 EFA, never its neighbours'. */
  const char *two[2] = {pci[1], pci[6]};
  mkx_topo_set_gpus_in_use(t, 2, two);
  map(t, pci[6], &m[6]);
  CHECK(m[6].num_nics == 4 && strcmp(m[6].nic_names[0], "efa24") == 0 &&
            strcmp(m[6].cpus, "48-95,144-191") == 0,
        "p5 GPU 6 alone on its socket: %d %s %s", m[6].num_nics,
        m[6].nic_names[0], m[6].cpus);
  mkx_topo_free(t);
}

static void test_two_gpu(void) {
  mkx_topo *t = load("two-gpu-two-nic.xml");
  if (!t) return;
  mkx_gpu_map a, b;
  if (map(t, "0000:12:00.0", &a) == MKX_SUCCESS &&
      map(t, "0000:92:00.0", &b) == MKX_SUCCESS) {
    CHECK(a.num_nics == 1 && strcmp(a.nic_names[0], "mlx5_0") == 0 &&
              a.numa == 0 && strcmp(a.cpus, "0-1") == 0,
          "GPU 12:00.0: mlx5_0, NUMA 0, cpus 0-1: %s %d %s", a.nic_names[0],
          a.numa, a.cpus);
    CHECK(b.num_nics == 1 && strcmp(b.nic_names[0], "mlx5_1") == 0 &&
              b.numa == 1 && strcmp(b.cpus, "2-3") == 0,
          "GPU 92:00.0: mlx5_1, NUMA 1, cpus 2-3: %s %d %s", b.nic_names[0],
          b.numa, b.cpus);
    CHECK(a.nic_distance == MKX_TOPO_SAME_SWITCH && b.nic_sharers == 1,
          "two-gpu distances");
  }
  mkx_topo_free(t);
}

/* NIC load over the maps of the GPUs in use. */
static void nic_load(const mkx_gpu_map *m, int n, int *load, int nnics) {
  memset(load, 0, (size_t)nnics * sizeof *load);
  for (int g = 0; g < n; g++)
    for (int i = 0; i < m[g].num_nics; i++) load[m[g].nics[i]]++;
}

static void test_sharing(void) {
  static const char *pci[4] = {"0000:12:00.0", "0000:13:00.0", "0000:14:00.0",
                               "0000:15:00.0"};
  mkx_topo *t = load("four-gpu-two-nic.xml");
  if (!t) return;
  CHECK(mkx_topo_num_gpus(t) == 4,
        "bare NVIDIA PCI functions count as GPUs: %d", mkx_topo_num_gpus(t));
  mkx_gpu_map m[4];
  int load[2];
  for (int g = 0; g < 4; g++) map(t, pci[g], &m[g]);
  nic_load(m, 4, load, 2);
  CHECK(load[0] == 2 && load[1] == 2,
        "4 GPUs on 2 NICs: each NIC serves 2 (%d, %d)", load[0], load[1]);
  for (int g = 0; g < 4; g++)
    CHECK(m[g].num_nics == 1 && m[g].nic_sharers == 2,
          "GPU %d: one NIC shared by 2 (%d, %d)", g, m[g].num_nics,
          m[g].nic_sharers);
  CHECK(strcmp(m[1].cpus, "2-3") == 0,
        "8 cores over 4 GPUs: GPU 1 gets 2-3, got %s", m[1].cpus);
  check_disjoint(m, 4, "four-gpu");
  char line[256];
  mkx_topo_describe(&m[3], line, sizeof line);
  CHECK(strstr(line, "shared by 2 GPUs") != NULL, "describe says shared: %s",
        line);
  printf("# %s\n", line);
  /* Two GPUs in use: one NIC each, not shared. */
  const char *two[2] = {pci[0], pci[3]};
  mkx_topo_set_gpus_in_use(t, 2, two);
  map(t, pci[0], &m[0]);
  map(t, pci[3], &m[1]);
  nic_load(m, 2, load, 2);
  CHECK(load[0] == 1 && load[1] == 1 && m[0].nic_sharers == 1,
        "2 GPUs on 2 NICs: one each (%d, %d)", load[0], load[1]);
  /* One GPU in use: it gets both. */
  mkx_topo_set_gpus_in_use(t, 1, two);
  map(t, pci[0], &m[0]);
  CHECK(m[0].num_nics == 2 && strcmp(m[0].cpus, "0-7") == 0,
        "1 GPU: both NICs, all cores");
  /* Back to all. */
  CHECK(mkx_topo_set_gpus_in_use(t, 0, NULL) == MKX_SUCCESS &&
            mkx_topo_map_gpu(t, pci[2], &m[2]) == MKX_SUCCESS,
        "reset to all GPUs");
  mkx_topo_free(t);
}

/* A GPU with a switch-local NIC keeps it; the two GPUs without one see both
 * NICs at NUMA distance and prefer the NIC nobody took yet. */
static void test_mixed(void) {
  static const char *pci[3] = {"0000:12:00.0", "0000:22:00.0", "0000:23:00.0"};
  mkx_topo *t = load("mixed-locality.xml");
  if (!t) return;
  mkx_gpu_map m[3];
  for (int g = 0; g < 3; g++) map(t, pci[g], &m[g]);
  CHECK(m[0].num_nics == 1 && strcmp(m[0].nic_names[0], "mlx5_0") == 0 &&
            m[0].nic_distance == MKX_TOPO_SAME_SWITCH,
        "GPU 0 keeps its switch NIC: %s", m[0].nic_names[0]);
  CHECK(m[1].nic_distance == MKX_TOPO_SAME_NUMA && m[1].num_nics == 1 &&
            m[2].num_nics == 1 && m[1].nics[0] != m[2].nics[0],
        "GPUs 1, 2 spread over both NICs: %s %s", m[1].nic_names[0],
        m[2].nic_names[0]);
  const char *two[2] = {pci[0], pci[1]};
  mkx_topo_set_gpus_in_use(t, 2, two);
  map(t, pci[1], &m[1]);
  CHECK(m[1].num_nics == 1 && strcmp(m[1].nic_names[0], "mlx5_1") == 0 &&
            m[1].nic_sharers == 1,
        "GPU 1 alone takes the free mlx5_1, not GPU 0's: %s",
        m[1].nic_names[0]);
  mkx_topo_free(t);
}

static void test_bad_input(void) {
  static int sentinel;
  mkx_topo *t = (mkx_topo *)&sentinel; /* a failed load must reset it to NULL */
  CHECK(mkx_topo_load(MKX_TOPO_DIR "/missing.xml", &t) == MKX_ERR_INVALID_ARG &&
            t == NULL,
        "missing file: invalid argument, no topology");
  CHECK(strstr(MKX_Get_last_error(), "missing.xml") != NULL,
        "message names the file: %s", MKX_Get_last_error());
  CHECK(mkx_topo_load(NULL, NULL) == MKX_ERR_NULL_POINTER, "NULL output");

  char tmp[] = "/tmp/mkx-topo-XXXXXX";
  int fd = mkstemp(tmp);
  if (fd >= 0) {
    const char junk[] = "<topology><object type=\"Machine\"";
    CHECK(write(fd, junk, sizeof junk - 1) == (ssize_t)(sizeof junk - 1),
          "write");
    close(fd);
    CHECK(mkx_topo_load(tmp, &t) == MKX_ERR_INVALID_ARG && t == NULL,
          "malformed XML: invalid argument");
    unlink(tmp);
  }

  t = load("no-gpu.xml");
  if (t) {
    mkx_gpu_map m;
    CHECK(mkx_topo_num_gpus(t) == 0 && mkx_topo_num_nics(t) == 1,
          "no-gpu: 0 GPUs, 1 NIC");
    CHECK(mkx_topo_map_gpu(t, "0000:11:00.0", &m) == MKX_ERR_UNSUPPORTED,
          "no GPU in the topology: unsupported");
    mkx_topo_free(t);
  }

  t = load("dgx-h100.xml");
  if (t) {
    mkx_gpu_map m;
    mkx_topo_device d;
    CHECK(mkx_topo_map_gpu(t, "0000:99:00.0", &m) == MKX_ERR_INVALID_ARG,
          "unknown PCI id: invalid argument");
    CHECK(strstr(MKX_Get_last_error(), "0000:99:00.0") != NULL,
          "message names it: %s", MKX_Get_last_error());
    CHECK(mkx_topo_map_gpu(t, "0000:18:00.0", &m) == MKX_ERR_INVALID_ARG,
          "a NIC's PCI id is not a GPU");
    const char *bad[] = {"",
                         "zz",
                         "1b:00",
                         "0000:1b:00.8",
                         "0000:1b:20.0",
                         "0000:1b:00.0x",
                         "123456789:1b:00.0",
                         "0:0:1b:00.0"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
      CHECK(mkx_topo_map_gpu(t, bad[i], &m) == MKX_ERR_INVALID_ARG,
            "malformed id \"%s\"", bad[i]);
    CHECK(mkx_topo_map_gpu(t, NULL, &m) == MKX_ERR_NULL_POINTER, "NULL id");
    CHECK(mkx_topo_gpu(t, 8, &d) == MKX_ERR_INVALID_ARG &&
              mkx_topo_nic(t, -1, &d) == MKX_ERR_INVALID_ARG,
          "device index out of range");
    CHECK(mkx_topo_nic(t, 0, &d) == MKX_SUCCESS &&
              strcmp(d.name, "mlx5_0") == 0 && d.numa == 0,
          "first NIC in PCI order: %s", d.name);
    const char *unknown[1] = {"0000:99:00.0"};
    CHECK(mkx_topo_set_gpus_in_use(t, 1, unknown) == MKX_ERR_INVALID_ARG,
          "in-use list with an unknown GPU");
    CHECK(mkx_topo_map_gpu(t, "0000:1b:00.0", &m) == MKX_SUCCESS,
          "a refused in-use list changes nothing");
    char small[16];
    CHECK(mkx_topo_describe(&m, small, sizeof small) == MKX_ERR_TRUNCATE &&
              strlen(small) == sizeof small - 1,
          "describe into a small buffer truncates");
    mkx_topo_free(t);
  }
  mkx_topo_free(NULL);
}

/* This machine: whatever it has, loading must work and maps must be sane. */
static void test_this_machine(void) {
  mkx_topo *t = NULL;
  int rc = mkx_topo_load(NULL, &t);
  CHECK(rc == MKX_SUCCESS, "this machine: %d %s", rc, MKX_Get_last_error());
  for (int g = 0; t && g < mkx_topo_num_gpus(t); g++) {
    mkx_topo_device d;
    mkx_gpu_map m;
    char line[256];
    mkx_topo_gpu(t, g, &d);
    CHECK(mkx_topo_map_gpu(t, d.pci, &m) == MKX_SUCCESS && m.gpu_index == g,
          "map %s", d.pci);
    mkx_topo_describe(&m, line, sizeof line);
    printf("# this machine: %s\n", line);
  }
  mkx_topo_free(t);
}

int main(void) {
  if (!HAVE_HWLOC) { /* the library must say so, then the test skips */
    mkx_topo *t = NULL;
    CHECK(mkx_topo_load(NULL, &t) == MKX_ERR_UNSUPPORTED && t == NULL,
          "without hwloc: unsupported");
    printf("# built without hwloc: skipped\n");
    return check_failed() ? 1 : CHECK_SKIP;
  }
  test_dgx();
  test_p5();
  test_two_gpu();
  test_sharing();
  test_mixed();
  test_bad_input();
  test_this_machine();
  return check_done("test_topo");
}
