// The quantized embedding of one format (`{format}`, its struct `{Format}`
// put in by the host), over the quantized family's shared headers (the
// format's planar rows and `F::value`: ../linear/formats.cuh).
// out[r, :] = the table's row for id tokens[first + r], dequantized (the
// embedding lookup). The table holds the `table_rows` ids from
// `table_first` (all, or one rank's share): an id outside them writes zeros
// (another rank holds its row and the ranks' rows are summed); an id past
// the vocabulary writes NaN (the host checks ids before they get here).
template <typename F>
__device__ void quantized_embedding(const u8* table, const u32* tokens, float* out, u32 first, u32 rows,
                                    u32 vocabulary, u32 k, u32 table_first, u32 table_rows) {
    const u32 blocks = k / F::BLOCK;
    const size_t row_bytes = planar_row_bytes<F>(blocks);
    for (u32 r = blockIdx.y; r < rows; r += gridDim.y) {
        const u32 id = tokens[first + r];
        const bool held = id >= table_first && id - table_first < table_rows;
        for (u32 e = blockIdx.x * blockDim.x + threadIdx.x; e < k; e += gridDim.x * blockDim.x)
            out[(size_t)r * k + e] = id >= vocabulary ? __int_as_float(0x7fc00000)
                                     : held ? F::value(table + (id - table_first) * row_bytes, blocks, e)
                                            : 0.0f;
    }
}
extern "C" __global__ void embedding_{format}(const u8* table, const u32* tokens, float* out, u32 first, u32 rows,
                                              u32 vocab, u32 hidden, u32 table_first, u32 table_rows) {
    wait_for_previous_kernel();
    quantized_embedding<{Format}>(table, tokens, out, first, rows, vocab, hidden, table_first, table_rows);
}
