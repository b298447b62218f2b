/*
 * mkx_test.c - helpers shared by the MKX multi-rank tests (see mkx_test.h).
 */
#define _POSIX_C_SOURCE 200809L
#include "mkx_test.h"

#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef MKX_TEST_CUDA
#include <cuda_runtime.h>
#endif

mt_ctx mt;

/* ---- hang guard ----------------------------------------------------------- */

static char hang_msg[192];
static size_t hang_len;

static void on_alarm(int sig) {
  (void)sig;
  ssize_t n = write(STDOUT_FILENO, hang_msg, hang_len); /* signal-safe */
  (void)n;
  _exit(1); /* the launcher then ends the other ranks */
}

void mt_guard(const char *what, int seconds) {
  snprintf(hang_msg, sizeof hang_msg,
           "not ok - rank %d: %s still running after %d s: a wait hangs\n",
           mt.rank, what, seconds);
  hang_len = strlen(hang_msg);
  fflush(stdout); /* _exit would drop what is buffered */
  signal(SIGALRM, on_alarm);
  alarm((unsigned)seconds);
}

void mt_guard_off(void) { alarm(0); }

double mt_now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- PRNG ----------------------------------------------------------------- */

uint64_t mt_splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void mt_rng_init(mt_rng *g, uint64_t seed, int rank, int tensor) {
  uint64_t x = seed;
  uint64_t a = mt_splitmix64(&x);
  x = a ^ (0xA5A5A5A5ull + (uint64_t)(uint32_t)rank * 0x100000001B3ull);
  uint64_t b = mt_splitmix64(&x);
  x = b ^ ((uint64_t)(uint32_t)tensor * 0xC2B2AE3D27D4EB4Full + 7);
  for (int i = 0; i < 4; i++) g->s[i] = mt_splitmix64(&x);
  if (!(g->s[0] | g->s[1] | g->s[2] | g->s[3])) g->s[0] = 1;
}

static inline uint64_t rotl(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}

uint64_t mt_rng_next(mt_rng *g) {
  uint64_t *s = g->s;
  uint64_t r = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return r;
}

double mt_rng_unit(mt_rng *g) {
  return (double)(mt_rng_next(g) >> 11) * (1.0 / 9007199254740992.0);
}

double mt_rng_sym(mt_rng *g) {
  double v = 2.0 * mt_rng_unit(g) - 1.0;
  if (v == 0.0) v = 0.5;
  return v;
}

int64_t mt_rng_int(mt_rng *g, int64_t lo, int64_t hi) {
  if (hi <= lo) return lo;
  uint64_t span = (uint64_t)(hi - lo) + 1;
  return lo + (int64_t)(mt_rng_next(g) % span);
}

size_t mt_type_size(MKX_Datatype t) {
  switch (t) {
    case MKX_BF16:
    case MKX_FP16:
      return 2;
    case MKX_FP32:
      return 4;
    case MKX_FP64:
      return 8;
    case MKX_FP8_E4M3:
    case MKX_FP8_E5M2:
      return 1;
  }
  return 0;
}

const char *mt_type_name(MKX_Datatype t) {
  switch (t) {
    case MKX_BF16:
      return "bf16";
    case MKX_FP16:
      return "fp16";
    case MKX_FP32:
      return "fp32";
    case MKX_FP64:
      return "fp64";
    case MKX_FP8_E4M3:
      return "e4m3";
    case MKX_FP8_E5M2:
      return "e5m2";
  }
  return "?";
}

const char *mt_order_name(MKX_Order o) {
  return o == MKX_ROW_MAJOR ? "row" : o == MKX_COL_MAJOR ? "col" : "?";
}

double mt_round(MKX_Datatype t, double v) {
  switch (t) {
    case MKX_BF16:
      return mt_bf16_to_f32(mt_f32_to_bf16((float)v));
    case MKX_FP16:
      return mt_f16_to_f32(mt_f32_to_f16((float)v));
    case MKX_FP32:
      return (float)v;
    case MKX_FP64:
      return v;
    default: /* fp8: not a type of these helpers */
      break;
  }
  return NAN;
}

