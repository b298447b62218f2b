/* Whether the arguments of an MoE call on this rank can take the GPU path
 * (moe_gpu.h: the gpu_check hooks). */
#include <stdint.h>
#include "core/error.h"

#if HAVE_CUDA
#include "host/dtype.h"
#include "host/hier.h"
#include "ops/moe/moe_gpu.h"
#include "ops/moe/moe_gpu_int.h"

static int aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* Several nodes: equal nodes joined by MKX's transport. */
static int nodes_ok(MKX_Comm c, const char *fn) {
  if (!mkx_hier_usable(c))
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: GPU path over several nodes needs nodes of equal "
                     "size and a network transport",
                     fn);
  return mkx_fused_share_ok(c, fn);
}

static int check(MKX_Comm c, int op, const mkx_moe_args *a,
                 const mkx_agreed *g) {
  const char *fn = fn_of(op);
  const int64_t ep = a->num_experts / (c->size > 0 ? c->size : 1);
  const int64_t width = op == MOE_LAYER ? a->ffn : a->n;
  if (mkx_is_fp8(a->dtype)) {
    const char *why = mkx_moe_fp8_why(c, op, a);
    if (why) return mkx_error(MKX_ERR_UNSUPPORTED, "%s: GPU path: %s", fn, why);
  } else if (a->dtype != MKX_BF16 && a->dtype != MKX_FP16) {
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: GPU path takes bf16, fp16 and fp8 only", fn);
  } else if (a->ytype != a->dtype) {
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: GPU path writes its output in dtype (ytype %d, "
                     "dtype %d)",
                     fn, (int)a->ytype, (int)a->dtype);
  } else if (a->transw != MKX_NO_TRANS) {
    /* the tensor maps walk 16-bit W as hidden x n */
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: GPU path reads each expert's 16-bit weights hidden "
                     "x n (transw = MKX_TRANS)",
                     fn);
  }
  if (c->opt.moe_gpu == MKX_MOE_GPU_OFF)
    return mkx_error(MKX_ERR_UNSUPPORTED, "%s: option moe_gpu=off", fn);
  if (c->size > 1 && c->opt.moe_gpu != MKX_MOE_GPU_ALL)
    return mkx_error(MKX_ERR_UNSUPPORTED, "%s: %d ranks and option moe_gpu=one",
                     fn, c->size);
  if (c->place.num_nodes > 1)
    MKX_TRY(nodes_ok(c, fn));
  else if (c->size > 1)
    MKX_TRY(mkx_fused_node_ok(c, fn));
  if (c->place.local_size > MKX_MOE_MAX_RANKS ||
      (c->size > 1 && a->num_experts > 8192))
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: GPU path takes at most %d ranks per node, and on "
                     "several ranks at most 8192 experts",
                     fn, MKX_MOE_MAX_RANKS);
  if (g->total * a->topk >= MKX_MOE_NO_BAD_SLOT || ep > 8192 ||
      a->hidden >= (1ll << 30) || width >= (1ll << 29) ||
      a->num_experts >= (1ll << 31))
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: GPU path takes every rank's num_tokens x topk "
                     "below 2^31 - 2^24, "
                     "at most 8192 local experts, hidden below 2^30 and n or "
                     "ffn below 2^29",
                     fn);
  if (!aligned16(a->W) || (op == MOE_LAYER && !aligned16(a->W2)) ||
      (op == MOE_DISPATCH && !aligned16(a->Y)))
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: GPU path needs the weights%s 16-byte aligned", fn,
                     op == MOE_DISPATCH ? " and Y" : "");
  return MKX_SUCCESS;
}

int mkx_moe_dispatch_gpu_check(MKX_Comm c, const void *args,
                               const mkx_agreed *g) {
  return check(c, MOE_DISPATCH, args, g);
}

int mkx_moe_layer_gpu_check(MKX_Comm c, const void *args, const mkx_agreed *g) {
  return check(c, MOE_LAYER, args, g);
}
#else
typedef int mkx_moe_gpu_check_unused; /* ISO C: not an empty unit */
#endif
