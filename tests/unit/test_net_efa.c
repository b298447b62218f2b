/* The efa provider against a fake device (tests/unit/fake_ibv.c, linked in
 * with -Wl,--wrap): capability check, the SRD QP and its transitions,
 * receives posted for write-with-immediate, address handles, the posted
 * write (address handle, QPN, qkey, rkey, immediate = slot and value),
 * the receiver's signal from a completion (including values across the
 * 16-bit boundary and out of order), error completions and size limits.
 * efa.c is compiled into this test with the RDMA-write capability bit, so
 * it runs even where the installed efadv.h predates the bit. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "core/options.h"
#include "net/net.h"
#include "../common/check.h"

#if HAVE_EFA
#include "fake_ibv.h"

#define CAP_RDMA_WRITE 8 /* EFADV_DEVICE_ATTR_CAPS_RDMA_WRITE in rdma-core */
#define NSIG 8

static mkx_options opt;
static mkx_net *ep[2];

static mkx_net_params params(int rank) {
  return (mkx_net_params){.rank = rank,
                          .size = 2,
                          .num_signals = NSIG,
                          .timeout_ms = 2000,
                          .opt = &opt};
}

static void test_capability(void) {
  mkx_net_params p = params(0);
  fake_reset();
  CHECK(mkx_net_efa_provider.probe(&p) == MKX_ERR_NET, "no device");
  fake_add_device("mlx5_0", 0);
  CHECK(mkx_net_efa_provider.probe(&p) == MKX_ERR_NET, "an RC NIC is no EFA");
  fake_add_device("efa0", 1);
  fake.efa_caps = EFADV_DEVICE_ATTR_CAPS_RDMA_READ;
  CHECK(mkx_net_efa_provider.probe(&p) == MKX_ERR_UNSUPPORTED,
        "no RDMA write: unsupported");
  CHECK(strstr(MKX_Get_last_error(), "RDMA write") != NULL, "says why: %s",
        MKX_Get_last_error());
  fake.efa_caps |= CAP_RDMA_WRITE;
  CHECK(mkx_net_efa_provider.probe(&p) == MKX_SUCCESS, "probe: %s",
        MKX_Get_last_error());
  opt.net = MKX_NET_AUTO;
  mkx_net *n = NULL;
  CHECK(mkx_net_open(&p, &n) == MKX_SUCCESS && n &&
            strcmp(mkx_net_name(n), "verbs") == 0,
        "auto: verbs first when an RC device exists");
  mkx_net_close(n);
  fake_reset();
  fake_add_device("efa0", 1);
  fake.efa_caps = CAP_RDMA_WRITE;
  CHECK(mkx_net_open(&p, &n) == MKX_SUCCESS && n &&
            strcmp(mkx_net_name(n), "efa") == 0,
        "auto: efa when only EFA exists");
  /* SRD: GPU memory registered, writes unordered, 16-bit immediates */
  CHECK(n && mkx_net_caps(n) == MKX_NET_CAP_DEVICE_MEM &&
            mkx_net_signal_bits(n) == 16,
        "efa capabilities");
  mkx_net_close(n);
}

typedef struct blob_view { /* efa.c's address blob */
  uint32_t magic;
  uint32_t qpn, qkey;
  uint8_t gid[16];
} blob_view;

static blob_view blobs[2];
static char src[1 << 16], dst[2][1 << 16];
static mkx_net_mr src_mr, dst_mr[2];
static mkx_net_rkey keys[2];

