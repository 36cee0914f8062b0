// The feed-forward kernels whose down rows stream through shared memory
// (sm_90 and later; down in Q4_K, read in pairs of sub-blocks, or Q6_K):
// each row over two warps holding 2 or 4 units of x a lane, for rows of
// up to 8,192 or 16,384 values (feed_forward.cu has the steps).
extern "C" __global__ void __launch_bounds__(QUANT_THREADS, 3)
    feed_forward_{gate}_{down}_held2(float* x, const float* norm_weight, const u8* gate, const u8* up,
                                     const u8* down, float* h, u8* hq, unsigned int* arrivals,
                                     unsigned long long* launches, unsigned long long* stamps, u32 k, u32 n, float eps, u32 stages,
                                     u32 stamping) {
    wait_for_previous_kernel();
    feed_forward<{Gate}, {Down}, {DownUnits}, 2>(x, norm_weight, gate, up, down, h, hq, arrivals, launches, stamps, k, n, eps,
                                                 stages, stamping);
}
extern "C" __global__ void __launch_bounds__(QUANT_THREADS, 3)
    feed_forward_{gate}_{down}_held4(float* x, const float* norm_weight, const u8* gate, const u8* up,
                                     const u8* down, float* h, u8* hq, unsigned int* arrivals,
                                     unsigned long long* launches, unsigned long long* stamps, u32 k, u32 n, float eps, u32 stages,
                                     u32 stamping) {
    wait_for_previous_kernel();
    feed_forward<{Gate}, {Down}, {DownUnits}, 4>(x, norm_weight, gate, up, down, h, hq, arrivals, launches, stamps, k, n, eps,
                                                 stages, stamping);
}
