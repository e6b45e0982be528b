/* OpenBLAS sgemm on the shapes of benches/gemm.rs (GEMM_BENCH_SHAPES limits them, as there),
 * printing the same line format.
 * Build and run: see scripts/bench_gemm.sh. Usage: openblas_gemm THREADS */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void openblas_set_num_threads(int);

/* Whether GEMM_BENCH_SHAPES (label,label,...; as benches/gemm.rs reads it) names this shape,
 * or is not set. */
static int wanted(const char *label) {
    const char *only = getenv("GEMM_BENCH_SHAPES");
    size_t n = strlen(label);
    if (!only) return 1;
    for (const char *p = only; *p; p++) {
        if ((p == only || p[-1] == ',') && strncmp(p, label, n) == 0 && (p[n] == ',' || p[n] == 0))
            return 1;
    }
    return 0;
}

/* One thread: the calling thread's CPU time (robust on a loaded machine, as in
 * benches/gemm.rs); more threads or GEMM_BENCH_WALL set: wall-clock time. */
static clockid_t clock_id = CLOCK_MONOTONIC;

static double now(void) {
    struct timespec t;
    clock_gettime(clock_id, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static float *fill(size_t n, unsigned seed) {
    float *v = malloc(n * sizeof(float));
    unsigned s = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13; s ^= s >> 17; s ^= s << 5;
        v[i] = (float)(s % 2001) / 1000.0f - 1.0f;
    }
    return v;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    int trials = getenv("GEMM_BENCH_TRIALS") ? atoi(getenv("GEMM_BENCH_TRIALS")) : 5;
    openblas_set_num_threads(threads);
    if (threads == 1 && !getenv("GEMM_BENCH_WALL")) clock_id = CLOCK_THREAD_CPUTIME_ID;
    struct { const char *label; int rows, in, out; } shapes[] = {
        {"square", 1024, 1024, 1024}, {"small", 256, 200, 512},
        {"mid", 512, 1536, 1536}, {"big", 512, 1536, 3000},
        {"train-tdnn", 5632, 1950, 650}, {"train-out", 2048, 650, 3000},
        {"infer-50", 50, 650, 3000}, {"infer-16", 16, 1950, 650}};
    const char *forms[] = {"fwd", "bwd-in", "bwd-w"};
    for (int s = 0; s < (int)(sizeof shapes / sizeof shapes[0]); s++) {
        if (!wanted(shapes[s].label)) continue;
        int R = shapes[s].rows, In = shapes[s].in, Out = shapes[s].out;
        for (int f = 0; f < 3; f++) {
            /* fwd: Y[R x Out] = X[R x In] W[Out x In]^T; bwd-in: dX[R x In] = dY[R x Out] W[Out x In];
               bwd-w: dW[Out x In] = dY[R x Out]^T X[R x In] */
            int m, n, k, lda, ldb; enum CBLAS_TRANSPOSE ta, tb; size_t na, nb;
            if (f == 0) { m = R; n = Out; k = In; ta = CblasNoTrans; tb = CblasTrans; lda = In; ldb = In; na = (size_t)R * In; nb = (size_t)Out * In; }
            else if (f == 1) { m = R; n = In; k = Out; ta = CblasNoTrans; tb = CblasNoTrans; lda = Out; ldb = In; na = (size_t)R * Out; nb = (size_t)Out * In; }
            else { m = Out; n = In; k = R; ta = CblasTrans; tb = CblasNoTrans; lda = Out; ldb = In; na = (size_t)R * Out; nb = (size_t)R * In; }
            float *a = fill(na, 1), *b = fill(nb, 2), *c = calloc((size_t)m * n, sizeof(float));
            cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, n);
            double best = 1e30;
            for (int t = 0; t < trials; t++) {
                double t0 = now(); long reps = 0;
                do {
                    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, n);
                    reps++;
                } while (now() - t0 < 0.2);
                double per = (now() - t0) / reps;
                if (per < best) best = per;
            }
            printf("openblas %d %s %dx%dx%d %s %.1f\n", threads, shapes[s].label, R, In, Out, forms[f],
                   2.0 * m * n * (double)k / best / 1e9);
            free(a); free(b); free(c);
        }
    }
    return 0;
}