static void open_pair(void) {
  fake_reset();
  fake_add_device("efa0", 1);
  fake.efa_caps = CAP_RDMA_WRITE | EFADV_DEVICE_ATTR_CAPS_RNR_RETRY;
  opt.net = MKX_NET_EFA;
  for (int r = 0; r < 2; r++) {
    mkx_net_params p = params(r);
    CHECK(mkx_net_open(&p, &ep[r]) == MKX_SUCCESS, "open %d: %s", r,
          MKX_Get_last_error());
  }
  CHECK(fake.efa_driver_qp_type == EFADV_QP_DRIVER_TYPE_SRD &&
            fake.efa_qp_attr.qp_type == IBV_QPT_DRIVER,
        "SRD QP through efadv_create_qp_ex");
  CHECK((fake.efa_qp_attr.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) &&
            (fake.efa_qp_attr.send_ops_flags &
             IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM),
        "the QP can write with immediate");
  CHECK(fake.ncq == 2, "one CQ per endpoint");
  CHECK(fake.recvs_posted == 2 * 128, "receives for incoming immediates (%d)",
        fake.recvs_posted);
  for (int r = 0; r < 2; r++) {
    const void *b;
    size_t len;
    mkx_net_efa_provider.address(ep[r], &b, &len);
    CHECK(len == sizeof(blob_view), "blob size");
    memcpy(&blobs[r], b, sizeof(blob_view));
  }
  for (int r = 0; r < 2; r++) {
    CHECK(mkx_net_efa_provider.connect(ep[r], blobs, sizeof(blob_view)) ==
              MKX_SUCCESS,
          "connect %d: %s", r, MKX_Get_last_error());
    ep[r]->connected = 1;
  }
  CHECK(fake.nah == 2 && fake.ah_attr[0].is_global &&
            memcmp(fake.ah_attr[0].grh.dgid.raw, blobs[1].gid, 16) == 0 &&
            memcmp(fake.ah_attr[1].grh.dgid.raw, blobs[0].gid, 16) == 0,
        "an address handle per peer, from its GID");
}

static void check_transitions(void) {
  uint32_t qpn = blobs[0].qpn;
  const fake_modify *init = fake_modifies_of(qpn, 0);
  const fake_modify *rtr = fake_modifies_of(qpn, 1);
  const fake_modify *rts = fake_modifies_of(qpn, 2);
  CHECK(init && init->attr.qp_state == IBV_QPS_INIT &&
            (init->mask & IBV_QP_QKEY) && init->attr.qkey == blobs[0].qkey &&
            init->attr.port_num == 1,
        "INIT with port and qkey");
  CHECK(rtr && rtr->attr.qp_state == IBV_QPS_RTR && rtr->mask == IBV_QP_STATE,
        "RTR: state only (SRD has no connection)");
  CHECK(rts && rts->attr.qp_state == IBV_QPS_RTS &&
            (rts->mask & IBV_QP_RNR_RETRY) && rts->attr.rnr_retry == 7,
        "RTS with RNR retry where the device has it");
}

static void register_all(void) {
  mkx_net_reg_args a = {src, sizeof src, MKX_NET_MEM_HOST, -1, 0};
  CHECK(mkx_net_reg(ep[0], &a, &src_mr) == MKX_SUCCESS, "reg src");
  for (int r = 0; r < 2; r++) {
    a.base = dst[r];
    CHECK(mkx_net_reg(ep[r], &a, &dst_mr[r]) == MKX_SUCCESS, "reg dst");
    mkx_net_rkey_of(&dst_mr[r], &keys[r]);
  }
}

/* What the target's NIC reports once a write with immediate is placed
 * (each endpoint made one CQ, in rank order). */
static void arrive(int rank, uint32_t imm) {
  struct ibv_wc wc = {.wr_id = UINT64_MAX,
                      .status = IBV_WC_SUCCESS,
                      .opcode = IBV_WC_RECV_RDMA_WITH_IMM,
                      .wc_flags = IBV_WC_WITH_IMM,
                      .imm_data = htonl(imm)};
  fake_complete(fake.cqs[rank], &wc);
}

static void test_write(void) {
  CHECK(mkx_net_write_signal(ep[0], 1, &src_mr, 100, &keys[1], 2048, 5000, 3,
                             0x10005, 77) == MKX_SUCCESS,
        "write: %s", MKX_Get_last_error());
  CHECK(fake.nefa_wr == 1, "one work request");
  const mkx_efa_write *w = &fake.efa_wr[0];
  CHECK(w->remote_qpn == blobs[1].qpn && w->remote_qkey == blobs[1].qkey,
        "to rank 1's QP and qkey");
  CHECK(w->rkey == keys[1].rkey && w->remote_addr == keys[1].addr + 2048,
        "remote key and address");
  CHECK(w->lkey == src_mr.lkey &&
            w->local_addr == (uint64_t)(uintptr_t)src + 100 && w->len == 5000,
        "local key, address, length");
  CHECK(w->imm == (3u << 16 | 0x0005),
        "immediate carries slot and value "
        "(%#x)",
        w->imm);
  CHECK(w->ah != NULL, "address handle set");
  mkx_net_completion c[4];
  int got = 0;
  CHECK(mkx_net_poll(ep[0], c, 4, &got) == MKX_SUCCESS && got == 1 &&
            c[0].cookie == 77 && c[0].peer == 1,
        "sender completion");
  CHECK(mkx_net_bytes_sent(ep[0], 1) == 5000, "bytes counted");
}

