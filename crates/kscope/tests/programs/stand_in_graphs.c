// Launches graphs through the stand-in runtime (stand_in_cudart.c): one
// launch per argument, of that many microseconds, alternating between two
// graph executables, then one on a stream being captured (not timed).
// Prints how long each call took as the program saw it.
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

extern long stand_in_launch_us;
extern int stand_in_launches;
int cudaGraphLaunch(void *exec, void *stream);

int main(int argc, char **argv) {
  for (int index = 1; index < argc; index++) {
    stand_in_launch_us = atol(argv[index]);
    struct timespec before, after;
    clock_gettime(CLOCK_MONOTONIC, &before);
    if (cudaGraphLaunch((void *)(long)(0x1000 + index % 2), NULL) != 0) return 3;
    clock_gettime(CLOCK_MONOTONIC, &after);
    // The whole call, the interposed library's events inside it.
    printf("call %d: %lld ns\n", index, (after.tv_sec - before.tv_sec) * 1000000000LL + (after.tv_nsec - before.tv_nsec));
  }
  stand_in_launch_us = 100;
  if (cudaGraphLaunch((void *)0x1000, (void *)0x99) != 0) return 4;
  printf("stand_in_graphs: %d launches\n", stand_in_launches);
  return 0;
}
