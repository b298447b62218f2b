/* Registers this .cu file's module with common/modules.h: include once in
 * each .cu file that defines kernels.  The anchor is an empty kernel of
 * this file's own, so the module is found without naming any of its
 * (templated) kernels. */
#pragma once
#include "common/modules.h"

namespace {

__global__ void mkx_module_anchor() {}

struct MkxModuleRegistrar {
  MkxModuleRegistrar() { mkx_kernels_register((const void *)mkx_module_anchor); }
};

const MkxModuleRegistrar mkx_module_registrar;

}  // namespace
