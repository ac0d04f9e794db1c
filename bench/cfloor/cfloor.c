/*
 * cfloor: the physical floor of a durable "run once", in C: what any
 * program pays on this machine to reserve a key durably, run a command and
 * record its outcome durably, with nothing else (no SQL, no runtime). For
 * bench/run.sh, beside bench/cmd/floor (the same steps in Go with idem's
 * drivers) and idem itself.
 *
 *   cfloor DIR KEY CMD [ARG...]
 *
 * The "ledger" is a directory with one file per key: the reservation is
 * the file created O_EXCL and fsynced with its directory, the outcome its
 * exit code written and fsynced. A key that exists already is a replay:
 * the recorded code is read back. With IDEM_PHASE_FILE set it writes the
 * points it passed, as idem's phases build does ("NAME UNIXNANO MINFLT").
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char points[2048];
static size_t used;

static void at(const char *name) {
	struct timespec ts;
	struct rusage ru;
	clock_gettime(CLOCK_REALTIME, &ts);
	getrusage(RUSAGE_SELF, &ru);
	int n = snprintf(points + used, sizeof points - used, "%s %lld %ld\n", name,
		(long long)ts.tv_sec * 1000000000LL + ts.tv_nsec, ru.ru_minflt);
	if (n > 0 && (size_t)n < sizeof points - used)
		used += n;
}

static void done(void) {
	at("exit");
	const char *path = getenv("IDEM_PHASE_FILE");
	if (!path)
		return;
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd >= 0) {
		if (write(fd, points, used) < 0) {
		}
		close(fd);
	}
}

static void die(const char *what) {
	perror(what);
	exit(1);
}

int main(int argc, char **argv) {
	at("main");
	if (argc < 4) {
		fprintf(stderr, "usage: cfloor DIR KEY CMD [ARG...]\n");
		return 64;
	}
	int dir = open(argv[1], O_RDONLY | O_DIRECTORY);
	if (dir < 0)
		die(argv[1]);
	at("opened");
	int fd = openat(dir, argv[2], O_RDWR | O_CREAT | O_EXCL, 0600);
	if (fd < 0 && errno == EEXIST) {
		char code[16] = {0};
		fd = openat(dir, argv[2], O_RDONLY);
		if (fd < 0 || read(fd, code, sizeof code - 1) < 0)
			die("replay");
		at("after-reserve");
		done();
		return atoi(code);
	}
	if (fd < 0)
		die("reserve");
	if (write(fd, "-\n", 2) != 2 || fsync(fd) || fsync(dir))
		die("reserve");
	at("after-reserve");
	pid_t pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		execvp(argv[3], argv + 3);
		_exit(127);
	}
	at("after-child-start");
	int status;
	if (waitpid(pid, &status, 0) < 0)
		die("wait");
	at("after-child-exit");
	int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
	char buf[16];
	int n = snprintf(buf, sizeof buf, "%d\n", code);
	if (pwrite(fd, buf, n, 0) != n || fsync(fd))
		die("record");
	at("after-finish");
	done();
	return code;
}
