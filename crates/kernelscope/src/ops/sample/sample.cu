// Temperature + nucleus (top-p) sampling by one block, drawing the same
// token as the CPU reference (up to rounding) without sorting: tokens are
// ordered by weight w = exp((logit - max) / T), largest first, ties by index.
// The token where the running mass first reaches a target lies in the group
// of tokens sharing the largest weight v with mass(w >= v) >= target (found
// by bisection on v's bits), at a position inside that tie group given by
// the mass still missing. NaN logits weigh 0; temperature 0 is argmax.

__device__ double block_sum_double(double v) {
    __shared__ double partial[32];
    __shared__ double total;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {
        double w = lane < (int)(blockDim.x >> 5) ? partial[lane] : 0.0;
        for (int offset = 16; offset > 0; offset >>= 1) w += __shfl_xor_sync(0xffffffffu, w, offset);
        if (lane == 0) total = w;
    }
    __syncthreads();
    double result = total;
    __syncthreads();
    return result;
}

__device__ __forceinline__ float weight(const float* logits, u32 i, float max_logit, float temperature) {
    float l = logits[i];
    return isnan(l) ? 0.0f : expf((l - max_logit) / temperature);
}

// Mass of the tokens whose weight is >= v.
__device__ double mass_at_least(const float* logits, u32 n, float max_logit, float temperature, float v) {
    double local = 0.0;
    for (u32 i = threadIdx.x; i < n; i += blockDim.x) {
        float w = weight(logits, i, max_logit, temperature);
        if (w >= v) local += w;
    }
    return block_sum_double(local);
}

// The token at which the running mass first reaches `target` (`strict`:
// first exceeds it). Returns the group weight through `group`, the mass
// before the group through `before`, and the 1-based place in the group.
__device__ u32 crossing(const float* logits, u32 n, float max_logit, float temperature, double target, bool strict,
                        float* group, double* before) {
    u32 low = 0, high = __float_as_uint(1.0f) + 1;  // weights lie in [0, 1]
    while (high - low > 1) {
        u32 middle = low + (high - low) / 2;
        double mass = mass_at_least(logits, n, max_logit, temperature, __uint_as_float(middle));
        bool reaches = strict ? mass > target : mass >= target;
        if (reaches) low = middle; else high = middle;
    }
    float v = __uint_as_float(low);
    double above = mass_at_least(logits, n, max_logit, temperature, __uint_as_float(low + 1));
    double missing = target - above;
    u32 place = 1;
    if (v > 0.0f) {
        double count = strict ? floor(missing / v) + 1.0 : ceil(missing / v);
        place = count < 1.0 ? 1u : (u32)count;
    }
    *group = v;
    *before = above;
    return place;
}

// The index of the `place`-th token (1-based, by index) whose weight is exactly v.
__device__ u32 nth_with_weight(const float* logits, u32 n, float max_logit, float temperature, float v, u32 place) {
    __shared__ u32 counts[1024];
    __shared__ u32 found;
    u32 chunk = (n + blockDim.x - 1) / blockDim.x;
    u32 first = threadIdx.x * chunk, last = min(first + chunk, n);
    u32 mine = 0;
    for (u32 i = first; i < last; ++i) mine += weight(logits, i, max_logit, temperature) == v;
    counts[threadIdx.x] = mine;
    if (threadIdx.x == 0) found = 0xffffffffu;
    __syncthreads();
    if (threadIdx.x == 0) {
        // Serial prefix over at most 1024 counts: which thread holds it.
        u32 seen = 0;
        for (u32 t = 0; t < blockDim.x; ++t) {
            if (seen + counts[t] >= place) { counts[0] = t; counts[1] = place - seen; break; }
            seen += counts[t];
            if (t + 1 == blockDim.x) { counts[0] = blockDim.x - 1; counts[1] = counts[t] ? counts[t] : 1; }
        }
    }
    __syncthreads();
    u32 owner = counts[0], left = counts[1];
    __syncthreads();
    if (threadIdx.x == owner) {
        u32 last_match = 0xffffffffu;
        for (u32 i = first; i < last; ++i) {
            if (weight(logits, i, max_logit, temperature) == v) {
                last_match = i;
                if (--left == 0) break;
            }
        }
        found = last_match;
    }
    __syncthreads();
    return found;
}

extern "C" __global__ void sample_f32(const float* logits, u32* out, float temperature, float top_p, float uniform,
                                     u32 n) {
    wait_for_previous_kernel();
    // Largest non-NaN logit, first index on ties (also the greedy answer).
    float max_logit;
    u32 argmax = block_argmax(logits, n, &max_logit);
    if (temperature <= 0.0f || !(max_logit > -INFINITY)) {
        if (threadIdx.x == 0) out[0] = argmax;
        return;
    }
    double total = mass_at_least(logits, n, max_logit, temperature, 0.0f);
    float group;
    double before;
    u32 place = crossing(logits, n, max_logit, temperature, (double)top_p * total, false, &group, &before);
    double nucleus = before + (double)place * group;
    double target = (double)fminf(fmaxf(uniform, 0.0f), 1.0f) * nucleus;
    place = crossing(logits, n, max_logit, temperature, target, true, &group, &before);
    u32 token = nth_with_weight(logits, n, max_logit, temperature, group, place);
    if (threadIdx.x == 0) out[0] = token == 0xffffffffu ? argmax : token;
}
