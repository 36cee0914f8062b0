//! The text report: its sections, the roofline columns (memory- or
//! compute-bound, and how close to that peak), the cross-check's lines, the
//! host enqueue column where a backend measures it, the line a device
//! without dispatch timing gets, and the comparison as text; every kept
//! fixture profile renders (short, full, HTML) and compares with itself.

mod common;

use std::path::Path;

use common::{recorded_profile, table_row};
use kernelscope::OpKind;
use kernelscope::profile::{Ceiling, Profile, compare};
use kernelscope::testing::synthetic_profile;
use kernelscope_report::{
    ReportOptions, render_comparison, render_comparison_html, render_html, render_report, render_report_with,
};

#[test]
fn human_report_has_its_sections() {
    let report = render_report(&recorded_profile());
    for needle in [
        "tokens: 0 prefill, 3 decode",
        "first: token 0",
        "last: token 2",
        "per op, over 3 tokens",
        "| Rope",
        "| MatVec",
        "per layer",
        "| layer.0",
        "| lm_head",
        "roofline: memory: read 50.0 GB/s; compute ceiling unknown",
        "FLOP/B",
        "bound",
        "% of peak",
        "submissions by label",
        "| token",
        "counters:",
        "| dispatches",
        "per decode token",
        "cross-check token: dispatch sum",
    ] {
        assert!(report.contains(needle), "missing `{needle}` in:\n{report}");
    }
}

#[test]
fn the_cross_check_flags_clocks_that_disagree_and_idle_is_reported() {
    let mut profile = synthetic_profile(4, 1.0, 1);
    let report = render_report(&profile);
    assert!(!report.contains("FLAGGED"), "{report}");
    assert!(report.contains("the clocks agree"), "{report}");
    // A submission ten times longer than its dispatches is idle time:
    // reported in the idle section, not flagged.
    profile.submissions[0].end_ns += 10 * (profile.submissions[0].end_ns - profile.submissions[0].start_ns);
    let profile = profile.with_idle();
    let report = render_report(&profile);
    assert!(!report.contains("FLAGGED"), "{report}");
    assert!(report.contains("device idle inside submissions"), "{report}");
    assert!(report.contains("idle before each dispatch, by op"), "{report}");

    // A dispatch clock running 20 % fast inside one submission: flagged,
    // naming what disagreed and where.
    let mut fast = synthetic_profile(3, 1.0, 4);
    let start = fast.submissions[1].start_ns;
    for dispatch in fast
        .dispatches
        .iter_mut()
        .filter(|dispatch| dispatch.submission == 1)
    {
        dispatch.start_ns = start + (dispatch.start_ns - start) * 6 / 5;
        dispatch.end_ns = start + (dispatch.end_ns - start) * 6 / 5;
    }
    let report = render_report(&fast.with_idle());
    assert!(
        report.contains("FLAGGED: the clocks disagree")
            && report.contains("in 1 submissions the dispatches span longer than their submission")
            && report.contains("first at submission 1"),
        "{report}"
    );
}

#[test]
fn a_real_gpu_profile_is_not_flagged_and_shows_its_idle_time() {
    // llama-3.2-1b on an H200 (graph mode): the device idles between
    // kernels and before each graph's first; the clocks agree.
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/profiles/llama-3.2-1b.h200.json"
    );
    let profile = kernelscope::profile::Profile::load(std::path::Path::new(path)).unwrap();
    let report = render_report(&profile);
    assert!(!report.contains("FLAGGED"), "{report}");
    assert!(
        report.contains("cross-check decode:") && report.contains("the clocks agree"),
        "{report}"
    );
    let decode = profile
        .submissions
        .iter()
        .filter(|submission| submission.label.as_ref() == "decode")
        .map(|submission| submission.idle.expect("filled on load"))
        .fold(kernelscope::profile::SubmissionIdle::default(), |sum, idle| {
            sum.saturating_add(idle)
        });
    assert!(decode.idle_ns() > 0 && decode.between_ns > 0, "{decode:?}");
}

