/* One way to turn a CUDA runtime result into an MKX error, for every file
 * built with CUDA: MKX_ERR_NOMEM for an allocation failure, else
 * MKX_ERR_CUDA; the message names where (the MKX call or component, may be
 * NULL), what failed and the CUDA error, and the sticky error is cleared
 * so the next call starts clean.  At log level debug the file and line of
 * the failing call are logged as well. */
#ifndef MKX_CORE_CUDA_RC_H
#define MKX_CORE_CUDA_RC_H

#include <cuda_runtime.h>

int mkx_cuda_rc_at(cudaError_t e, const char *where, const char *what,
                   const char *file, int line);
#define mkx_cuda_rc(e, where, what)                                            \
  mkx_cuda_rc_at((e), (where), (what), __FILE__, __LINE__)

/* Return from the calling function on failure. */
#define MKX_CUDA_TRY(call, where)                                              \
  do {                                                                         \
    const int mkx_rc_ = mkx_cuda_rc((call), (where), #call);                   \
    if (mkx_rc_ != 0) return mkx_rc_;                                          \
  } while (0)

/* A release in cleanup (cudaFree, cudaStreamDestroy, ...), which has no
 * caller to return an error to: a failure is logged as a warning naming
 * the call (at debug only while the runtime shuts down at exit) and the
 * error cleared. */
void mkx_cuda_release_at(cudaError_t e, const char *what, const char *file,
                         int line);
#define MKX_CUDA_RELEASE(call)                                                 \
  mkx_cuda_release_at((call), #call, __FILE__, __LINE__)

#endif
