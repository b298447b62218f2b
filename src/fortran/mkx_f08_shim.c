/*
 * mkx_f08_shim.c - the C side of the Fortran 2008 module mkx_f08.
 *
 * What the module cannot do in Fortran alone:
 *  - turn mpi_f08 handles (MPI_Fint, the MPI_VAL of type(MPI_Comm) and
 *    type(MPI_Info)) into C handles with MPI_Comm_f2c / MPI_Info_f2c;
 *  - read the address, element size and first-dimension stride of an
 *    ordinary Fortran array from its C descriptor (type(*), dimension(..)
 *    dummies of BIND(C) interfaces, ISO_Fortran_binding.h, TS 29113);
 *  - export the C values of every constant so that a test can compare the
 *    module's named constants with mkx.h.
 *
 * Errors found here (a buffer that is not contiguous in its first dimension,
 * an element size that does not match the datatype, a type(c_ptr) among
 * arrays) are per rank, but the operations are collective: so the shim
 * still calls the operation, with an invalid datatype, which makes MKX fail
 * the call on this rank and report MKX_ERR_PEER on the others (no rank is
 * left waiting), and then returns its own error code.  Its message is
 * returned by mkx_f08_last_error (MKX_Get_last_error in Fortran) until the
 * next call through the module.
 *
 * Nothing here is part of the C API: these symbols are for mkx_f08 only.
 */
#include <ISO_Fortran_binding.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <mpi.h>
#include "mkx.h"

/* ---- errors found by the shim --------------------------------------------- */

static _Thread_local char shim_message[512];
static _Thread_local int shim_failed;

void mkx_f08_clear_error(void);
const char *mkx_f08_last_error(void);

void mkx_f08_clear_error(void) { shim_failed = 0; }

const char *mkx_f08_last_error(void) {
  return shim_failed ? shim_message : MKX_Get_last_error();
}

static int shim_error(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(shim_message, sizeof shim_message, fmt, ap);
  va_end(ap);
  shim_failed = 1;
  return code;
}

/* ---- Fortran arrays --------------------------------------------------------- */

/* The address of array argument `name` of `fn`, or NULL when it is absent
 * (optional).  want_size: required element size in bytes (0: any);
 * want_type: required CFI type (-1: any). */
static int arg_addr(const char *fn, const char *name, const CFI_cdesc_t *d,
                    size_t want_size, int want_type, void **out) {
  *out = NULL;
  if (d == NULL) return MKX_SUCCESS;
  if (d->type == CFI_type_cptr)
    return shim_error(MKX_ERR_INVALID_ARG,
                      "%s: %s is a type(c_ptr) but the first buffer is an "
                      "array: pass arrays for every buffer, or type(c_ptr) "
                      "for every buffer",
                      fn, name);
  if (d->rank > 0 && d->dim[0].extent > 1 &&
      d->dim[0].sm != (CFI_index_t)d->elem_len)
    return shim_error(MKX_ERR_INVALID_ARG,
                      "%s: %s is not contiguous in its first dimension "
                      "(stride %lld bytes, elements of %zu bytes); the "
                      "leading dimension argument describes the other "
                      "dimensions",
                      fn, name, (long long)d->dim[0].sm, d->elem_len);
  if (want_size != 0 && d->elem_len != want_size)
    return shim_error(MKX_ERR_INVALID_ARG,
                      "%s: %s has %zu-byte elements but its datatype needs "
                      "%zu bytes",
                      fn, name, d->elem_len, want_size);
  if (want_type >= 0 && d->type != want_type)
    return shim_error(MKX_ERR_INVALID_ARG,
                      "%s: %s has the wrong type (want %s)", fn, name,
                      want_type == CFI_type_int32_t   ? "integer(c_int32_t)"
                      : want_type == CFI_type_int64_t ? "integer(c_int64_t)"
                                                      : "real(c_float)");
  *out = d->base_addr;
  return MKX_SUCCESS;
}

/* Collect the first shim error of a call. */
#define ARG(name, desc, size, type, out)                                       \
  do {                                                                         \
    if (rc == MKX_SUCCESS) rc = arg_addr(fn, name, desc, size, type, out);     \
  } while (0)

/* Element size of a datatype, 0 (no check) for an invalid one. */
static size_t esize(int dtype) { return MKX_Type_size((MKX_Datatype)dtype); }

/* A datatype MKX refuses on this rank, so that a shim error still takes
 * part in the call's agreement exchange (see the top of this file). */
#define BAD_DTYPE ((MKX_Datatype)0)

/* The shim's error (if any) wins over MKX's; the call was made either way. */
static int finish(int shim_rc, int mkx_rc) {
  return shim_rc != MKX_SUCCESS ? shim_rc : mkx_rc;
}

/* ---- types, communicators, options ---------------------------------------- */

int mkx_f08_type_size(int type, int64_t *size);

