#include <sys/sdt.h>

#include "demolib.h"

volatile long lib_checksum;

__attribute__((noinline)) long lib_call(int i)
{
	DTRACE_PROBE1(demolib, call, i);
	lib_checksum += i;
	return lib_checksum;
}
