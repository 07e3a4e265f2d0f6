/* hakrun: start one process of a command workload and report what wait4 says about it.
 *
 *   hakrun REPORT PRELOAD -- PROGRAM [ARG...]
 *
 * hakbench runs command workloads (real programs, not our harness) through this wrapper
 * because a program exec'd straight from Python would inherit Python's RSS high-water
 * mark: Linux folds the replaced image's hiwater into ru_maxrss at exec, and a fork copies
 * the parent's anonymous pages into the child's count. This wrapper is small (its own
 * anonymous RSS is a few hundred KiB), so the child it forks starts from that, and
 * ru_maxrss from wait4 is the program's own peak.
 *
 * wait4 returns the rusage of the child together with every descendant the child waited
 * for (the kernel's RUSAGE_BOTH of the zombie): user/sys time summed over the tree (gcc's
 * driver + cc1 + as + ld), ru_maxrss the largest single process's peak in it.
 *
 * PRELOAD ("" for none) becomes LD_PRELOAD in the child only, so this wrapper never maps
 * the allocator. SIGINT/SIGTERM are ignored here (and restored in the child) so that a
 * signal to the process group still lets this wrapper write its report.
 *
 * REPORT gets one line of key=value pairs; exit status 0 unless the wrapper itself failed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static long tv_us(struct timeval tv) {
    return tv.tv_sec * 1000000L + tv.tv_usec;
}

int main(int argc, char **argv) {
    if (argc < 5 || strcmp(argv[3], "--") != 0) {
        fprintf(stderr, "usage: hakrun REPORT PRELOAD -- PROGRAM [ARG...]\n");
        return 2;
    }
    const char *report = argv[1];
    const char *preload = argv[2];

    int exec_pipe[2];
    if (pipe2(exec_pipe, O_CLOEXEC) != 0) {
        perror("hakrun: pipe2");
        return 2;
    }
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    long long t0 = now_ns();
    pid_t pid = fork();
    if (pid < 0) {
        perror("hakrun: fork");
        return 2;
    }
    if (pid == 0) {
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        close(exec_pipe[0]);
        if (preload[0]) setenv("LD_PRELOAD", preload, 1);
        execvp(argv[4], argv + 4);
        int err = errno;
        if (write(exec_pipe[1], &err, sizeof err) != sizeof err) _exit(127);
        _exit(127);
    }
    close(exec_pipe[1]);
    int exec_errno = 0;
    if (read(exec_pipe[0], &exec_errno, sizeof exec_errno) != sizeof exec_errno) exec_errno = 0;
    close(exec_pipe[0]);

    int status = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    while (wait4(pid, &status, 0, &ru) < 0) {
        if (errno != EINTR) {
            perror("hakrun: wait4");
            return 2;
        }
    }
    long long wall = now_ns() - t0;

    FILE *out = fopen(report, "w");
    if (!out) {
        perror("hakrun: report");
        return 2;
    }
    fprintf(out,
            "exit=%d signal=%d exec_errno=%d wall_ns=%lld user_us=%ld sys_us=%ld maxrss_kb=%ld "
            "minflt=%ld majflt=%ld nvcsw=%ld nivcsw=%ld\n",
            WIFEXITED(status) ? WEXITSTATUS(status) : -1,
            WIFSIGNALED(status) ? WTERMSIG(status) : 0, exec_errno, wall, tv_us(ru.ru_utime),
            tv_us(ru.ru_stime), ru.ru_maxrss, ru.ru_minflt, ru.ru_majflt, ru.ru_nvcsw,
            ru.ru_nivcsw);
    fclose(out);
    return 0;
}