/* Receiver: signals rebuilt from 16 bits move forward only. */
static void test_signals(void) {
  mkx_net_completion c[4];
  int got = 0, recvs = fake.recvs_posted;
  arrive(1, 3u << 16 | 5);
  CHECK(mkx_net_poll(ep[1], c, 4, &got) == MKX_SUCCESS && got == 0, "poll");
  CHECK(mkx_net_signal(ep[1], 3) == 5, "signal 3 = 5 (%llu)",
        (unsigned long long)mkx_net_signal(ep[1], 3));
  CHECK(fake.recvs_posted == recvs + 1, "the receive is replaced");
  atomic_store(&ep[1]->signals[2], 0xfffe);
  arrive(1, 2u << 16 | 0x0001); /* 0x10001: across the boundary */
  arrive(1, 2u << 16 | 0xffff); /* 0xffff, arriving late */
  CHECK(mkx_net_poll(ep[1], c, 4, &got) == MKX_SUCCESS, "poll");
  CHECK(mkx_net_signal(ep[1], 2) == 0x10001,
        "0xfffe -> 0x10001, not back "
        "(%#llx)",
        (unsigned long long)mkx_net_signal(ep[1], 2));
  arrive(1, (uint32_t)NSIG << 16 | 1);
  CHECK(mkx_net_poll(ep[1], c, 4, &got) == MKX_ERR_NET, "bad slot refused");
}

static void test_errors(void) {
  mkx_net_completion c[4];
  int got = 0;
  fake.fail_next = IBV_WC_GENERAL_ERR;
  CHECK(mkx_net_write_signal(ep[0], 1, &src_mr, 0, &keys[1], 0, 8, 0, 1, 5) ==
            MKX_SUCCESS,
        "post");
  CHECK(mkx_net_poll(ep[0], c, 4, &got) == MKX_ERR_NET &&
            strstr(MKX_Get_last_error(), "to rank 1"),
        "error completion names the peer: %s", MKX_Get_last_error());
  static char big[2 << 20];
  mkx_net_mr bmr;
  mkx_net_rkey bkey;
  mkx_net_reg_args a = {big, sizeof big, MKX_NET_MEM_HOST, -1, 0};
  CHECK(mkx_net_reg(ep[0], &a, &bmr) == MKX_SUCCESS, "reg big");
  mkx_net_rkey_of(&bmr, &bkey);
  CHECK(mkx_net_write_signal(ep[0], 1, &bmr, 0, &bkey, 0, sizeof big, 0, 1,
                             1) == MKX_ERR_INVALID_ARG,
        "larger than max_rdma_size: refused");
  CHECK(mkx_net_dereg(ep[0], &bmr) == MKX_SUCCESS, "dereg");
}

int main(void) {
  CHECK(mkx_net_options_register() == MKX_SUCCESS &&
            mkx_options_load(&opt, MPI_INFO_NULL) == MKX_SUCCESS,
        "options");
  test_capability();
  open_pair();
  check_transitions();
  register_all();
  test_write();
  test_signals();
  test_errors();
  CHECK(mkx_net_dereg(ep[0], &src_mr) == MKX_SUCCESS, "dereg");
  for (int r = 0; r < 2; r++) {
    CHECK(mkx_net_dereg(ep[r], &dst_mr[r]) == MKX_SUCCESS, "dereg");
    mkx_net_close(ep[r]);
  }
  CHECK(fake.qps_destroyed == fake.qps && fake.mrs_freed == fake.mrs &&
            fake.ahs_destroyed == fake.ahs && fake.opens == fake.closes,
        "everything released");
  return check_done("test_net_efa");
}
#else
int main(void) {
  printf("SKIP: built without efadv\n");
  return 77;
}
#endif
