// A CUDA program of known structure for `kscope profile`'s GPU tests
// (tests/profile_program.rs): an init kernel outside any step, then five
// NVTX ranges named "step", each holding
//   layer.0: one copy kernel and one memset,
//   layer.1: one copy kernel and one host-to-device copy,
//   decode (in the domain "app"): one launch of a 3-kernel graph,
// and a stream synchronisation. The mode in argv[1] ends it differently:
//   plain | exit7 | segv-after-3 | kill-after-3 | spawn (runs itself again
//   as a second process with RANK=1 after its own steps).
// Build: nvcc -O2 -arch=sm_90 -o nvtx_steps nvtx_steps.cu
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(call)                                                              \
  do {                                                                           \
    cudaError_t status = (call);                                                 \
    if (status != cudaSuccess) {                                                 \
      fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(status)); \
      return 3;                                                                  \
    }                                                                            \
  } while (0)

__global__ void init_values(float *values, size_t count) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x)
    values[i] = (float)(i % 1013) * 0.5f;
}

// Reads and writes `count` float4s: 32 bytes moved per element.
__global__ void copy_values(const float4 *in, float4 *out, size_t count) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x)
    out[i] = in[i];
}

__global__ void graph_add(float *values, float amount) { values[threadIdx.x] += amount; }
__global__ void graph_scale(float *values, float factor) { values[threadIdx.x] *= factor; }
__global__ void graph_square(float *values) { values[threadIdx.x] *= values[threadIdx.x]; }

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "plain";
  const int steps = 5;
  const size_t count = (size_t)64 << 20;  // float4s: 1 GiB each way
  float4 *in, *out;
  float *small, *host;
  CHECK(cudaMalloc(&in, count * sizeof(float4)));
  CHECK(cudaMalloc(&out, count * sizeof(float4)));
  CHECK(cudaMalloc(&small, 4 << 20));
  CHECK(cudaMallocHost(&host, 4 << 20));
  memset(host, 0, 4 << 20);
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  init_values<<<528, 512, 0, stream>>>((float *)in, count * 4);

  cudaGraph_t graph;
  cudaGraphExec_t graph_exec;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  graph_add<<<1, 256, 0, stream>>>(small, 1.0f);
  graph_scale<<<1, 256, 0, stream>>>(small, 0.5f);
  graph_square<<<1, 256, 0, stream>>>(small);
  CHECK(cudaStreamEndCapture(stream, &graph));
  CHECK(cudaGraphInstantiate(&graph_exec, graph, 0));

  nvtxDomainHandle_t domain = nvtxDomainCreateA("app");
  nvtxEventAttributes_t decode = {0};
  decode.version = NVTX_VERSION;
  decode.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  decode.messageType = NVTX_MESSAGE_TYPE_ASCII;
  decode.message.ascii = "decode";

  for (int step = 0; step < steps; ++step) {
    nvtxRangePushA("step");
    nvtxRangePushA("layer.0");
    copy_values<<<528, 512, 0, stream>>>(in, out, count);
    CHECK(cudaMemsetAsync(small, 0, 4 << 20, stream));
    nvtxRangePop();
    nvtxRangePushA("layer.1");
    copy_values<<<528, 512, 0, stream>>>(out, in, count);
    CHECK(cudaMemcpyAsync(small, host, 4 << 20, cudaMemcpyHostToDevice, stream));
    nvtxRangePop();
    nvtxDomainRangePushEx(domain, &decode);
    CHECK(cudaGraphLaunch(graph_exec, stream));
    nvtxDomainRangePop(domain);
    CHECK(cudaStreamSynchronize(stream));
    nvtxRangePop();
    if (step == 2 && (strcmp(mode, "segv-after-3") == 0 || strcmp(mode, "kill-after-3") == 0)) {
      // Past the injection's flush period, so the periodic flush has written steps 1-3.
      usleep(400 * 1000);
      raise(strcmp(mode, "segv-after-3") == 0 ? SIGSEGV : SIGKILL);
    }
  }
  if (strcmp(mode, "spawn") == 0) {
    pid_t child = fork();
    if (child == 0) {
      setenv("RANK", "1", 1);
      execl(argv[0], argv[0], "plain", (char *)NULL);
      _exit(127);
    }
    int status = 0;
    waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 4;
  }
  printf("nvtx_steps %s: %d steps done\n", mode, steps);
  return strcmp(mode, "exit7") == 0 ? 7 : 0;
}
