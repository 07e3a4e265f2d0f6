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
 * PRELOAD ("" for none) is set as LD_PRELOAD in the child only, so this wrapper never
 * maps it. While the child starts, /proc/PID/maps is polled (200 us, doubling to 20 ms)
 * until the preloaded library appears there: that is the proof the preload took effect.
 * Polling stops once it is seen. SIGINT/SIGTERM are ignored here (and restored in the
 * child) so that a signal to the process group still lets this wrapper write its report.
 *
 * REPORT gets one line of key=value pairs; exit status 0 unless the wrapper itself failed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
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

static int maps_contain(pid_t pid, const char *needle) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[4096 + 256];
    int found = 0;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, needle) != NULL;
    fclose(f);
    return found;
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
    char real[PATH_MAX];
    const char *needle = NULL;
    if (preload[0]) needle = realpath(preload, real) ? real : preload;

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

    int status = 0, mapped = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    long delay_ns = 200000;
    for (;;) {
        int polling = needle && !mapped && !exec_errno;
        pid_t r = wait4(pid, &status, polling ? WNOHANG : 0, &ru);
        if (r == pid) break;
        if (r < 0 && errno != EINTR) {
            perror("hakrun: wait4");
            return 2;
        }
        if (r == 0) {
            mapped = maps_contain(pid, needle);
            if (!mapped) {
                struct timespec ts = {0, delay_ns};
                nanosleep(&ts, NULL);
                if (delay_ns < 20000000) delay_ns *= 2;
            }
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
            "minflt=%ld majflt=%ld nvcsw=%ld nivcsw=%ld preload_mapped=%d\n",
            WIFEXITED(status) ? WEXITSTATUS(status) : -1,
            WIFSIGNALED(status) ? WTERMSIG(status) : 0, exec_errno, wall, tv_us(ru.ru_utime),
            tv_us(ru.ru_stime), ru.ru_maxrss, ru.ru_minflt, ru.ru_majflt, ru.ru_nvcsw, ru.ru_nivcsw,
            needle ? mapped : -1);
    fclose(out);
    return 0;
}
