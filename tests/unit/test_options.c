/* The options table: defaults, environment, MPI_Info precedence, a
 * specific error naming the variable or key for every bad value, and rows
 * registered from above base. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/log.h"
#include "core/options.h"
#include "mkx.h"
#include "net/net.h"
#include "../common/check.h"

static void test_defaults(void) {
  mkx_options o;
  CHECK(mkx_options_load(&o, MPI_INFO_NULL) == MKX_SUCCESS, "defaults load");
  CHECK(o.log_level == MKX_LOG_WARN, "log_level default warn");
  CHECK(o.path == MKX_PATH_OPT_AUTO, "path default auto");
  CHECK(o.device == -1, "device default -1");
  CHECK(o.timeout_ms == 300000, "timeout default");
  CHECK(o.virtual_node_size == 0, "virtual nodes default off");
  CHECK(o.blocking == 0, "blocking default off");
  CHECK(o.tp_partials == MKX_PARTIALS_OUT, "tp_partials default out");
  CHECK(o.fused_pad == 1, "fused_pad default yes");
  CHECK(o.tp_overlap == MKX_OVERLAP_AUTO, "tp_overlap default auto");
  CHECK(o.hier_gemm == MKX_HIER_GEMM_AUTO, "hier_gemm default auto");
  /* Every entry documents itself. */
  const mkx_option_desc *d;
  for (size_t i = 0; (d = mkx_option_at(i)); i++)
    CHECK(d->help && strlen(d->help) > 20 && d->defval && d->choices,
          "option %s documented", d->name);
}

static void test_environment(void) {
  mkx_options o;
  setenv("MKX_PATH", "HOST", 1);
  setenv("MKX_TIMEOUT_MS", "1500", 1);
  CHECK(mkx_options_load(&o, MPI_INFO_NULL) == MKX_SUCCESS, "env load");
  CHECK(o.path == MKX_PATH_OPT_HOST, "env path=HOST (case-insensitive)");
  CHECK(o.timeout_ms == 1500, "env timeout");
  setenv("MKX_TIMEOUT_MS", "15x", 1);
  CHECK(mkx_options_load(&o, MPI_INFO_NULL) == MKX_ERR_INVALID_ARG,
        "trailing garbage rejected");
  CHECK(strstr(MKX_Get_last_error(), "MKX_TIMEOUT_MS") != NULL,
        "message names the variable: %s", MKX_Get_last_error());
  setenv("MKX_TIMEOUT_MS", "0", 1);
  CHECK(mkx_options_load(&o, MPI_INFO_NULL) == MKX_ERR_INVALID_ARG,
        "timeout 0 out of range");
  unsetenv("MKX_TIMEOUT_MS");
  setenv("MKX_PATH", "fpga", 1);
  CHECK(mkx_options_load(&o, MPI_INFO_NULL) == MKX_ERR_INVALID_ARG,
        "bad enum rejected");
  CHECK(strstr(MKX_Get_last_error(), "auto|host|gpu") != NULL,
        "message lists the choices: %s", MKX_Get_last_error());
  unsetenv("MKX_PATH");
}

