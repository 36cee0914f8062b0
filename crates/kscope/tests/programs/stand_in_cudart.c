// A stand-in for the CUDA runtime, for testing `kscope profile --graphs
// events` without a GPU: events hold the CLOCK_MONOTONIC moment they were
// recorded, a graph launch sleeps for the time the program set, stream
// 0x99 is being captured. While the program says a capture in global mode
// is under way, any event or stream call made by a thread not in the
// relaxed capture mode breaks that capture, as the real runtime's does.
// Built as libcudart.so.13 by graph_events_stand_in.rs.
#include <stdlib.h>
#include <time.h>

typedef struct { long long ns; } Event;

static long long now_ns(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return now.tv_sec * 1000000000LL + now.tv_nsec;
}

long stand_in_launch_us = 0;
int stand_in_launches = 0;
int stand_in_resets = 0;
int stand_in_global_capture = 0;
volatile int stand_in_capture_broken = 0;
static __thread int capture_mode = 0;  // cudaStreamCaptureModeGlobal

// An event or stream call: unsafe during a global-mode capture unless relaxed (2).
static void unsafe_call(void) {
  if (stand_in_global_capture && capture_mode != 2) stand_in_capture_broken = 1;
}

int cudaThreadExchangeStreamCaptureMode(int *mode) {
  int previous = capture_mode;
  capture_mode = *mode;
  *mode = previous;
  return 0;
}
int cudaEventCreate(void **event) { unsafe_call(); *event = calloc(1, sizeof(Event)); return *event ? 0 : 2; }
int cudaEventDestroy(void *event) { unsafe_call(); free(event); return 0; }
int cudaEventRecord(void *event, void *stream) { (void)stream; ((Event *)event)->ns = now_ns(); return 0; }
int cudaEventQuery(void *event) { unsafe_call(); return ((Event *)event)->ns ? 0 : 600; }
int cudaEventElapsedTime(float *ms, void *start, void *end) {
  unsafe_call();
  *ms = (float)((((Event *)end)->ns - ((Event *)start)->ns) / 1e6);
  return 0;
}
int cudaStreamIsCapturing(void *stream, int *capturing) { *capturing = stream == (void *)0x99; return 0; }
int cudaGetDevice(int *device) { *device = 0; return 0; }
int cudaSetDevice(int device) { (void)device; return 0; }
int cudaPeekAtLastError(void) { return 0; }
int cudaGetLastError(void) { return 0; }
int cudaStreamCreateWithFlags(void **stream, unsigned flags) { (void)flags; unsafe_call(); *stream = (void *)0x77; return 0; }
int cudaDeviceReset(void) { stand_in_resets++; return 0; }
int cudaGraphLaunch(void *exec, void *stream) {
  (void)exec; (void)stream;
  struct timespec pause = {stand_in_launch_us / 1000000, (stand_in_launch_us % 1000000) * 1000};
  nanosleep(&pause, NULL);
  stand_in_launches++;
  return 0;
}
