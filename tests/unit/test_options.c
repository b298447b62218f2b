/* The options table: defaults, environment, MPI_Info precedence, and a
 * specific error naming the variable or key for every bad value. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/log.h"
#include "core/options.h"
#include "mkx.h"
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
  CHECK(o.hier_gemm == MKX_HIER_GEMM_NVLINK, "hier_gemm default nvlink");
  /* Every entry documents itself. */
  for (const mkx_option_desc *d = mkx_option_table(); d->name; d++)
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
  for (const mkx_option_desc *d = mkx_option_table(); d->name; d++) {
    mkx_option_format(d, &o, buf, sizeof buf);
    CHECK(mkx_option_parse(d, buf, "roundtrip", &p) == MKX_SUCCESS,
          "%s value '%s' parses back", d->name, buf);
  }
  CHECK(memcmp(&o, &p, sizeof o) == 0, "format/parse round trip");
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  test_defaults();
  test_environment();
  test_info();
  test_format_roundtrip();
  const int status = check_done("test_options");
  MPI_Finalize();
  return status;
}
