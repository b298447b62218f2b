/* The verbs provider against a fake device (tests/unit/fake_ibv.c, linked
 * in with -Wl,--wrap): device choice, the QP state transitions and their
 * attributes, the work requests a write posts (data write, then the
 * ordered signal write, on the same QP, in one post), completions and
 * their order across the in-flight ring, error completions, device-memory
 * registration, and argument checks.  Three ranks live in this process;
 * their address blobs are exchanged by hand. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "core/options.h"
#include "net/net.h"
#include "net/verbs_blob.h"
#include "../common/check.h"
#include "fake_ibv.h"

#define NR 3
#define NSIG 8

static mkx_options opt;

static mkx_net_params params(int rank) {
  return (mkx_net_params){.rank = rank,
                          .size = NR,
                          .num_signals = NSIG,
                          .timeout_ms = 2000,
                          .opt = &opt};
}

static void test_no_device(void) {
  mkx_net_params p = params(0);
  mkx_net *n = NULL;
  fake_reset();
  CHECK(mkx_net_verbs_provider.probe(&p) == MKX_ERR_NET,
        "probe fails without devices");
  CHECK(strstr(MKX_Get_last_error(), "no RDMA devices") != NULL, "says why: %s",
        MKX_Get_last_error());
  /* auto falls through verbs and efa to tcp (on loopback here). */
  opt.net = MKX_NET_AUTO;
  strcpy(opt.net_tcp_bind, "lo");
  CHECK(mkx_net_open(&p, &n) == MKX_SUCCESS, "auto opens: %s",
        MKX_Get_last_error());
  CHECK(n && strcmp(mkx_net_name(n), "tcp") == 0, "auto picked tcp");
  mkx_net_close(n);
  /* An EFA device alone is no RC device. */
  fake_add_device("efa0", 1);
  CHECK(mkx_net_verbs_provider.probe(&p) == MKX_ERR_NET, "EFA is not RC");
  fake_add_device("mlx5_0", 0);
  opt.net = MKX_NET_AUTO;
  CHECK(mkx_net_open(&p, &n) == MKX_SUCCESS, "auto opens verbs");
  CHECK(n && strcmp(mkx_net_name(n), "verbs") == 0, "auto prefers verbs");
  /* RC: GPU memory registered, writes in order, whole 64-bit signals */
  CHECK(n &&
            mkx_net_caps(n) == (MKX_NET_CAP_DEVICE_MEM | MKX_NET_CAP_ORDERED) &&
            mkx_net_signal_bits(n) == 64,
        "verbs capabilities");
  mkx_net_close(n);
  CHECK(fake.opens == fake.closes, "every open device closed (%d/%d)",
        fake.opens, fake.closes);
}

static mkx_net *ep[NR];
static char *blobs;
static size_t blob_len;

static const verbs_blob *blob_of(int r) {
  return (const verbs_blob *)(blobs + blob_len * (size_t)r);
}

static void open_and_connect(void) {
  fake_reset();
  fake_add_device("efa0", 1);
  fake_add_device("mlx5_0", 0);
  opt.net = MKX_NET_VERBS;
  opt.net_ib_gid_index = 3;
  for (int r = 0; r < NR; r++) {
    mkx_net_params p = params(r);
    CHECK(mkx_net_open(&p, &ep[r]) == MKX_SUCCESS, "open rank %d: %s", r,
          MKX_Get_last_error());
  }
  CHECK(fake.qps == NR * (NR - 1), "one QP per peer (%d)", fake.qps);
  CHECK(fake.qp_init[0].qp_type == IBV_QPT_RC, "RC QPs");
  CHECK(fake.qp_init[0].cap.max_inline_data >= 8, "inline room for signals");
  const void *b;
  mkx_net_verbs_provider.address(ep[0], &b, &blob_len);
  blobs = malloc(blob_len * NR);
  for (int r = 0; r < NR; r++) {
    size_t len;
    mkx_net_verbs_provider.address(ep[r], &b, &len);
    CHECK(len == blob_len, "blob lengths agree");
    memcpy(blobs + blob_len * (size_t)r, b, blob_len);
  }
  for (int r = 0; r < NR; r++) {
    CHECK(mkx_net_verbs_provider.connect(ep[r], blobs, blob_len) == MKX_SUCCESS,
          "connect rank %d: %s", r, MKX_Get_last_error());
    ep[r]->connected = 1; /* what mkx_net_connect sets after the allgather */
  }
}