#[test]
fn gated_submissions_and_host_enqueue_are_reported() {
    let mut profile = synthetic_profile(4, 1.0, 3);
    let plain = render_report(&profile);
    assert!(
        !plain.contains("host enqueue"),
        "no enqueue column where nothing was measured:\n{plain}"
    );
    // Two of the submissions were held until enqueued, each after 250 µs
    // of host launching; the others report their enqueue time only.
    for (position, submission) in profile.submissions.iter_mut().enumerate() {
        submission.enqueue = Some(kernelscope::profile::Enqueue {
            host_ns: 250_000 + position as u64 * 1_000,
            device_held: position % 2 == 0,
        });
    }
    let report = render_report(&profile);
    for needle in [
        "host enqueue µs (mean)",
        "|                  251.5 |",
        "2 of 4 submissions held until fully enqueued (host enqueue 1.006 ms in all)",
    ] {
        assert!(report.contains(needle), "missing `{needle}` in:\n{report}");
    }
}

#[test]
fn a_device_without_dispatch_timing_says_so_and_keeps_its_submissions() {
    use kernelscope::profile::ProfileLevel;
    use kernelscope::{DType, Device, DeviceOptions, Dispatch};
    let options = DeviceOptions::new()
        .profile(ProfileLevel::Dispatch)
        .without_dispatch_timing("simulated: no dispatch-boundary timestamps");
    let device = Device::cpu_with(options);
    let kernel = kernelscope::testing::inc_one_registry()
        .kernel(&device, "inc_one")
        .unwrap();
    let input = device.buffer_from_slice(&[1.0f32; 64], &[64]).unwrap();
    let output = device.alloc(DType::F32, &[64]).unwrap();
    let mut encoder = device.command_encoder();
    for _ in 0..3 {
        let dispatch = Dispatch::new(&kernel).read(&input).write(&output);
        encoder.dispatch(dispatch).unwrap();
        encoder.commit_and_wait_labeled("degraded").unwrap();
    }
    let report = render_report(&device.profile(device.conditions("eager", None)));
    assert!(report.contains("per-dispatch timing: unsupported"), "{report}");
    assert!(
        report.contains("| degraded"),
        "submission rows still reported: {report}"
    );
}

#[test]
fn a_comparison_reads_as_a_table_its_notes_and_a_verdict() {
    let base = synthetic_profile(8, 1.0, 1);
    let slow = synthetic_profile(8, 1.2, 2);
    let text = render_comparison(&compare(&base, &slow, 0.05, false).unwrap());
    assert!(text.starts_with("| section "), "{text}");
    assert!(
        text.lines().any(|line| line.starts_with("| op ")
            && line.contains("| MatVec ")
            && line.contains("REGRESSED")),
        "{text}"
    );
    assert!(text.contains("result: REGRESSION in"), "{text}");
    let same = render_comparison(&compare(&base, &base, 0.05, false).unwrap());
    assert!(
        same.ends_with("result: no regression (threshold 5.0%)\n"),
        "{same}"
    );
    // A device that ran 30% slower: the note is printed.
    let mut other = synthetic_profile(8, 1.0, 2);
    other.conditions.ceilings.compute = Some(Ceiling::new(3500.0, "slower"));
    let noted = render_comparison(&compare(&base, &other, 0.05, false).unwrap());
    assert!(noted.contains("note: compute ceiling measured"), "{noted}");
}

