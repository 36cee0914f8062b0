//! Reading profiles of schema 3 and older, written before a dispatch record
//! carried the format its kernel declares it reads: each record's format is
//! filled from its kernel's name, parsed as the report once parsed it, so
//! an old profile groups its time by format as a new one does. Schemas 1
//! and 2 are first brought to schema 3 on their JSON tree (`schema_1.rs`,
//! `schema_2.rs`); schema 3 is read straight into the structs, as the
//! current schema is, since a tree of a large profile takes several times
//! its size.
//!
//! A profile of another program (`kscope profile -- CMD`) is left without
//! formats: its kernels follow no naming of kscope's, and the injection
//! library records none for them today either.

use std::sync::Arc;

use super::{PROFILE_SCHEMA_VERSION, Profile};
use crate::quant::QuantFormat;

/// The dense dtypes a kernel's name may end in.
const DENSE: [&str; 3] = ["bf16", "f16", "f32"];

/// Reads `text`, a profile of schema `schema` (1, 2 or 3), into the
/// current schema; the problem when it is not a profile of that schema.
pub(crate) fn read(text: &str, schema: u64) -> Result<Profile, String> {
    let malformed = |error: serde_json::Error| format!("malformed profile: {error}");
    let mut profile: Profile = if schema == 3 {
        serde_json::from_str(text).map_err(malformed)?
    } else {
        let mut value: serde_json::Value =
            serde_json::from_str(text).map_err(|error| format!("not JSON: {error}"))?;
        if schema == 1 {
            super::schema_1::upgrade(&mut value)?;
        }
        super::schema_2::upgrade(&mut value)?;
        serde_json::from_value(value).map_err(malformed)?
    };
    upgrade(&mut profile);
    Ok(profile)
}

/// Fills the format of every record (every rank's too) from its kernel's
/// name, unless the profile is another program's, and marks the profile
/// as of the current schema.
fn upgrade(profile: &mut Profile) {
    if profile.conditions.program.is_none() {
        let records = profile.dispatches.iter_mut().chain(
            profile
                .ranks
                .iter_mut()
                .flat_map(|rank| rank.dispatches.iter_mut()),
        );
        for record in records {
            record.format = format_of_kernel_name(&record.kernel).map(Arc::from);
        }
    }
    profile.schema = PROFILE_SCHEMA_VERSION;
}

/// The format kscope's kernel `name` reads, by the naming its kernels keep
/// (the parser the report used before schema 4): the first block format it
/// names (`matvec_q4_k_q8`: `q4_k`; the `_q8` of an 8-bit-quantized
/// activation is no such format), else the dense dtype it ends in
/// (`attention_split_d64_g4_bf16`: `bf16`), else none (`copy_bytes`, a
/// library's `nvjet_…` GEMM kernels). Every kernel of `ops::registry()`
/// declares exactly what this reads from its name
/// (`kernel_formats_tests.rs`), so a filled profile and a new one agree.
pub(crate) fn format_of_kernel_name(name: &str) -> Option<&'static str> {
    let parts: Vec<&str> = name.split('_').collect();
    let quantized = parts.windows(2).find_map(|pair| {
        QuantFormat::ALL.iter().find_map(|format| {
            let (block, kind) = format.name().split_once('_')?;
            (pair[0] == block && pair[1] == kind).then_some(format.name())
        })
    });
    quantized.or_else(|| {
        let last = parts.last()?;
        DENSE.iter().copied().find(|dense| dense == last)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_names_say_the_format_they_read() {
        for (kernel, format) in [
            ("matvec_q4_k_q8", Some("q4_k")),
            ("matvec_add_q6_k_q8", Some("q6_k")),
            ("norm_matvec_q4_k_q8", Some("q4_k")),
            ("norm_matvec_silu_q5_k_q8", Some("q5_k")),
            ("matvec_q8_0_q8", Some("q8_0")),
            ("matvec_q4_1_f32", Some("q4_1")),
            ("matmul_q5_0", Some("q5_0")),
            ("matmul_q5_1", Some("q5_1")),
            ("matvec_q4_0_q8", Some("q4_0")),
            ("dequantize_q4_k_bf16", Some("q4_k")),
            ("embedding_q6_k", Some("q6_k")),
            ("matvec_bf16", Some("bf16")),
            ("rms_norm_bf16_bf16", Some("bf16")),
            ("rms_norm_f32_bf16", Some("bf16")),
            ("attention_split_d64_g4_bf16", Some("bf16")),
            ("matmul_f16", Some("f16")),
            ("add_f32", Some("f32")),
            ("quantize_q8", None),
            ("copy_bytes", None),
            ("nvjet_sm90_tss_64x8_64x16_4x1_v_bz_TNT", None),
            ("inc_one", None),
        ] {
            assert_eq!(format_of_kernel_name(kernel), format, "{kernel}");
        }
    }
}
