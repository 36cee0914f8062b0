// Launches graphs through the stand-in runtime (stand_in_cudart.c): one
// launch per argument, of that many microseconds, alternating between two
// graph executables, then one on a stream being captured (not timed), all
// while a capture in global mode is said to be under way on another thread.
// Prints how long each call took as the program saw it. Then forks a child
// that exits normally (its exit must not touch the parent's records), and
// resets the device (the launches are read before the reset).
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern long stand_in_launch_us;
extern int stand_in_launches, stand_in_resets, stand_in_global_capture;
extern volatile int stand_in_capture_broken;
int cudaGraphLaunch(void *exec, void *stream);
int cudaDeviceReset(void);

int main(int argc, char **argv) {
  stand_in_global_capture = 1;
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
  // Past the flusher's period, so that it reads some launches while the capture is on.
  struct timespec pause = {0, 250 * 1000000};
  nanosleep(&pause, NULL);
  pid_t child = fork();
  if (child == 0) exit(0);
  waitpid(child, NULL, 0);
  if (cudaDeviceReset() != 0) return 5;
  printf("stand_in_graphs: %d launches, %d resets, capture %s\n", stand_in_launches, stand_in_resets,
         stand_in_capture_broken ? "broken" : "intact");
  stand_in_global_capture = 0;
  return 0;
}
