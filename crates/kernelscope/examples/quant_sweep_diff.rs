//! Finds the first block where kernelscope's quantizers differ from
//! llama.cpp's over a sweep written by `tools/reference/quant_fixtures.py`
//! (what the hashed sweep test in `tests/quant_formats.rs` only detects):
//!
//!     python3 tools/reference/quant_fixtures.py --llama-cpp DIR --out SWEEP --rows 2600
//!     cargo run --release -p kernelscope --example quant_sweep_diff -- SWEEP
//!
//! Exits 1 at the first format that differs, 2 on bad input.

use std::path::PathBuf;
use std::process::ExitCode;

use kernelscope::quant::QuantFormat;
use kernelscope::testing::quant_sweep::compare_with_llama_cpp;

/// The values in one row of the sweep, as the script writes them.
const ROW_ELEMENTS: usize = 256;

fn main() -> ExitCode {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let [dir] = arguments.as_slice() else {
        eprintln!("usage: quant_sweep_diff SWEEP_DIR (written by tools/reference/quant_fixtures.py --out)");
        return ExitCode::from(2);
    };
    let dir = PathBuf::from(dir);
    for format in QuantFormat::ALL {
        match compare_with_llama_cpp(&dir, format, ROW_ELEMENTS) {
            Ok(rows) => println!("{format}: {rows} rows identical"),
            Err(difference) => {
                eprintln!("{difference}");
                return ExitCode::from(1);
            }
        }
    }
    ExitCode::SUCCESS
}