double mt_get(const void *buf, MKX_Datatype t, size_t idx) {
  switch (t) {
    case MKX_BF16:
      return mt_bf16_to_f32(((const uint16_t *)buf)[idx]);
    case MKX_FP16:
      return mt_f16_to_f32(((const uint16_t *)buf)[idx]);
    case MKX_FP32:
      return ((const float *)buf)[idx];
    case MKX_FP64:
      return ((const double *)buf)[idx];
    default: /* fp8: not a type of these helpers */
      break;
  }
  return NAN;
}

void mt_set(void *buf, MKX_Datatype t, size_t idx, double v) {
  switch (t) {
    case MKX_BF16:
      ((uint16_t *)buf)[idx] = mt_f32_to_bf16((float)v);
      break;
    case MKX_FP16:
      ((uint16_t *)buf)[idx] = mt_f32_to_f16((float)v);
      break;
    case MKX_FP32:
      ((float *)buf)[idx] = (float)v;
      break;
    case MKX_FP64:
      ((double *)buf)[idx] = v;
      break;
    default: /* fp8: not a type of these helpers */
      break;
  }
}

/* ---- matrices --------------------------------------------------------------- */

size_t mt_mat_elems(MKX_Order o, int64_t rows, int64_t cols, int64_t ld) {
  int64_t outer = o == MKX_ROW_MAJOR ? rows : cols;
  int64_t n = outer * ld;
  return n > 0 ? (size_t)n : 1;
}

double *mt_gen(int64_t rows, int64_t cols, MKX_Datatype t, uint64_t seed,
               int rank, int tensor) {
  size_t n = (size_t)(rows * cols);
  double *v = malloc((n ? n : 1) * sizeof(double));
  mt_rng g;
  mt_rng_init(&g, seed, rank, tensor);
  for (size_t i = 0; i < n; i++) {
    double x = mt_round(t, mt_rng_sym(&g));
    if (x == 0.0) x = mt_round(t, 0.25);
    v[i] = x;
  }
  return v;
}

void mt_store(void *buf, MKX_Datatype t, MKX_Order o, int64_t rows,
              int64_t cols, int64_t ld, const double *v) {
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++)
      mt_set(buf, t, mt_off(o, ld, i, j), v[i * cols + j]);
}

double mt_mat_get(const void *buf, MKX_Datatype t, MKX_Order o, int64_t ld,
                  int64_t i, int64_t j) {
  return mt_get(buf, t, mt_off(o, ld, i, j));
}

void mt_poison(void *buf, size_t bytes) { memset(buf, 0xFF, bytes); }

int mt_is_poison(const void *buf, MKX_Datatype t, size_t idx) {
  size_t es = mt_type_size(t);
  const unsigned char *p = (const unsigned char *)buf + idx * es;
  for (size_t i = 0; i < es; i++)
    if (p[i] != 0xFF) return 0;
  return 1;
}

void mt_check_bounds(const void *buf, MKX_Datatype t, MKX_Order o, int64_t rows,
                     int64_t cols, int64_t ld, size_t total, size_t *oob,
                     size_t *unwritten) {
  size_t bad = 0, unw = 0;
  for (size_t idx = 0; idx < total; idx++) {
    int64_t outer = (int64_t)(idx / (size_t)ld);
    int64_t inner = (int64_t)(idx % (size_t)ld);
    int64_t i = o == MKX_ROW_MAJOR ? outer : inner;
    int64_t j = o == MKX_ROW_MAJOR ? inner : outer;
    int logical = i < rows && j < cols;
    int p = mt_is_poison(buf, t, idx);
    if (logical && p) unw++;
    if (!logical && !p) bad++;
  }
  *oob = bad;
  *unwritten = unw;
}

double mt_relerr_mat(const void *buf, MKX_Datatype t, MKX_Order o, int64_t ld,
                     int64_t rows, int64_t cols, const double *ref) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++) {
      double x = mt_mat_get(buf, t, o, ld, i, j);
      double r = ref[i * cols + j];
      if (isnan(x) || isinf(x)) return NAN;
      num += (x - r) * (x - r);
      den += r * r;
    }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

