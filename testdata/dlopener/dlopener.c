/*
 * dlopener loads a library only when told to, the way plugins are loaded
 * long after a program started. Built with the library's directory in its
 * DT_RUNPATH, it finds "libdemo.so" there as the dynamic loader does.
 *
 * Commands on stdin, each answered by one line:
 *   open       dlopen("libdemo.so"); prints "opened"
 *   call N     N calls of its lib_call(i); prints "called N"
 *   getpid N   N calls of getpid(); prints "getpid N"
 *   exit
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(void)
{
	char line[64];
	int n;
	long (*lib_call)(int) = NULL;

	printf("ready %d\n", getpid());
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin)) {
		if (strncmp(line, "open", 4) == 0) {
			void *h = dlopen("libdemo.so", RTLD_NOW);
			if (!h || !(lib_call = (long (*)(int))dlsym(h, "lib_call"))) {
				printf("dlopen failed: %s\n", dlerror());
				return 1;
			}
			printf("opened\n");
		} else if (sscanf(line, "call %d", &n) == 1 && lib_call) {
			for (int i = 0; i < n; i++)
				lib_call(i);
			printf("called %d\n", n);
		} else if (sscanf(line, "getpid %d", &n) == 1) {
			long sum = 0;
			for (int i = 0; i < n; i++)
				sum += getpid() > 0;
			printf("getpid %ld\n", sum);
		} else if (strncmp(line, "exit", 4) == 0) {
			break;
		}
		fflush(stdout);
	}
	return 0;
}
