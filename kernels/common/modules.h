/* Every kernel of the library loaded into the current context at once.
 *
 * With lazy loading (CUDA_MODULE_LOADING=LAZY, the default) a kernel is
 * loaded on its first launch, and that load waits for the device to drain
 * while holding the context, so that another thread's CUDA calls (the
 * network proxy's copies) wait too.  A
 * rank whose kernels wait for a peer's, or for the proxy, then waits for
 * itself.  Loading the kernels a path launches at plan time narrows this
 * but cannot show that no launch is missed (a rare branch, another path of
 * the same call); loading every kernel of every module once, before the
 * device's first workspace exists, closes it.  Each .cu file that defines
 * kernels includes common/modules.cuh once, which registers its module. */
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

/* From a module's static initializer (common/modules.cuh): one kernel of
 * the module, by which the module is found. */
void mkx_kernels_register(const void *anchor);

/* Load every function of every registered module into the current
 * context, once per device and process (later calls return at once).
 * 0; or the failing driver call's CUresult (its common values are
 * cudaError_t's), *what naming the call.  Where the driver lacks the
 * entry points (before CUDA 12.4) nothing is loaded and 0 is returned:
 * the paths' own loads remain. */
int mkx_kernels_load_all(const char **what);

#ifdef __cplusplus
}
#endif
