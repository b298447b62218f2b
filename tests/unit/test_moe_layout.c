/* The row layout of MoE calls on several ranks (src/ops/moe/moe_layout.h)
 * against a simulation of the whole job: every rank's rows, labelled
 * (source, expert, index), placed as the layout says (straight into a
 * same-node owner, or into the send area), the send areas' blocks
 * "exchanged" to the owners in rank order and moved by the receivers'
 * segments.  Every owner must end with each of its rows exactly once, its
 * experts' rows at its offsets, and within an expert the sources in rank
 * order, each source's rows in order; sends and receives must match
 * pairwise, and so must the positions of the blocks in the peers' areas
 * and the largest blocks, as every rank computes them.  Random counts (with zeros and one expert taking most rows),
 * on one node, on nodes of equal size and on nodes numbered out of
 * order. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "../common/check.h"
#include "core/error.h"
#include "ops/moe/moe_layout.h"

typedef struct label {
  int src, e, j;
} label;

static uint64_t rng = 88172645463325252ull;
static int rnd(int n) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (int)(rng % (uint64_t)n);
}

/* The job's P ranks, each rank's node and local rank (node sizes equal:
 * G ranks per node; `shuffled`: ranks not numbered node by node). */
static void place_ranks(int P, int G, int shuffled, int *node_of,
                        int *local_of) {
  int *order = malloc(sizeof *order * (size_t)P);
  for (int i = 0; i < P; i++) order[i] = i;
  for (int i = P - 1; shuffled && i > 0; i--) {
    const int k = rnd(i + 1), t = order[i];
    order[i] = order[k], order[k] = t;
  }
  for (int i = 0; i < P; i++) {
    node_of[order[i]] = i / G;
    local_of[order[i]] = i % G;
  }
  free(order);
}

typedef struct job {
  int P, G, ep;
  int64_t E;
  int64_t *counts;
  int *node_of, *local_of;
  mkx_moe_layout *L;
  label **grouped; /* [P]: each owner's rows */
  label **sendbuf; /* [P]: each rank's send area */
} job;

/* Every source's rows where its layout says; 0 on a position out of
 * range or taken twice. */
static int place_rows(job *J) {
  for (int s = 0; s < J->P; s++)
    for (int64_t e = 0; e < J->E; e++) {
      const int d = (int)(e / J->ep);
      const int64_t k = J->counts[(int64_t)s * J->E + e];
      const int remote = J->L[s].target[d] == J->G;
      if (!remote && J->L[s].target[d] != J->local_of[d]) return 0;
      if (remote != (J->node_of[d] != J->node_of[s])) return 0;
      for (int j = 0; j < k; j++) {
        const int64_t at = J->L[s].base[e] + j;
        label *dst = remote ? J->sendbuf[s] : J->grouped[d];
        const int64_t cap = remote ? J->L[s].sent : J->L[d].rows;
        if (at < 0 || at >= cap || dst[at].src >= 0) return 0;
        dst[at] = (label){s, (int)e, j};
      }
    }
  return 1;
}

/* The network: owner d gets its senders' blocks in rank order and moves
 * them by its segments; 0 where sizes disagree or a place is taken. */
static int exchange(job *J) {
  for (int d = 0; d < J->P; d++) {
    const mkx_moe_layout *Ld = &J->L[d];
    label *recv = malloc(sizeof *recv * (size_t)(Ld->received + 1));
    int64_t at = 0, ok = 1;
    for (int s = 0; s < J->P; s++) {
      int64_t off = 0; /* s's block for d in its send area */
      for (int q = 0; q < d; q++) off += J->L[s].send[q];
      if (J->L[s].send[d] != Ld->recv[s]) ok = 0;
      /* where writes into the peers' areas put these blocks */
      if (J->L[s].send[d] > 0 &&
          (J->L[s].send_at[d] != at || Ld->back_at[s] != off))
        ok = 0;
      for (int64_t r = 0; ok && r < Ld->recv[s]; r++)
        recv[at++] = J->sendbuf[s][off + r];
    }
    ok = ok && at == Ld->received && Ld->seg_start[0] == 0 &&
         Ld->seg_start[Ld->nseg] == at;
    for (int g = 0; ok && g < Ld->nseg; g++)
      for (int r = Ld->seg_start[g]; ok && r < Ld->seg_start[g + 1]; r++) {
        const int64_t to = Ld->seg_row[g] + (r - Ld->seg_start[g]);
        ok = to >= 0 && to < Ld->rows && J->grouped[d][to].src < 0;
        if (ok) J->grouped[d][to] = recv[r];
      }
    free(recv);
    if (!ok) return 0;
  }
  int64_t most_sent = 0, most_received = 0;
  for (int q = 0; q < J->P; q++) {
    if (J->L[q].sent > most_sent) most_sent = J->L[q].sent;
    if (J->L[q].received > most_received) most_received = J->L[q].received;
  }
  for (int q = 0; q < J->P; q++)
    if (J->L[q].max_sent != most_sent || J->L[q].max_received != most_received)
      return 0;
  return 1;
}

