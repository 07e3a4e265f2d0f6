/* One stand-in for every program of mimalloc-bench's bench/ (tests only). Built once per
 * program name (PROGRAM), it does a few milliseconds of malloc/free, in threads where the
 * real program takes a thread count, and prints what the real program prints, in its
 * format (recorded from the real programs at commit ce5784f: see README.md). Its figures
 * come from its own loop, so they differ from run to run and allocator to allocator. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef PROGRAM
#define PROGRAM "standin"
#endif

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* A few thousand blocks of 8-1000 B allocated, written and freed. */
static void *churn(void *arg) {
    long rounds = (long)arg;
    void *slots[256] = {0};
    unsigned x = 12345;
    for (long i = 0; i < rounds; i++) {
        x = x * 1103515245u + 12345u;
        unsigned k = (x >> 8) & 255;
        free(slots[k]);
        size_t n = 8 + (x >> 16) % 993;
        slots[k] = malloc(n);
        if (slots[k]) memset(slots[k], (int)k, n);
    }
    for (int k = 0; k < 256; k++)
        free(slots[k]);
    return NULL;
}

static long run_threads(int threads, long rounds) {
    pthread_t t[64];
    if (threads < 1) threads = 1;
    if (threads > 64) threads = 64;
    for (int i = 0; i < threads; i++)
        pthread_create(&t[i], NULL, churn, (void *)rounds);
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    return rounds * threads;
}

static int arg_int(int argc, char **argv, int i, int dflt) {
    return argc > i ? atoi(argv[i]) : dflt;
}

int main(int argc, char **argv) {
    const char *p = PROGRAM;
    double t0 = now_s();
    if (!strcmp(p, "cfrac")) {
        const char *n = argc > 1 ? argv[1] : "0";
        run_threads(1, 20000);
        printf("%s = 1 * %s\n", n, n); /* the real one prints two factors in this form */
    } else if (!strcmp(p, "barnes")) {
        char line[256];
        long lines = 0;
        while (fgets(line, sizeof line, stdin))
            lines++; /* the real one reads its input here */
        run_threads(1, 20000);
        printf("\t\tHack code: Plummer model\n\n");
        printf("COMPUTESTART  = %12ld\nCOMPUTEEND    = %12ld\n", (long)t0, (long)now_s());
        printf("COMPUTETIME   = %12ld\n", lines);
    } else if (!strcmp(p, "alloc-test")) {
        int threads = arg_int(argc, argv, 1, 1);
        for (int i = 0; i < threads; i++)
            printf("about to run thread %d...\n    ...done\n", i);
        long ops = run_threads(threads, 20000);
        long ms = (long)((now_s() - t0) * 1000);
        fprintf(stderr, "threads: %d\n", threads);
        printf("%d threads made %ld alloc/dealloc operations in %ld ms (%ld ms per 1 million)\n",
               threads, ops, ms, ops ? ms * 1000000 / ops : 0);
    } else if (!strcmp(p, "larson") || !strcmp(p, "larson-sized")) {
        long ops = run_threads(arg_int(argc, argv, 7, 1), 20000);
        double rate = ops / (now_s() - t0);
        printf("Throughput = %8ld operations per second, relative time: %.3fs.\n", (long)rate,
               1e9 / rate);
        printf("Done sleeping...\n");
    } else if (!strcmp(p, "xmalloc-test")) {
        int w = argc > 2 && !strcmp(argv[1], "-w") ? atoi(argv[2]) : 1;
        long frees = run_threads(w, 20000);
        double mps = frees / (now_s() - t0) / 1e6;
        printf("rtime: %.3f, free/sec: %.3f M\n", 100.0 / mps, mps);
    } else if (!strcmp(p, "mstress")) {
        int threads = arg_int(argc, argv, 1, 1), load = arg_int(argc, argv, 2, 50);
        int iters = arg_int(argc, argv, 3, 10);
        printf("start with %d threads with a %d%% load-per-thread and %d iterations\n", threads,
               load, iters);
        run_threads(threads, 200L * iters);
    } else if (!strcmp(p, "mleak")) {
        int n = arg_int(argc, argv, 1, 5);
        printf("Using 10 threads with 100*%d iterations\n", n);
        run_threads(10, 100L * n);
    } else if (!strcmp(p, "rptest")) {
        int threads = arg_int(argc, argv, 1, 1);
        long ops = run_threads(threads, 20000);
        printf("crt          %d threads random linear size [8,16000] 500 loops 1000 allocs 100 "
               "ops: ........%ld memory ops/CPU second (1MiB peak, 1MiB -> 1MiB bytes sample, "
               "0%% overhead)\n",
               threads, (long)(ops / (now_s() - t0)));
    } else if (!strcmp(p, "glibc-thread")) {
        long ops = run_threads(arg_int(argc, argv, 1, 1), 20000);
        printf("%ld iterations\n", ops);
    } else { /* espresso, cache-scratch, cache-thrash, malloc-large, glibc-simple: silent */
        run_threads(argc > 1 && strcmp(p, "espresso") ? atoi(argv[1]) : 1, 20000);
    }
    return 0;
}
