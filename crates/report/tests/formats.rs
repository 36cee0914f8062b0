//! Time by format: the report groups and colours each dispatch by the
//! format its record declares, whatever its kernel's name says; profiles
//! written before records carried a format (schema 3 and older) get theirs
//! from kernel names on load, and then report as a new profile does.

mod common;

use std::path::{Path, PathBuf};

use common::{row_keys, table_row};
use kernelscope::profile::{PROFILE_SCHEMA_VERSION, Profile, Program};
use kernelscope::testing::synthetic_profile;
use kernelscope_report::{render_html, render_report};

/// A file of its own for this test process.
fn scratch_file(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("kscope-formats-{name}-{}.json", std::process::id()))
}

/// The synthetic profile with its mat-vecs reading Q4_K blocks, named and
/// declared so, as kscope's engine records a quantized run.
fn quantized_profile(seed: u64) -> Profile {
    let mut profile = synthetic_profile(4, 1.0, seed);
    for record in &mut profile.dispatches {
        if &*record.kernel == "matvec_bf16" {
            record.kernel = "matvec_q4_k_q8".into();
            record.format = Some("q4_k".into());
        }
    }
    profile
}

/// `profile` as schema 3 wrote it: no format on any record.
fn as_schema_3(profile: &Profile) -> String {
    let mut older: serde_json::Value = serde_json::from_str(&profile.to_json()).unwrap();
    older["schema"] = serde_json::json!(3);
    for record in older["dispatches"].as_array_mut().unwrap() {
        record.as_object_mut().unwrap().remove("format");
    }
    let text = older.to_string();
    assert!(!text.contains("\"format\""), "{text}");
    text
}

#[test]
fn the_declared_format_decides_not_the_kernel_name() {
    let mut profile = synthetic_profile(4, 1.0, 11);
    for record in &mut profile.dispatches {
        match &*record.kernel {
            // A name that says nothing, a field that says q6_k.
            "matvec_bf16" => {
                record.kernel = "fused_step".into();
                record.format = Some("q6_k".into());
            }
            // A name that says f32, a field that says nothing.
            "attention_f32" => record.format = None,
            _ => {}
        }
    }
    let calls = |kernel: &str| {
        profile
            .dispatches
            .iter()
            .filter(|record| &*record.kernel == kernel)
            .count()
            .to_string()
    };
    let report = render_report(&profile);
    assert_eq!(table_row(&report, "per format,", "q6_k")[1], calls("fused_step"));
    assert_eq!(
        table_row(&report, "per format,", "other")[1],
        calls("attention_f32")
    );
    assert_eq!(table_row(&report, "per format,", "f32")[1], calls("rms_norm_f32"));
    assert_eq!(row_keys(&report, "per format,"), ["q6_k", "other", "f32"]);
    assert!(
        report.contains("the format each kernel declares it reads"),
        "{report}"
    );

    // The roofline colours the kernel by its field too.
    let page = render_html(&profile);
    assert!(
        page.contains(r#"data-name="fused_step" data-format="q6_k""#),
        "{page}"
    );
    assert!(page.contains(r#"<span class="format-key" data-format="q6_k">"#));
}

#[test]
fn a_schema_3_profile_opens_with_formats_filled_from_kernel_names() {
    let profile = quantized_profile(12);
    let file = scratch_file("schema-3");
    std::fs::write(&file, as_schema_3(&profile)).unwrap();
    let loaded = Profile::load(&file).unwrap();
    let _ = std::fs::remove_file(&file);
    assert_eq!(loaded.schema, PROFILE_SCHEMA_VERSION);
    let formats = |profile: &Profile| -> Vec<(String, Option<String>)> {
        profile
            .dispatches
            .iter()
            .map(|record| {
                (
                    record.kernel.to_string(),
                    record.format.as_deref().map(String::from),
                )
            })
            .collect()
    };
    assert_eq!(formats(&loaded), formats(&profile));
    // It reports its time by format as the profile it was saved from.
    let (old, new) = (render_report(&loaded), render_report(&profile));
    for format in ["q4_k", "f32"] {
        assert_eq!(
            table_row(&old, "per format,", format),
            table_row(&new, "per format,", format)
        );
    }

    // Another program's profile keeps none: its kernels follow no naming
    // of kscope's, and the injection library records none for them.
    let mut program = profile.clone();
    program.conditions.program = Some(Program {
        command: vec!["./other_engine".into()],
        steps: "one step per graph launch".into(),
        processes: 1,
        ended: "exit 0".into(),
    });
    let loaded = Profile::from_json(&as_schema_3(&program), Path::new("program.json")).unwrap();
    assert!(loaded.dispatches.iter().all(|record| record.format.is_none()));
}

#[test]
fn older_fixtures_get_formats_on_every_rank() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/profiles");
    // Schema 2, split over two ranks.
    let split = Profile::load(&fixtures.join("tiny.cpu.tp2.json")).unwrap();
    assert_eq!(split.schema, PROFILE_SCHEMA_VERSION);
    let records = split
        .dispatches
        .iter()
        .chain(split.ranks.iter().flat_map(|rank| rank.dispatches.iter()));
    for record in records {
        let format = record.format.as_deref();
        match &*record.kernel {
            "all_reduce_sum_f32" | "rope_f32" | "add_f32" => assert_eq!(format, Some("f32")),
            "matvec_bf16" | "rms_norm_bf16_bf16" => assert_eq!(format, Some("bf16")),
            _ => assert!(format.is_some(), "{}", record.kernel),
        }
    }
    assert!(!split.ranks.is_empty());
    // Schema 1; a GPU run whose library GEMM kernels name no format.
    let oldest = Profile::load(&fixtures.join("tiny.cpu.schema-1.json")).unwrap();
    assert!(oldest.dispatches.iter().all(|record| record.format.is_some()));
    let gpu = Profile::load(&fixtures.join("llama-3.2-1b.h200.json")).unwrap();
    let library = gpu
        .dispatches
        .iter()
        .find(|record| record.kernel.starts_with("nvjet_"))
        .unwrap();
    assert_eq!(library.format, None);
}