#[test]
fn roofline_columns_classify_memory_and_compute_bound_ops() {
    // Attention made compute-heavy: 128 MFLOP per MiB, past the synthetic
    // device's ridge point (5000 GFLOP/s / 100 GB/s = 50 FLOP/B); MatVec
    // stays at 0.5 FLOP/B, RmsNorm declares no flops at all.
    let mut profile = synthetic_profile(4, 1.0, 7);
    for record in &mut profile.dispatches {
        match record.op_kind {
            OpKind::Attention => record.flops = 1 << 27,
            OpKind::RmsNorm => record.flops = 0,
            _ => {}
        }
    }
    // The synthetic device reads at 100 GB/s and writes at 80: a
    // dispatch's memory floor takes each share of its bytes at its own.
    let (read_gbps, write_gbps, peak_gflops) = (100.0, 80.0, 5000.0);
    let ceilings = &profile.conditions.ceilings;
    assert_eq!(ceilings.bandwidth_gbps(), Some(read_gbps));
    assert_eq!(ceilings.write.as_ref().map(|write| write.value), Some(write_gbps));
    assert_eq!(ceilings.compute_gflops(), Some(peak_gflops));
    assert_eq!(profile.conditions.ridge_point(), Some(50.0));
    let memory_floor_ns = |record: &kernelscope::profile::DispatchRecord| {
        (record.bytes - record.bytes_written) as f64 / read_gbps + record.bytes_written as f64 / write_gbps
    };
    let floor_of = |kind: OpKind| -> f64 {
        profile
            .dispatches
            .iter()
            .filter(|record| record.op_kind == kind)
            .map(memory_floor_ns)
            .sum()
    };
    let totals = |kind: OpKind| {
        profile
            .dispatches
            .iter()
            .filter(|record| record.op_kind == kind)
            .fold((0u64, 0u64, 0u64), |(ns, bytes, flops), record| {
                (
                    ns + record.end_ns - record.start_ns,
                    bytes + record.bytes,
                    flops + record.flops,
                )
            })
    };
    let report = render_report(&profile);
    assert!(
        report.contains(
            "roofline: memory: read 100.0 GB/s, write 80.0 GB/s; compute 5000.0 GFLOP/s; ridge point 50.00 FLOP/B\n  read ceiling 100.0 GB/s: synthetic read"
        ),
        "{report}"
    );

    // Compute-bound: GFLOP/s against the compute peak.
    let (ns, bytes, flops) = totals(OpKind::Attention);
    let gflops = flops as f64 / ns as f64;
    let row = table_row(&report, "per op,", "Attention");
    assert_eq!(row[6], format!("{gflops:.1}"), "GFLOP/s: {row:?}");
    assert_eq!(
        row[7],
        format!("{:.2}", flops as f64 / bytes as f64),
        "FLOP/B: {row:?}"
    );
    assert_eq!(row[7], "128.00");
    assert_eq!(row[8], "compute", "{row:?}");
    assert_eq!(
        row[9],
        format!("{:.1}% FLOP/s", 100.0 * gflops / peak_gflops),
        "{row:?}"
    );

    // Memory-bound: its floor (reads at the read ceiling, writes at the
    // write ceiling) against the time it took.
    let matvec_floor = floor_of(OpKind::MatVec);
    let (ns, bytes, flops) = totals(OpKind::MatVec);
    let gbps = bytes as f64 / ns as f64;
    let row = table_row(&report, "per op,", "MatVec");
    assert_eq!(row[5], format!("{gbps:.1}"), "GB/s: {row:?}");
    assert_eq!(
        row[6],
        format!("{:.1}", flops as f64 / ns as f64),
        "GFLOP/s: {row:?}"
    );
    assert_eq!(row[7], "0.50", "FLOP/B: {row:?}");
    assert_eq!(row[8], "memory", "{row:?}");
    assert_eq!(
        row[9],
        format!("{:.1}% BW", 100.0 * matvec_floor / ns as f64),
        "{row:?}"
    );
    // Its writes at the slower write ceiling: further from the limit than
    // its bandwidth over the read ceiling alone says.
    assert!(matvec_floor > bytes as f64 / read_gbps);

    // No flops: memory-bound whatever the ridge point, no GFLOP/s.
    let row = table_row(&report, "per op,", "RmsNorm");
    assert_eq!(
        (row[6].as_str(), row[7].as_str(), row[8].as_str()),
        ("-", "-", "memory")
    );
    assert!(row[9].ends_with("% BW"), "{row:?}");

    // Kernels are classified alike.
    let row = table_row(&report, "per kernel,", "attention_f32");
    assert_eq!(row[8], "compute", "{row:?}");

    // A layer holds both kinds: mixed, against the time its dispatches
    // would take at their own bounds; its summed bytes and flops (42.83
    // FLOP/B, below the ridge) would have called it all memory-bound.
    let layer: Vec<_> = profile
        .dispatches
        .iter()
        .filter(|record| record.scope.starts_with("layer.0."))
        .collect();
    let at_bounds_ns: f64 = layer
        .iter()
        .map(|record| match record.op_kind {
            OpKind::Attention => record.flops as f64 / peak_gflops,
            _ => memory_floor_ns(record),
        })
        .sum();
    let taken_ns: u64 = layer.iter().map(|record| record.end_ns - record.start_ns).sum();
    let row = table_row(&report, "per layer,", "layer.0");
    assert_eq!(row[7], "42.83", "{row:?}");
    assert_eq!(row[8], "mixed", "{row:?}");
    assert_eq!(
        row[9],
        format!("{:.1}% roofline", 100.0 * at_bounds_ns / taken_ns as f64),
        "{row:?}"
    );

    // An unknown compute peak is said, never guessed: work with flops is
    // unclassified and shows the bandwidth it reached, named as such.
    let attention_floor = floor_of(OpKind::Attention);
    profile.conditions.ceilings.compute = None;
    let report = render_report(&profile);
    assert!(
        report.contains("compute ceiling unknown (compute probe not run)")
            && report.contains("no ridge point"),
        "{report}"
    );
    let row = table_row(&report, "per op,", "Attention");
    assert_eq!(row[8], "?", "{row:?}");
    let (ns, _, _) = totals(OpKind::Attention);
    assert_eq!(row[9], format!("{:.1}% BW", 100.0 * attention_floor / ns as f64));
    assert_eq!(table_row(&report, "per op,", "RmsNorm")[8], "memory");
}

