/* The command ring's byte layout, shared by the host (proxy.h, C11) and
 * the GPU producer (kernels/proxy/proxy_dev.cuh, CUDA C++): both sides
 * static_assert their structures against these offsets, so a field moved
 * on one side fails the build instead of corrupting the ring.  Plain
 * macros only: includable from C and C++. */
#ifndef MKX_PROXY_PROXY_LAYOUT_H
#define MKX_PROXY_PROXY_LAYOUT_H

/* mkx_proxy_ring: a 128-byte header, then `entries` 64-byte commands.
 * `reserved` (tickets, written by producers) sits alone on its cache line;
 * `consumed`, `completed`, `error` (written by the proxy) share the next. */
#define MKX_PROXY_OFF_RESERVED 0
#define MKX_PROXY_OFF_CONSUMED 64
#define MKX_PROXY_OFF_COMPLETED 72
#define MKX_PROXY_OFF_ERROR 80
#define MKX_PROXY_OFF_ENTRIES 84
#define MKX_PROXY_OFF_CMD 128
#define MKX_PROXY_HEADER_BYTES 128

/* mkx_proxy_cmd: 64 bytes; `seq` is stored last (release). */
#define MKX_PROXY_CMD_BYTES 64
#define MKX_PROXY_CMD_OP 0
#define MKX_PROXY_CMD_PEER 4
#define MKX_PROXY_CMD_SRC 8
#define MKX_PROXY_CMD_DST 12
#define MKX_PROXY_CMD_SRC_OFF 16
#define MKX_PROXY_CMD_DST_OFF 24
#define MKX_PROXY_CMD_LEN 32
#define MKX_PROXY_CMD_SLOT 40
#define MKX_PROXY_CMD_PAD 44
#define MKX_PROXY_CMD_VALUE 48
#define MKX_PROXY_CMD_SEQ 56

/* The one operation: a write with a signal. */
#define MKX_PROXY_OP_WRITE 1

#endif