/* Every owner's rows: all there, in (expert, source, index) order, its
 * experts at its offsets. */
static int owners_ok(const job *J) {
  for (int d = 0; d < J->P; d++) {
    const mkx_moe_layout *Ld = &J->L[d];
    int64_t want = 0;
    for (int le = 0; le <= J->ep; le++) {
      if (Ld->local[le] != want) return 0;
      for (int s = 0; le < J->ep && s < J->P; s++)
        want += J->counts[(int64_t)s * J->E + (int64_t)d * J->ep + le];
    }
    if (Ld->rows != want) return 0;
    for (int64_t r = 0; r < Ld->rows; r++) {
      const label x = J->grouped[d][r];
      if (x.src < 0 || x.e / J->ep != d) return 0;
      const int le = x.e - d * J->ep;
      if (r < Ld->local[le] || r >= Ld->local[le + 1]) return 0;
      if (r > Ld->local[le]) {
        const label p = J->grouped[d][r - 1];
        if (p.src > x.src || (p.src == x.src && p.j + 1 != x.j)) return 0;
      } else if (x.j != 0) {
        return 0;
      }
    }
  }
  return 1;
}

static void random_counts(job *J, int skew) {
  for (int s = 0; s < J->P; s++)
    for (int64_t e = 0; e < J->E; e++) {
      int k = rnd(4) == 0 ? 0 : rnd(6);
      if (skew && e == 0) k = 40 + rnd(20);
      J->counts[(int64_t)s * J->E + e] = k;
    }
}

static void job_case(int P, int G, int ep, int shuffled, int skew) {
  job J = {P, G, ep, (int64_t)P * ep, NULL, NULL, NULL, NULL, NULL, NULL};
  J.counts = malloc(sizeof *J.counts * (size_t)(P * J.E));
  J.node_of = malloc(sizeof *J.node_of * (size_t)P);
  J.local_of = malloc(sizeof *J.local_of * (size_t)P);
  J.L = calloc((size_t)P, sizeof *J.L);
  J.grouped = calloc((size_t)P, sizeof *J.grouped);
  J.sendbuf = calloc((size_t)P, sizeof *J.sendbuf);
  place_ranks(P, G, shuffled, J.node_of, J.local_of);
  random_counts(&J, skew);
  int made = 1;
  for (int q = 0; q < P; q++)
    made &= mkx_moe_layout_make(P, q, J.E, J.counts, J.E, J.node_of, J.local_of,
                                G, &J.L[q]) == MKX_SUCCESS;
  for (int q = 0; made && q < P; q++) {
    J.grouped[q] = malloc(sizeof(label) * (size_t)(J.L[q].rows + 1));
    J.sendbuf[q] = malloc(sizeof(label) * (size_t)(J.L[q].sent + 1));
    for (int64_t r = 0; r <= J.L[q].rows; r++) J.grouped[q][r].src = -1;
    for (int64_t r = 0; r <= J.L[q].sent; r++) J.sendbuf[q][r].src = -1;
  }
  const int placed = made && place_rows(&J);
  const int moved = placed && exchange(&J);
  const int owners = moved && owners_ok(&J);
  int64_t sent = 0, received = 0;
  for (int q = 0; q < P; q++) sent += J.L[q].sent, received += J.L[q].received;
  CHECK(made && placed && moved && owners && sent == received,
        "%d ranks, %d per node%s, %d experts each%s: layout %d, placed %d, "
        "exchanged %d, owners' rows %d, %lld sent / %lld received",
        P, G, shuffled ? " (numbered out of node order)" : "", ep,
        skew ? ", skewed" : "", made, placed, moved, owners, (long long)sent,
        (long long)received);
  for (int q = 0; q < P; q++) {
    mkx_moe_layout_free(&J.L[q]);
    free(J.grouped[q]);
    free(J.sendbuf[q]);
  }
  free(J.counts), free(J.node_of), free(J.local_of);
  free(J.L), free(J.grouped), free(J.sendbuf);
}

int main(void) {
  static const int shapes[][2] = {{1, 1}, {2, 2}, {4, 4}, {2, 1}, {4, 2},
                                  {4, 1}, {6, 3}, {8, 4}, {8, 2}, {12, 4}};
  for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
    for (int ep = 1; ep <= 5; ep += 2)
      for (int shuffled = 0; shuffled < 2; shuffled++)
        for (int skew = 0; skew < 2; skew++)
          job_case(shapes[k][0], shapes[k][1], ep, shuffled, skew);
  return check_done("test_moe_layout");
}