/// Every profile kept in tests/fixtures/profiles (a real GPU run, a CPU
/// run, a split CPU run, a schema-1 file the reader upgrades) renders as the
/// short and full text report and as the HTML page, and compares with
/// itself: no regression, and the comparison page renders too.
#[test]
fn every_fixture_profile_renders_and_compares() {
    let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/profiles");
    let mut seen = 0;
    for entry in std::fs::read_dir(&folder).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|extension| extension != "json") {
            continue;
        }
        seen += 1;
        let name = path.display().to_string();
        let profile = Profile::load(&path).unwrap_or_else(|error| panic!("{error}"));
        assert!(!profile.dispatches.is_empty(), "{name}");
        let short = render_report_with(&profile, ReportOptions::SHORT);
        let full = render_report_with(&profile, ReportOptions::FULL);
        assert!(short.starts_with("kernelscope profile"), "{name}");
        assert!(
            short.lines().count() < full.lines().count(),
            "{name}: folding shortens"
        );
        let html = render_html(&profile);
        assert!(html.contains(r#"<svg class="layers""#), "{name}");
        let comparison = compare(&profile, &profile, 0.05, false).unwrap();
        assert!(!comparison.regressed(), "{name}");
        assert!(
            render_comparison_html(&profile, &profile, &comparison, ("a", "b")).contains("no regression")
        );
    }
    assert_eq!(seen, 4, "the fixtures");
}

#[test]
fn quantized_kernels_sit_by_their_declared_bytes_and_time_groups_by_format() {
    // One mat-vec per layer, the same flops (2 per weight of a matrix of
    // 256 Ki weights) over Q8_0 blocks in layer 0 (34 bytes per 32 weights) and
    // Q4_K blocks in layer 1 (144 bytes per 256): each kernel is placed by
    // the bytes it declares, its blocks' own, not a dense matrix's.
    let mut profile = synthetic_profile(4, 1.0, 9);
    let weights: u64 = 1 << 18;
    for record in &mut profile.dispatches {
        if record.op_kind == OpKind::MatVec {
            let (kernel, format, blocks) = if record.scope.starts_with("layer.0.") {
                ("matvec_q8_0_q8", "q8_0", weights / 32 * 34)
            } else {
                ("matvec_q4_k_q8", "q4_k", weights / 256 * 144)
            };
            record.kernel = kernel.into();
            record.format = Some(format.into());
            record.bytes = blocks + record.bytes_written;
            record.flops = 2 * weights;
        }
    }
    profile.conditions.weight_format = Some("Q4_K_M".into());
    profile.conditions.model_shape = Some("llama: 2 layers, hidden 512".into());
    let report = render_report(&profile);
    assert!(
        report.contains("weights: Q4_K_M | shape: llama: 2 layers, hidden 512\n"),
        "{report}"
    );
    let totals = |kernel: &str| {
        profile
            .dispatches
            .iter()
            .filter(|record| &*record.kernel == kernel)
            .fold((0u64, 0u64, 0u64), |(ns, bytes, flops), record| {
                (
                    ns + record.end_ns - record.start_ns,
                    bytes + record.bytes,
                    flops + record.flops,
                )
            })
    };
    for (kernel, format) in [("matvec_q8_0_q8", "q8_0"), ("matvec_q4_k_q8", "q4_k")] {
        let (ns, bytes, flops) = totals(kernel);
        let row = table_row(&report, "per kernel,", kernel);
        assert_eq!(
            row[5],
            format!("{:.1}", bytes as f64 / ns as f64),
            "GB/s: {row:?}"
        );
        assert_eq!(
            row[7],
            format!("{:.2}", flops as f64 / bytes as f64),
            "FLOP/B: {row:?}"
        );
        // The format's row holds that kernel alone: the same figures.
        let format_row = table_row(&report, "per format,", format);
        assert_eq!(format_row[1..], row[1..], "{format}");
    }
    // Fewer bytes for the same products: Q4_K's intensity is the higher.
    let intensity = |kernel: &str| {
        table_row(&report, "per kernel,", kernel)[7]
            .parse::<f64>()
            .unwrap()
    };
    assert!(intensity("matvec_q4_k_q8") > 1.8 * intensity("matvec_q8_0_q8"));
    // Attention and RmsNorm (f32) make the third row.
    let f32_calls = profile
        .dispatches
        .iter()
        .filter(|record| record.kernel.ends_with("_f32"))
        .count();
    assert_eq!(table_row(&report, "per format,", "f32")[1], f32_calls.to_string());
    assert_eq!(
        common::row_keys(&report, "per format,").len(),
        3,
        "q8_0, q4_k, f32:\n{report}"
    );

    // A dense run has no format table and no recorded format line.
    let dense = render_report(&synthetic_profile(4, 1.0, 9));
    assert!(
        !dense.contains("per format") && !dense.contains("weights: "),
        "{dense}"
    );
}