static void test_info(void) {
  mkx_options o;
  MPI_Info info;
  MPI_Info_create(&info);
  setenv("MKX_VIRTUAL_NODE_SIZE", "4", 1);
  MPI_Info_set(info, "mkx_virtual_node_size", "2");
  MPI_Info_set(info, "other_library_key", "ignored");
  CHECK(mkx_options_load(&o, info) == MKX_SUCCESS, "info load");
  CHECK(o.virtual_node_size == 2, "info overrides env (%d)",
        o.virtual_node_size);
  MPI_Info_set(info, "mkx_no_such_option", "1");
  CHECK(mkx_options_load(&o, info) == MKX_ERR_INVALID_ARG,
        "unknown mkx_ key rejected");
  CHECK(strstr(MKX_Get_last_error(), "mkx_no_such_option") != NULL,
        "message names the key: %s", MKX_Get_last_error());
  MPI_Info_delete(info, "mkx_no_such_option");
  MPI_Info_set(info, "mkx_device", "-2");
  CHECK(mkx_options_load(&o, info) == MKX_ERR_INVALID_ARG,
        "device -2 out of range");
  MPI_Info_delete(info, "mkx_device");
  setenv("MKX_BLOCKING", "no", 1);
  MPI_Info_set(info, "mkx_blocking", "true");
  CHECK(mkx_options_load(&o, info) == MKX_SUCCESS && o.blocking == 1,
        "info mkx_blocking=true overrides env");
  MPI_Info_set(info, "mkx_blocking", "maybe");
  CHECK(mkx_options_load(&o, info) == MKX_ERR_INVALID_ARG,
        "bad boolean rejected");
  CHECK(strstr(MKX_Get_last_error(), "yes|no") != NULL,
        "message says what a boolean takes: %s", MKX_Get_last_error());
  unsetenv("MKX_BLOCKING");
  MPI_Info_delete(info, "mkx_blocking");
  MPI_Info_set(info, "mkx_tp_partials", "fp32");
  CHECK(mkx_options_load(&o, info) == MKX_SUCCESS &&
            o.tp_partials == MKX_PARTIALS_FP32,
        "info mkx_tp_partials=fp32");
  MPI_Info_set(info, "mkx_tp_partials", "bf16");
  CHECK(mkx_options_load(&o, info) == MKX_ERR_INVALID_ARG,
        "tp_partials bf16 rejected");
  MPI_Info_delete(info, "mkx_tp_partials");
  MPI_Info_free(&info);
  unsetenv("MKX_VIRTUAL_NODE_SIZE");
}

static void test_format_roundtrip(void) {
  mkx_options o, p;
  char buf[64];
  CHECK(mkx_options_load(&o, MPI_INFO_NULL) == MKX_SUCCESS, "load");
  o.path = MKX_PATH_OPT_GPU;
  o.timeout_ms = 1234567;
  p = o;
  const mkx_option_desc *d;
  for (size_t i = 0; (d = mkx_option_at(i)); i++) {
    mkx_option_format(d, &o, buf, sizeof buf);
    CHECK(mkx_option_parse(d, buf, "roundtrip", &p) == MKX_SUCCESS,
          "%s value '%s' parses back", d->name, buf);
  }
  CHECK(memcmp(&o, &p, sizeof o) == 0, "format/parse round trip");
}

static size_t count_rows(void) {
  size_t n = 0;
  while (mkx_option_at(n)) n++;
  return n;
}

/* The transports' rows, registered by net: after base's, in mkx_info's
 * order, with their defaults, ranges and messages. */
static void test_net_rows(void) {
  static const char *const names[] = {"net",
                                      "net_tcp_bind",
                                      "net_tcp_port_range",
                                      "net_ib_gid_index",
                                      "net_shm_bandwidth",
                                      "net_shm_latency_us",
                                      "net_shm_ring",
                                      "net_shm_cma",
                                      "net_shm_ipc"};
  const size_t nrows = sizeof names / sizeof *names;
  mkx_options o;
  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "mkx_net", "tcp");
  CHECK(mkx_options_load(&o, info) == MKX_ERR_INVALID_ARG,
        "mkx_net unknown before net registers its rows");
  size_t n = count_rows();
  CHECK(mkx_net_options_register() == MKX_SUCCESS &&
            mkx_net_options_register() == MKX_SUCCESS &&
            count_rows() == n + nrows,
        "net registers its %zu rows once", nrows);
  for (size_t i = 0; i < nrows; i++)
    CHECK(strcmp(mkx_option_at(n + i)->name, names[i]) == 0, "row %zu is %s",
          n + i, names[i]);
  CHECK(mkx_options_load(&o, MPI_INFO_NULL) == MKX_SUCCESS &&
            o.net == MKX_NET_AUTO && strcmp(o.net_tcp_bind, "") == 0 &&
            strcmp(o.net_tcp_port_range, "0") == 0 && o.net_ib_gid_index == 0 &&
            o.net_shm_bandwidth == 0 && o.net_shm_latency_us == 0 &&
            o.net_shm_ring == 8388608 && o.net_shm_cma == 1 &&
            o.net_shm_ipc == 1,
        "net defaults");
  MPI_Info_set(info, "mkx_net_tcp_bind", "lo");
  CHECK(mkx_options_load(&o, info) == MKX_SUCCESS && o.net == MKX_NET_TCP &&
            strcmp(o.net_tcp_bind, "lo") == 0,
        "net info keys");
  setenv("MKX_NET_IB_GID_INDEX", "256", 1);
  CHECK(mkx_options_load(&o, MPI_INFO_NULL) == MKX_ERR_INVALID_ARG &&
            strstr(MKX_Get_last_error(),
                   "MKX_NET_IB_GID_INDEX: bad value "
                   "'256' (expected 0:255)"),
        "gid index range, named: %s", MKX_Get_last_error());
  unsetenv("MKX_NET_IB_GID_INDEX");
  MPI_Info_free(&info);
}