/* INIT, RTR, RTS in order, each with what the peer published. */
static void check_transitions(int me, int peer) {
  uint32_t qpn = blob_of(me)->qpn[peer];
  const verbs_blob *pb = blob_of(peer);
  const fake_modify *init = fake_modifies_of(qpn, 0);
  const fake_modify *rtr = fake_modifies_of(qpn, 1);
  const fake_modify *rts = fake_modifies_of(qpn, 2);
  CHECK(init && init->attr.qp_state == IBV_QPS_INIT &&
            init->mask == (IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                           IBV_QP_ACCESS_FLAGS) &&
            init->attr.port_num == 1 &&
            init->attr.qp_access_flags ==
                (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE),
        "%d->%d INIT", me, peer);
  CHECK(rtr && rtr->attr.qp_state == IBV_QPS_RTR &&
            (rtr->mask &
             (IBV_QP_AV | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_PATH_MTU |
              IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) ==
                (IBV_QP_AV | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_PATH_MTU |
                 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
        "%d->%d RTR mask", me, peer);
  CHECK(rtr && rtr->attr.dest_qp_num == pb->qpn[me],
        "%d->%d dest QPN %#x "
        "is the peer's QP towards us %#x",
        me, peer, rtr ? rtr->attr.dest_qp_num : 0, pb->qpn[me]);
  CHECK(
      rtr && rtr->attr.rq_psn == pb->psn && rtr->attr.path_mtu == IBV_MTU_4096,
      "%d->%d RTR psn and mtu", me, peer);
  CHECK(rtr && rtr->attr.ah_attr.dlid == pb->lid &&
            rtr->attr.ah_attr.is_global == 1 &&
            memcmp(rtr->attr.ah_attr.grh.dgid.raw, pb->gid, 16) == 0 &&
            rtr->attr.ah_attr.grh.sgid_index == 3,
        "%d->%d address vector: LID, GID, GID index", me, peer);
  CHECK(rts && rts->attr.qp_state == IBV_QPS_RTS &&
            rts->attr.sq_psn == blob_of(me)->psn && rts->attr.retry_cnt == 7 &&
            (rts->mask & IBV_QP_SQ_PSN) && (rts->mask & IBV_QP_TIMEOUT),
        "%d->%d RTS", me, peer);
  CHECK(fake_modifies_of(qpn, 3) == NULL, "%d->%d: three transitions", me,
        peer);
}

static char src[1 << 16], dst[NR][1 << 16];
static mkx_net_mr src_mr, dst_mr[NR];
static mkx_net_rkey keys[NR];

static void register_all(void) {
  mkx_net_reg_args a = {src, sizeof src, MKX_NET_MEM_HOST, -1, 0};
  CHECK(mkx_net_reg(ep[0], &a, &src_mr) == MKX_SUCCESS, "reg src");
  CHECK(fake.last_reg_access ==
            (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE),
        "access");
  for (int r = 0; r < NR; r++) {
    a.base = dst[r];
    CHECK(mkx_net_reg(ep[r], &a, &dst_mr[r]) == MKX_SUCCESS, "reg dst");
    mkx_net_rkey_of(&dst_mr[r], &keys[r]);
    CHECK(keys[r].rkey == ((struct ibv_mr *)dst_mr[r].handle)->rkey &&
              keys[r].addr == (uint64_t)(uintptr_t)dst[r],
          "rkey and address published");
  }
}

static void test_write(void) {
  int first = fake.nwr, calls = fake.post_calls;
  CHECK(mkx_net_write_signal(ep[0], 2, &src_mr, 24, &keys[2], 4096, 1000, 5, 42,
                             7) == MKX_SUCCESS,
        "write: %s", MKX_Get_last_error());
  CHECK(fake.nwr == first + 2 && fake.post_calls == calls + 1,
        "two work requests in one post");
  const fake_wr *d = &fake.wr[first], *s = &fake.wr[first + 1];
  uint32_t qpn = blob_of(0)->qpn[2];
  CHECK(d->qp_num == qpn && s->qp_num == qpn, "both on the QP to rank 2");
  CHECK(d->opcode == IBV_WR_RDMA_WRITE && !(d->send_flags & IBV_SEND_SIGNALED),
        "data: unsignaled RDMA write");
  CHECK(d->sge_addr == (uint64_t)(uintptr_t)src + 24 && d->sge_len == 1000 &&
            d->sge_lkey == src_mr.lkey,
        "data: local address, length, lkey");
  CHECK(d->remote_addr == keys[2].addr + 4096 && d->rkey == keys[2].rkey,
        "data: remote address and rkey");
  CHECK(s->opcode == IBV_WR_RDMA_WRITE && (s->send_flags & IBV_SEND_SIGNALED) &&
            (s->send_flags & IBV_SEND_INLINE) && s->sge_len == 8,
        "signal: signaled inline 8-byte RDMA write after the data");
  CHECK(s->remote_addr == blob_of(2)->sig_addr + 5 * 8 &&
            s->rkey == blob_of(2)->sig_rkey,
        "signal: rank 2's signal word 5 and its rkey");
  CHECK(s->inline_word == 42, "signal value %llu",
        (unsigned long long)s->inline_word);
  CHECK(mkx_net_bytes_sent(ep[0], 2) == 1000, "bytes counted");
  mkx_net_completion c[4];
  int got = 0;
  CHECK(mkx_net_poll(ep[0], c, 4, &got) == MKX_SUCCESS && got == 1 &&
            c[0].cookie == 7 && c[0].peer == 2,
        "one completion, cookie 7 from rank 2 (%d)", got);
  /* Zero bytes: the signal alone. */
  first = fake.nwr;
  CHECK(mkx_net_write_signal(ep[1], 0, &dst_mr[1], 0, &keys[0], 0, 0, 1, 9,
                             8) == MKX_SUCCESS,
        "empty write");
  CHECK(fake.nwr == first + 1 && fake.wr[first].inline_word == 9 &&
            fake.wr[first].remote_addr == blob_of(0)->sig_addr + 8,
        "an empty write posts only the signal");
  CHECK(mkx_net_poll(ep[1], c, 4, &got) == MKX_SUCCESS && got == 1, "poll");
}

/* More writes than the in-flight ring holds: completions keep their order. */
static void test_ring_wrap(void) {
  mkx_net_completion c[16];
  for (uint64_t i = 0; i < 1000; i++)
    CHECK(mkx_net_write_signal(ep[0], 1, &src_mr, 0, &keys[1], 0, 64, 0, i + 1,
                               100 + i) == MKX_SUCCESS,
          "write %llu", (unsigned long long)i);
  uint64_t next = 100;
  int got = 1;
  while (got > 0) {
    CHECK(mkx_net_poll(ep[0], c, 16, &got) == MKX_SUCCESS, "poll");
    for (int i = 0; i < got; i++)
      CHECK(c[i].cookie == next++ && c[i].peer == 1, "in order");
  }
  CHECK(next == 1100, "all 1000 completed (%llu)",
        (unsigned long long)(next - 100));
  CHECK(mkx_net_bytes_sent(ep[0], 1) == 64000, "64000 bytes counted");
}

static void test_error_completion(void) {
  mkx_net_completion c[4];
  int got = 0;
  fake.fail_next = IBV_WC_REM_ACCESS_ERR;
  CHECK(mkx_net_write_signal(ep[2], 1, &dst_mr[2], 0, &keys[1], 0, 8, 0, 1,
                             1) == MKX_SUCCESS,
        "post");
  CHECK(mkx_net_poll(ep[2], c, 4, &got) == MKX_ERR_NET, "error completion");
  CHECK(strstr(MKX_Get_last_error(), "to rank 1") &&
            strstr(MKX_Get_last_error(), "remote access error"),
        "names the peer and status: %s", MKX_Get_last_error());
}

static void test_arguments(void) {
  CHECK(mkx_net_write_signal(ep[0], 0, &src_mr, 0, &keys[0], 0, 8, 0, 1, 1) ==
            MKX_ERR_INVALID_ARG,
        "no write to self");
  CHECK(mkx_net_write_signal(ep[0], 1, &src_mr, 0, &keys[1], sizeof dst[1] - 4,
                             8, 0, 1, 1) == MKX_ERR_INVALID_ARG,
        "remote overrun");
  CHECK(mkx_net_write_signal(ep[0], 1, &src_mr, sizeof src, &keys[1], 0, 1, 0,
                             1, 1) == MKX_ERR_INVALID_ARG,
        "local overrun");
  CHECK(mkx_net_write_signal(ep[0], 1, &src_mr, 0, &keys[1], 0, 1, NSIG, 1,
                             1) == MKX_ERR_INVALID_ARG,
        "signal slot range");
}

static void test_device_memory(void) {
  mkx_net_reg_args a = {(void *)(uintptr_t)0x7f0000000000ull, 1 << 20,
                        MKX_NET_MEM_DEVICE, 5, 4096};
  mkx_net_mr mr;
#ifdef HAVE_IBV_REG_DMABUF_MR
  CHECK(mkx_net_reg(ep[0], &a, &mr) == MKX_SUCCESS && fake.dmabuf_regs == 1 &&
            fake.last_dmabuf_fd == 5,
        "device memory through DMA-BUF");
  CHECK(mkx_net_dereg(ep[0], &mr) == MKX_SUCCESS, "dereg");
  fake.fail_dmabuf = 1;
  int plain = fake.plain_regs;
  CHECK(mkx_net_reg(ep[0], &a, &mr) == MKX_SUCCESS &&
            fake.plain_regs == plain + 1,
        "DMA-BUF refused: falls back to peer memory");
#else
  CHECK(mkx_net_reg(ep[0], &a, &mr) == MKX_SUCCESS, "peer-memory registration");
#endif
  CHECK(mkx_net_dereg(ep[0], &mr) == MKX_SUCCESS, "dereg");
}

int main(void) {
  CHECK(mkx_net_options_register() == MKX_SUCCESS &&
            mkx_options_load(&opt, MPI_INFO_NULL) == MKX_SUCCESS,
        "options");
  test_no_device();
  open_and_connect();
  for (int me = 0; me < NR; me++)
    for (int peer = 0; peer < NR; peer++)
      if (me != peer) check_transitions(me, peer);
  register_all();
  test_write();
  test_ring_wrap();
  test_arguments();
  test_device_memory();
  test_error_completion();
  CHECK(mkx_net_dereg(ep[0], &src_mr) == MKX_SUCCESS, "dereg");
  for (int r = 0; r < NR; r++) {
    CHECK(mkx_net_dereg(ep[r], &dst_mr[r]) == MKX_SUCCESS, "dereg");
    mkx_net_close(ep[r]);
  }
  free(blobs);
  CHECK(fake.qps_destroyed == fake.qps && fake.mrs_freed == fake.mrs &&
            fake.opens == fake.closes,
        "everything released (qps %d/%d, mrs %d/%d, devices %d/%d)",
        fake.qps_destroyed, fake.qps, fake.mrs_freed, fake.mrs, fake.closes,
        fake.opens);
  return check_done("test_net_verbs");
}
