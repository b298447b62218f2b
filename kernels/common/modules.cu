/* The module registry and the load of every kernel (common/modules.h). */
#include <cuda.h>
#include <cuda_runtime.h>
#include <atomic>
#include <vector>
#include "common/modules.h"

namespace {

/* one per .cu file with kernels; filled by static initializers */
constexpr int kMaxModules = 32;
const void *anchors[kMaxModules];
std::atomic<int> anchor_count{0};

constexpr int kMaxDevices = 64;
std::atomic<bool> loaded[kMaxDevices];

typedef CUresult (*FuncGetModuleFn)(CUmodule *, CUfunction);
typedef CUresult (*ModuleCountFn)(unsigned int *, CUmodule);
typedef CUresult (*ModuleEnumFn)(CUfunction *, unsigned int, CUmodule);
typedef CUresult (*FuncLoadFn)(CUfunction);

struct Driver {
  FuncGetModuleFn get_module = nullptr;
  ModuleCountFn count = nullptr;
  ModuleEnumFn enumerate = nullptr;
  FuncLoadFn load = nullptr;
};

/* Through the runtime's entry points, not libcuda's stub (tmap.cuh says
 * why). */
void *entry(const char *name) {
  void *p = nullptr;
  cudaDriverEntryPointQueryResult q;
  if (cudaGetDriverEntryPointByVersion(name, &p, 12040, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return p;
}

bool driver(Driver *d) {
  d->get_module = (FuncGetModuleFn)entry("cuFuncGetModule");
  d->count = (ModuleCountFn)entry("cuModuleGetFunctionCount");
  d->enumerate = (ModuleEnumFn)entry("cuModuleEnumerateFunctions");
  d->load = (FuncLoadFn)entry("cuFuncLoad");
  return d->get_module && d->count && d->enumerate && d->load;
}

int load_module(const Driver &d, const void *anchor, const char **what) {
  cudaFunction_t f;
  cudaError_t e = cudaGetFuncBySymbol(&f, anchor);
  if (e != cudaSuccess) return *what = "cudaGetFuncBySymbol", (int)e;
  CUmodule m;
  unsigned int n = 0;
  CUresult r = d.get_module(&m, (CUfunction)f);
  if (r != CUDA_SUCCESS) return *what = "cuFuncGetModule", (int)r;
  if ((r = d.count(&n, m)) != CUDA_SUCCESS) return *what = "cuModuleGetFunctionCount", (int)r;
  std::vector<CUfunction> fs(n);
  if (n && (r = d.enumerate(fs.data(), n, m)) != CUDA_SUCCESS) return *what = "cuModuleEnumerateFunctions", (int)r;
  for (CUfunction g : fs)
    if ((r = d.load(g)) != CUDA_SUCCESS) return *what = "cuFuncLoad", (int)r;
  return 0;
}

}  // namespace

extern "C" void mkx_kernels_register(const void *anchor) {
  const int i = anchor_count.fetch_add(1);
  if (i < kMaxModules) anchors[i] = anchor;
}

extern "C" int mkx_kernels_load_all(const char **what) {
  static const char *none = "";
  if (!what) what = &none;
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return *what = "cudaGetDevice", (int)e;
  if (dev < 0 || dev >= kMaxDevices || loaded[dev].load(std::memory_order_acquire)) return 0;
  const int n = anchor_count.load();
  if (n > kMaxModules) return *what = "the module registry (more modules than kMaxModules)", (int)cudaErrorInvalidValue;
  Driver d;
  if (!driver(&d)) return 0;
  for (int i = 0; i < n; i++) {
    const int rc = load_module(d, anchors[i], what);
    if (rc) return rc;
  }
  loaded[dev].store(true, std::memory_order_release);
  return 0;
}