/// A mixture-of-experts run's section: the routing line, each sparse
/// layer's load (the short report its most imbalanced, `--full` all), the
/// experts by their share of the MLP time; the routing survives the JSON.
#[test]
fn an_moe_profile_has_its_expert_section() {
    use kernelscope::profile::{ExpertRouting, LayerRouting};
    let mut profile = synthetic_profile(5, 1.0, 3);
    let mut rng = kernelscope::rng::SplitMix64::new(17);
    let layers: Vec<LayerRouting> = (0..2)
        .map(|layer| {
            let mut tokens = vec![0u64; 8];
            for _ in 0..10 {
                tokens[(rng.next_u64() % 8) as usize] += 1;
            }
            LayerRouting { layer, tokens }
        })
        .collect();
    profile.experts = Some(ExpertRouting {
        experts: 8,
        per_token: 2,
        expert_bytes: 3_000_000,
        layers: layers.clone(),
    });
    let short = render_report(&profile);
    assert!(
        short.contains("experts: 2 of 8 per row in 2 sparse layers, 5 rows routed; a decoded token reads 12.0 MB of expert weights (3.0 MB per expert)"),
        "{short}"
    );
    for layer in &layers {
        let (busiest, rows) = layer.busiest();
        let row = table_row(&short, "per sparse layer", &format!("layer.{}", layer.layer));
        assert_eq!(row[2], (8 - layer.idle()).to_string(), "{row:?}");
        assert_eq!(row[3], format!("e{busiest} ({rows})"), "{row:?}");
        assert_eq!(row[4], format!("{:.2}x", layer.imbalance()), "{row:?}");
    }
    assert!(short.contains("experts by time"), "{short}");
    let used: usize = layers.iter().map(|layer| 8 - layer.idle()).sum();
    let full = render_report_with(&profile, ReportOptions::FULL);
    assert_eq!(
        full.matches("| layer.0.e").count() + full.matches("| layer.1.e").count(),
        used
    );
    let back = Profile::from_json(&profile.to_json(), Path::new("moe.json")).unwrap();
    assert_eq!(back.experts, profile.experts);
    // The page's two heatmaps: a cell per layer and expert in each, each
    // with its hover; the darkest cell of the rows map is the busiest.
    let page = render_html(&profile);
    assert!(page.contains("<h2>Experts</h2>"));
    let section = &page[page.find("<h2>Experts</h2>").unwrap()..page.find("<h2>Per token</h2>").unwrap()];
    assert_eq!(
        section.matches("<title>layer.").count(),
        2 * 2 * 8,
        "two maps of 2 layers x 8 experts"
    );
    let busiest = layers.iter().map(|layer| layer.busiest().1).max().unwrap();
    assert!(
        page.contains(&format!("(darkest: {busiest} rows)")),
        "the rows map's scale"
    );
    for layer in &layers {
        for (expert, rows) in layer.tokens.iter().enumerate() {
            assert!(page.contains(&format!(
                "<title>layer.{}.e{expert}: {rows} rows</title>",
                layer.layer
            )));
        }
    }
    assert!(!render_html(&synthetic_profile(5, 1.0, 3)).contains("<h2>Experts</h2>"));
    // A dense run has no such section.
    assert!(!render_report(&synthetic_profile(5, 1.0, 3)).contains("experts:"));
}
