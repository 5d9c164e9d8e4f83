/*
 * Prints the size in bytes of this host's XSAVE area as ptrace hands it out
 * (PTRACE_GETREGSET NT_X86_XSTATE): the size a User-Mode Linux kernel must use for
 * every FP register transfer (the host refuses any other with EFAULT). The vehicle
 * check names it beside the CPU when a guest cannot start.
 */
#define _GNU_SOURCE
#include <elf.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void)
{
	static unsigned char buf[64 * 1024];
	struct iovec iov = { .iov_base = buf, .iov_len = sizeof(buf) };
	int status, rc = 0;
	pid_t pid = fork();

	if (pid < 0) {
		perror("xstate: fork");
		return 1;
	}
	if (pid == 0) {
		ptrace(PTRACE_TRACEME, 0, NULL, NULL);
		raise(SIGSTOP);
		_exit(0);
	}
	if (waitpid(pid, &status, 0) < 0 || !WIFSTOPPED(status)) {
		fprintf(stderr, "xstate: the child did not stop\n");
		return 1;
	}
	if (ptrace(PTRACE_GETREGSET, pid, (void *)NT_X86_XSTATE, &iov) < 0) {
		perror("xstate: PTRACE_GETREGSET NT_X86_XSTATE");
		rc = 1;
	} else {
		printf("%zu\n", iov.iov_len);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	return rc;
}
