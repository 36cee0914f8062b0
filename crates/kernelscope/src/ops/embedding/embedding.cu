// Embedding rows: out row r is the table's row for token tokens[first + r],
// one block per row. The table holds the `table_rows` ids from `table_first`
// (all of them, or one rank's share under tensor parallelism); an id of the
// vocabulary outside that range writes zeros (another rank holds its row and
// the ranks' rows are summed). Token ids are read from device memory; an id
// beyond the vocabulary writes NaN (the host checks ids before they get here).
template <typename W>
__device__ void embedding(const W* table, const u32* tokens, float* out, u32 first, u32 rows, u32 vocab,
                          u32 hidden, u32 table_first, u32 table_rows) {
    u32 row = blockIdx.x;
    if (row >= rows) return;
    u32 token = tokens[first + row];
    float* destination = out + (size_t)row * hidden;
    if (token >= vocab) {
        for (u32 i = threadIdx.x; i < hidden; i += blockDim.x) destination[i] = __int_as_float(0x7fc00000);
        return;
    }
    if (token < table_first || token - table_first >= table_rows) {
        for (u32 i = threadIdx.x; i < hidden; i += blockDim.x) destination[i] = 0.0f;
        return;
    }
    const W* source = table + (size_t)(token - table_first) * hidden;
    for (u32 i = threadIdx.x; i < hidden; i += blockDim.x) destination[i] = to_f32(source[i]);
}

extern "C" __global__ void embedding_f32(const float* table, const u32* tokens, float* out, u32 first, u32 rows,
                                         u32 vocab, u32 hidden, u32 table_first, u32 table_rows) {
    wait_for_previous_kernel();
    embedding(table, tokens, out, first, rows, vocab, hidden, table_first, table_rows);
}
extern "C" __global__ void embedding_f16(const f16* table, const u32* tokens, float* out, u32 first, u32 rows,
                                         u32 vocab, u32 hidden, u32 table_first, u32 table_rows) {
    wait_for_previous_kernel();
    embedding(table, tokens, out, first, rows, vocab, hidden, table_first, table_rows);
}
extern "C" __global__ void embedding_bf16(const bf16* table, const u32* tokens, float* out, u32 first, u32 rows,
                                          u32 vocab, u32 hidden, u32 table_first, u32 table_rows) {
    wait_for_previous_kernel();
    embedding(table, tokens, out, first, rows, vocab, hidden, table_first, table_rows);
}