/* MKX_Type_size with an error code and message for an invalid type. */
int mkx_f08_type_size(int type, int64_t *size) {
  shim_failed = 0;
  *size = (int64_t)MKX_Type_size((MKX_Datatype)type);
  if (*size == 0)
    return shim_error(MKX_ERR_INVALID_ARG,
                      "MKX_Type_size: datatype %d is not MKX_BF16, "
                      "MKX_FP16, MKX_FP32, MKX_FP64, MKX_FP8_E4M3 or "
                      "MKX_FP8_E5M2",
                      type);
  return MKX_SUCCESS;
}

int mkx_f08_alloc_mem(MKX_Comm comm, int64_t size, void **ptr);
int mkx_f08_comm_create(MPI_Fint comm, MPI_Fint info, MKX_Comm *newcomm);

/* Fortran sizes are signed: a negative one is refused here (every rank
 * asks for the same size, so every rank refuses it). */
int mkx_f08_alloc_mem(MKX_Comm comm, int64_t size, void **ptr) {
  shim_failed = 0;
  *ptr = NULL;
  if (size < 0)
    return shim_error(MKX_ERR_BAD_SIZE,
                      "MKX_Alloc_mem: size = %lld "
                      "(must be >= 0)",
                      (long long)size);
  return MKX_Alloc_mem(comm, (size_t)size, ptr);
}
int mkx_f08_info_print(MKX_Comm comm, void *file);

int mkx_f08_comm_create(MPI_Fint comm, MPI_Fint info, MKX_Comm *newcomm) {
  shim_failed = 0;
  return MKX_Comm_create(MPI_Comm_f2c(comm), MPI_Info_f2c(info), newcomm);
}

/* file NULL: C's stdout, flushed so that it keeps its place among the
 * Fortran program's output. */
int mkx_f08_info_print(MKX_Comm comm, void *file) {
  shim_failed = 0;
  int rc = MKX_Info_print(comm, file ? file : (void *)stdout);
  fflush(file ? (FILE *)file : stdout);
  return rc;
}

/* ---- the C values of the constants, for the test of the module ---------- */

int mkx_f08_c_constant(const char *name, int *value);

int mkx_f08_c_constant(const char *name, int *value) {
#define K(x)                                                                   \
  { #x, (int)(x) }
  static const struct {
    const char *name;
    int value;
  } table[] = {
      K(MKX_VERSION_MAJOR),
      K(MKX_VERSION_MINOR),
      K(MKX_VERSION_PATCH),
      K(MKX_VERSION),
      K(MKX_SUCCESS),
      K(MKX_ERR_INVALID_ARG),
      K(MKX_ERR_NULL_POINTER),
      K(MKX_ERR_BAD_SIZE),
      K(MKX_ERR_BAD_LD),
      K(MKX_ERR_UNSUPPORTED),
      K(MKX_ERR_SHAPE_MISMATCH),
      K(MKX_ERR_TRUNCATE),
      K(MKX_ERR_CUDA),
      K(MKX_ERR_MPI),
      K(MKX_ERR_NET),
      K(MKX_ERR_TIMEOUT),
      K(MKX_ERR_NOMEM),
      K(MKX_ERR_PEER),
      K(MKX_ERR_INVALID_COMM),
      K(MKX_ERR_INVALID_REQUEST),
      K(MKX_ERR_INTERNAL),
      K(MKX_ERR_LASTCODE),
      K(MKX_BF16),
      K(MKX_FP16),
      K(MKX_FP32),
      K(MKX_FP64),
      K(MKX_FP8_E4M3),
      K(MKX_FP8_E5M2),
      K(MKX_ROW_MAJOR),
      K(MKX_COL_MAJOR),
      K(MKX_NO_TRANS),
      K(MKX_TRANS),
      K(MKX_SCALE_NONE),
      K(MKX_SCALE_TENSOR),
      K(MKX_SCALE_ROW),
      K(MKX_SCALE_BLOCK),
      K(MKX_SCALE_BLOCK_SIZE),
      /* type(MKX_Scales) of the module is this struct: c_sizeof against it */
      {"sizeof(MKX_Scales)", (int)sizeof(MKX_Scales)},
  };
#undef K
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
    if (strcmp(name, table[i].name) == 0) {
      *value = table[i].value;
      return 1;
    }
  return 0;
}

/* type(MKX_Scales) of the module declares layout as integer(c_int). */
_Static_assert(sizeof(MKX_Scale_layout) == sizeof(int),
               "MKX_Scale_layout is not an int");

/* ---- the operations, generated from mkx_f08.def ---------------------------
 * mkx_f08_<op>_a takes the arrays of the _rN specifics (and, for an
 * operation with an _init, runs that instead when persistent != 0);
 * mkx_f08_<op>_init_p converts the MPI_Info of an _init on type(c_ptr)
 * buffers. */
#include "mkx_f08_gen_shim.inc"
