// libsystemc.so refers to sc_main (its own main() calls it), so every program linking the
// simulator must define it. tessel drives SystemC from its own main() and never calls it.
#include <cstdio>

extern "C" int sc_main(int, char**) {  // Debian's libsystemc refers to it unmangled
  std::fputs("tessel: sc_main is not an entry point of tessel\n", stderr);
  return 1;
}
