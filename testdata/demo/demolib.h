#ifndef DEMOLIB_H
#define DEMOLIB_H
/* lib_call is in libdemo.so: a function and a USDT probe in a shared library. */
long lib_call(int i);
#endif
