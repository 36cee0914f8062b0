// Launches graphs through the stand-in runtime (stand_in_cudart.c): one
// launch per argument, of that many microseconds, alternating between two
// graph executables, then one on a stream being captured (not timed).
#include <stdio.h>
#include <stdlib.h>

extern long stand_in_launch_us;
extern int stand_in_launches;
int cudaGraphLaunch(void *exec, void *stream);

int main(int argc, char **argv) {
  for (int index = 1; index < argc; index++) {
    stand_in_launch_us = atol(argv[index]);
    if (cudaGraphLaunch((void *)(long)(0x1000 + index % 2), NULL) != 0) return 3;
  }
  stand_in_launch_us = 100;
  if (cudaGraphLaunch((void *)0x1000, (void *)0x99) != 0) return 4;
  printf("stand_in_graphs: %d launches\n", stand_in_launches);
  return 0;
}
