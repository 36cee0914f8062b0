// Argmax over many blocks: each block finds the first largest value of its
// contiguous share of the logits and stores it in `partials`; the last block
// to finish (counted by partials[0]) merges them and resets the counter for
// the next launch, so a captured graph can replay it. NaN never wins; ties go
// to the smaller index, as torch.argmax. `partials` holds the counter, then
// gridDim.x values (as bits), then gridDim.x indices.
extern "C" __global__ void argmax_f32(const float* logits, u32* partials, u32* out, u32 n) {
    wait_for_previous_kernel();
    __shared__ bool last;
    const u32 share = (n + gridDim.x - 1) / gridDim.x;
    const u32 start = min(n, blockIdx.x * share), end = min(n, start + share);
    float best;
    u32 index = block_argmax_or_none(logits + start, end - start, &best);
    u32* values = partials + 1;
    u32* indices = partials + 1 + gridDim.x;
    if (threadIdx.x == 0) {
        values[blockIdx.x] = __float_as_uint(best);
        indices[blockIdx.x] = index == 0xffffffffu ? index : start + index;
        // Publish this block's answer before counting it.
        __threadfence();
        last = atomicAdd(&partials[0], 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (last) {
        // Every other block's answer is visible after its fence and count.
        __threadfence();
        best = -INFINITY;
        index = 0xffffffffu;
        for (u32 block = threadIdx.x; block < gridDim.x; block += blockDim.x) {
            const float value = __uint_as_float(((volatile u32*)values)[block]);
            const u32 at = ((volatile u32*)indices)[block];
            if (at != 0xffffffffu && (value > best || (value == best && at < index) || index == 0xffffffffu)) {
                best = value;
                index = at;
            }
        }
        block_argmax_merge(&best, &index);
        if (threadIdx.x == 0) {
            out[0] = index == 0xffffffffu ? 0 : index;
            partials[0] = 0;
        }
    }
}