double mt_relerr(const double *out, const double *ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    if (isnan(out[i]) || isinf(out[i])) return NAN;
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

double mt_tol(MKX_Datatype in, MKX_Datatype out) {
  double to, ta;
  switch (out) {
    case MKX_BF16:
      to = 1e-2;
      break;
    case MKX_FP16:
      to = 2e-3;
      break;
    case MKX_FP32:
      to = 1e-5;
      break;
    default:
      to = 1e-12;
      break;
  }
  ta = in == MKX_FP64 ? 1e-12 : 1e-5; /* fp32 accumulation otherwise */
  return to > ta ? to : ta;
}

double mt_tol_cond(double tol, const double *ref, const double *refabs,
                   size_t n) {
  double r2 = 0, a2 = 0;
  for (size_t i = 0; i < n; i++)
    r2 += ref[i] * ref[i], a2 += refabs[i] * refabs[i];
  const double kappa = r2 > 0 ? sqrt(a2 / r2) : 1e300,
               cap = tol > 0.05 ? tol : 0.05;
  const double t = kappa > 64 ? tol * kappa / 64 : tol;
  return t < cap ? t : cap;
}

/* Half the smallest subnormal of t: what rounding to t may lose however
 * small the exact value (fp16 rounds |x| < 2^-25 to 0). */
static double underflow_floor(MKX_Datatype t) {
  switch (t) {
    case MKX_FP16:
      return ldexp(1.0, -25);
    case MKX_BF16:
      return ldexp(1.0, -134);
    case MKX_FP32:
      return ldexp(1.0, -150);
    default:
      return 0;
  }
}

int mt_within_cond(const void *buf, MKX_Datatype t, MKX_Order o, int64_t ld,
                   int64_t rows, int64_t cols, const double *ref,
                   const double *refabs, double tol) {
  const double floor_abs = underflow_floor(t);
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++) {
      const double g = mt_mat_get(buf, t, o, ld, i, j);
      const double e = ref[i * cols + j], a = refabs[i * cols + j];
      if (!(fabs(g - e) <= tol * (fabs(e) + a) + floor_abs)) return 0;
    }
  return 1;
}

int64_t mt_min_ld(MKX_Order o, int64_t rows, int64_t cols) {
  int64_t v = o == MKX_ROW_MAJOR ? cols : rows;
  return v > 0 ? v : 1;
}

void mt_B_dims(MKX_Trans tb, int64_t k, int64_t n, int64_t *srows,
               int64_t *scols) {
  *srows = tb == MKX_TRANS ? n : k;
  *scols = tb == MKX_TRANS ? k : n;
}

void mt_store_B(void *buf, MKX_Datatype t, MKX_Order o, MKX_Trans tb, int64_t k,
                int64_t n, int64_t ldb, const double *Bv) {
  for (int64_t kk = 0; kk < k; kk++)
    for (int64_t j = 0; j < n; j++) {
      size_t off =
          tb == MKX_TRANS ? mt_off(o, ldb, j, kk) : mt_off(o, ldb, kk, j);
      mt_set(buf, t, off, Bv[kk * n + j]);
    }
}

void mt_ref_gemm_acc(double *C, const double *A, const double *B, int64_t m,
                     int64_t k, int64_t n) {
  for (int64_t i = 0; i < m; i++)
    for (int64_t kk = 0; kk < k; kk++) {
      double a = A[i * k + kk];
      const double *b = B + kk * n;
      double *c = C + i * n;
      for (int64_t j = 0; j < n; j++) c[j] += a * b[j];
    }
}

void mt_ref_gemm_abs(double *C, const double *A, const double *B, int64_t m,
                     int64_t k, int64_t n) {
  for (int64_t i = 0; i < m; i++)
    for (int64_t kk = 0; kk < k; kk++) {
      double a = fabs(A[i * k + kk]);
      const double *b = B + kk * n;
      double *c = C + i * n;
      for (int64_t j = 0; j < n; j++) c[j] += a * fabs(b[j]);
    }
}

uint64_t mt_hash(const void *buf, size_t bytes, uint64_t h) {
  const unsigned char *p = buf;
  if (!h) h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < bytes; i++) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

/* ---- bookkeeping ------------------------------------------------------------ */

static int gpu_usable(void) {
#ifdef MKX_TEST_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n > 0;
#else
  return 0;
#endif
}

