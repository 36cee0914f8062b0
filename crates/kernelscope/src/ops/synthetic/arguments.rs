//! The argument list of synthetic's kernels and its shared constants, below both the
//! launch and the CPU reference, which take them from here.

use crate::ops::kernel_arguments;

kernel_arguments! {
    OUT: "out" Write,
    COUNT: "count" U64,
    SEED: "seed" U64,
    ROW_LENGTH: "row_length" U64,
    FIRST_ROW: "first_row" U64,
    FIRST_COLUMN: "first_column" U64,
    COLUMNS: "columns" U64,
    LOW: "low" F32,
    HIGH: "high" F32,
}
