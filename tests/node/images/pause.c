/* The sandbox ("pause") container of the test node: sleeps until SIGTERM/SIGINT and reaps
 * orphans, as Kubernetes' own pause does. Built static (gcc -static) into a one-file image,
 * because no pause image can be pulled on the test machines. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_term(int sig) {
    (void)sig;
    _exit(0);
}

static void on_child(int sig) {
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(void) {
    struct sigaction term = {.sa_handler = on_term};
    struct sigaction child = {.sa_handler = on_child, .sa_flags = SA_NOCLDSTOP};
    if (sigaction(SIGINT, &term, NULL) < 0 || sigaction(SIGTERM, &term, NULL) < 0 ||
        sigaction(SIGCHLD, &child, NULL) < 0) {
        perror("sigaction");
        return 1;
    }
    for (;;) {
        pause();
    }
}