void mt_init(int *argc, char ***argv) {
  /* keep oversubscribed runs quick: one BLAS thread per rank unless told */
  setenv("OPENBLAS_NUM_THREADS", "1", 0);
  setenv("OMP_NUM_THREADS", "1", 0);
  MPI_Init(argc, argv);
  memset(&mt, 0, sizeof mt);
  MPI_Comm_rank(MPI_COMM_WORLD, &mt.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &mt.size);
  mt.prog = (*argc > 0) ? (*argv)[0] : "test";
  const char *slash = strrchr(mt.prog, '/');
  if (slash) mt.prog = slash + 1;

  unsigned long long seed =
      (unsigned long long)time(NULL) ^ ((unsigned long long)getpid() << 20);
  int want_device = 0;
  for (int i = 1; i < *argc; i++) {
    const char *a = (*argv)[i];
    if (!strcmp(a, "--seed") && i + 1 < *argc)
      seed = strtoull((*argv)[++i], NULL, 0);
    else if (!strncmp(a, "--seed=", 7))
      seed = strtoull(a + 7, NULL, 0);
    else if (!strcmp(a, "--device"))
      want_device = 1;
    else if (!strcmp(a, "-v"))
      mt.verbose = 1;
  }
  MPI_Bcast(&seed, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
  mt.seed = seed;

  int skip = 0;
  if (want_device && !gpu_usable()) skip = 1;
  MPI_Allreduce(MPI_IN_PLACE, &skip, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (skip) {
    if (mt.rank == 0) {
      printf("1..0 # SKIP %s: --device given but no usable GPU%s\n", mt.prog,
#ifdef MKX_TEST_CUDA
             ""
#else
             " (built without MKX_TEST_CUDA)"
#endif
      );
      fflush(stdout);
    }
    MPI_Finalize();
    exit(CHECK_SKIP);
  }
  mt.device = want_device;
  check_set_rank(mt.rank, mt.size);
  check_show_passes(mt.rank == 0 || mt.verbose);
  check_set_note("seed %llu", seed);
  if (mt.rank == 0) {
    printf("# %s: %d rank(s), %s memory, seed %llu (rerun: --seed %llu)\n",
           mt.prog, mt.size, mt.device ? "device" : "host", seed, seed);
    fflush(stdout);
  }
}

int mt_finish(void) {
  int fails = check_failed(), total = 0, n = check_count();
  MPI_Allreduce(&fails, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (fails || mt.verbose)
    printf("# [rank %d] %d checks, %d failed\n", mt.rank, n, fails);
  fflush(stdout);
  MPI_Barrier(MPI_COMM_WORLD);
  if (mt.rank == 0) {
    printf("1..%d\n", n);
    if (total)
      printf("# FAIL %s: %d failed check(s) over %d rank(s); seed %llu\n",
             mt.prog, total, mt.size, (unsigned long long)mt.seed);
    else
      printf("# PASS %s: %d checks on each of %d rank(s); seed %llu\n", mt.prog,
             n, mt.size, (unsigned long long)mt.seed);
    fflush(stdout);
  }
  MPI_Finalize();
  return total ? 1 : 0;
}

void mt_diag(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char msg[1024];
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  printf("# [rank %d] %s\n", mt.rank, msg);
  fflush(stdout);
}

int mt_all(int cond) {
  int c = cond ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &c, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return c;
}

MKX_Comm mt_comm_with(const char *const *kv) {
  MPI_Info info;
  char keys[256] = "";
  MPI_Info_create(&info);
  for (int i = 0; kv[i] && kv[i + 1]; i += 2) {
    MPI_Info_set(info, kv[i], kv[i + 1]);
    const size_t at = strlen(keys);
    snprintf(keys + at, sizeof keys - at, "%s%s=%s", at ? ", " : "", kv[i],
             kv[i + 1]);
  }
  MKX_Comm c = NULL;
  const int rc = MKX_Comm_create(MPI_COMM_WORLD, info, &c);
  MPI_Info_free(&info);
  CHECK_RC(rc, MKX_SUCCESS, "MKX_Comm_create (%s): %s", keys,
           rc ? MKX_Get_last_error() : "");
  if (mt_all(rc == MKX_SUCCESS)) return c;
  if (c) MKX_Comm_free(&c);
  return NULL;
}

/* ---- device set-up ---------------------------------------------------------- */

#ifdef MKX_TEST_CUDA
static void setup_ck(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return;
  fprintf(stderr, "rank %d: %s: %s\n", mt.rank, what, cudaGetErrorString(e));
  exit(1);
}

static void CUDART_CB hold(void *ms) {
  usleep((useconds_t)(intptr_t)ms * 1000);
}

static void setup_delay(void) {
  const char *v = getenv("MKX_TEST_SETUP_DELAY_MS");
  const long ms = v ? atol(v) : 0;
  if (ms > 0)
    setup_ck(cudaLaunchHostFunc(0, hold, (void *)(intptr_t)ms),
             "cudaLaunchHostFunc (MKX_TEST_SETUP_DELAY_MS)");
}

void mt_dev_copy(void *dst, const void *src, size_t bytes, void *st) {
  setup_delay();
  setup_ck(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, (cudaStream_t)st),
      "set-up copy");
  setup_ck(cudaStreamSynchronize((cudaStream_t)st), "set-up copy (wait)");
}

void mt_dev_fill(void *dst, int byte, size_t bytes, void *st) {
  setup_delay();
  setup_ck(cudaMemsetAsync(dst, byte, bytes, (cudaStream_t)st), "set-up fill");
  setup_ck(cudaStreamSynchronize((cudaStream_t)st), "set-up fill (wait)");
}
#endif

/* ---- buffers ------------------------------------------------------------------ */

int tbuf_alloc(tbuf *b, size_t bytes) {
  if (!bytes) bytes = 1;
  size_t rounded = (bytes + 255) & ~(size_t)255;
  b->bytes = bytes;
  b->dev = NULL;
  b->host = aligned_alloc(256, rounded);
  if (!b->host) return 1;
  mt_poison(b->host, bytes);
#ifdef MKX_TEST_CUDA
  if (mt.device) {
    if (cudaMalloc(&b->dev, bytes) != cudaSuccess) {
      free(b->host);
      b->host = NULL;
      return 1;
    }
    mt_dev_copy(b->dev, b->host, bytes, NULL);
  }
#endif
  return 0;
}

void *tbuf_ptr(const tbuf *b) { return b->dev ? b->dev : b->host; }

void tbuf_upload(tbuf *b) {
#ifdef MKX_TEST_CUDA
  /* the calls under test may run on any stream: the copy must be done */
  if (b->dev) mt_dev_copy(b->dev, b->host, b->bytes, NULL);
#else
  (void)b;
#endif
}

void tbuf_download(tbuf *b) {
#ifdef MKX_TEST_CUDA
  if (b->dev) {
    cudaDeviceSynchronize();
    cudaMemcpy(b->host, b->dev, b->bytes, cudaMemcpyDeviceToHost);
  }
#else
  (void)b;
#endif
}

void tbuf_poison(tbuf *b) {
  mt_poison(b->host, b->bytes);
  tbuf_upload(b);
}

void tbuf_free(tbuf *b) {
#ifdef MKX_TEST_CUDA
  if (b->dev) cudaFree(b->dev);
#endif
  free(b->host);
  b->host = b->dev = NULL;
  b->bytes = 0;
}

void mt_sync(void) {
#ifdef MKX_TEST_CUDA
  if (mt.device) cudaDeviceSynchronize();
#endif
}

/* ---- OCP FP8 (mkx_test.h) ---- */

double mt_fp8_decode(MKX_Datatype t, uint8_t b) {
  const double s = (b & 0x80) ? -1.0 : 1.0;
  if (t == MKX_FP8_E4M3) {
    const int e = (b >> 3) & 0xF, m = b & 7;
    if (e == 15 && m == 7) return NAN;
    if (e == 0) return s * ldexp(m, -9);
    return s * ldexp(8 + m, e - 10); /* (1 + m/8) 2^(e-7) */
  }
  const int e = (b >> 2) & 0x1F, m = b & 3;
  if (e == 31) return m ? NAN : s * INFINITY;
  if (e == 0) return s * ldexp(m, -16);
  return s * ldexp(4 + m, e - 17); /* (1 + m/4) 2^(e-15) */
}

uint8_t mt_rand_fp8(mt_rng *g, MKX_Datatype t, double limit) {
  for (;;) {
    const uint8_t b = (uint8_t)(mt_rng_next(g) >> 56);
    const double v = mt_fp8_decode(t, b);
    if (!isfinite(v) || fabs(v) > limit) continue;
    /* mostly values of moderate size; 1 in 8 anything finite below the
     * limit (zeros, subnormals) */
    if (fabs(v) < 0.0625 && (mt_rng_next(g) & 7)) continue;
    return b;
  }
}