/* A row as a layer above base would add it (it borrows gpu_ctas's field). */
static const mkx_option_desc extra_rows[] = {
    {"test_extra", MKX_OPT_INT, offsetof(mkx_options, gpu_ctas), "7", "0:9",
     "A row registered by the test, as a transport registers its own."},
    {NULL, 0, 0, NULL, NULL, NULL},
};

static void test_refused_rows(size_t n) {
  static const mkx_option_desc twice[] = {
      {"PATH", MKX_OPT_INT, 0, "0", "0:1", "a second row named path"},
      {NULL, 0, 0, NULL, NULL, NULL}};
  static const mkx_option_desc outside[] = {
      {"test_outside", MKX_OPT_LONG, sizeof(mkx_options) - 4, "0", "0:1",
       "a field that ends past mkx_options"},
      {NULL, 0, 0, NULL, NULL, NULL}};
  CHECK(mkx_options_add_rows(twice) == MKX_ERR_INTERNAL &&
            strstr(MKX_Get_last_error(), "PATH"),
        "a name registered twice is refused: %s", MKX_Get_last_error());
  CHECK(mkx_options_add_rows(outside) == MKX_ERR_INTERNAL &&
            strstr(MKX_Get_last_error(), "test_outside"),
        "a field outside mkx_options is refused: %s", MKX_Get_last_error());
  CHECK(count_rows() == n, "refused rows are not added");
}

static void test_registered_rows(void) {
  mkx_options o;
  MPI_Info info;
  size_t n = count_rows();
  MPI_Info_create(&info);
  MPI_Info_set(info, "mkx_test_extra", "5");
  CHECK(mkx_options_load(&o, info) == MKX_ERR_INVALID_ARG,
        "key of a row not registered yet is unknown");
  test_refused_rows(n);
  CHECK(mkx_options_add_rows(extra_rows) == MKX_SUCCESS &&
            mkx_options_add_rows(extra_rows) == MKX_SUCCESS &&
            count_rows() == n + 1 && mkx_option_at(n) == extra_rows,
        "registered once, listed last");
  CHECK(mkx_options_load(&o, MPI_INFO_NULL) == MKX_SUCCESS && o.gpu_ctas == 7,
        "its default (%d)", o.gpu_ctas);
  setenv("MKX_TEST_EXTRA", "3", 1);
  CHECK(mkx_options_load(&o, MPI_INFO_NULL) == MKX_SUCCESS && o.gpu_ctas == 3,
        "its variable (%d)", o.gpu_ctas);
  CHECK(mkx_options_load(&o, info) == MKX_SUCCESS && o.gpu_ctas == 5,
        "its info key (%d)", o.gpu_ctas);
  setenv("MKX_TEST_EXTRA", "10", 1);
  CHECK(mkx_options_load(&o, MPI_INFO_NULL) == MKX_ERR_INVALID_ARG &&
            strstr(MKX_Get_last_error(),
                   "MKX_TEST_EXTRA: bad value '10' "
                   "(expected 0:9)"),
        "its range, named: %s", MKX_Get_last_error());
  unsetenv("MKX_TEST_EXTRA");
  MPI_Info_free(&info);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  test_net_rows();
  test_defaults();
  test_environment();
  test_info();
  test_format_roundtrip();
  test_registered_rows(); /* last: its row stays registered */
  const int status = check_done("test_options");
  MPI_Finalize();
  return status;
}
