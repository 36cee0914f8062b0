//! The HTML report in a real browser: headless Chromium opens the page from
//! a file with the network off, runs its script and dumps the DOM, which
//! must hold one roofline point per kernel that declares flops (a bandwidth
//! bar for the others), one bar per layer, no error and no request; then it
//! takes a screenshot. The same for the comparison page, whose per-layer
//! changes carry their verdicts. Without Chromium these tests say so and
//! pass, unless `KSCOPE_REQUIRE_BROWSER=1` (CI sets it) makes them fail.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kernelscope::profile::{Profile, compare};
use kernelscope::testing::synthetic_layered_profile;
use kernelscope_report::{render_comparison_html, render_html};

const REQUIRE_BROWSER: &str = "KSCOPE_REQUIRE_BROWSER";

/// The Chromium to drive: `$KSCOPE_CHROMIUM`, or the first of the usual
/// names on the PATH.
fn chromium() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("KSCOPE_CHROMIUM") {
        return Some(PathBuf::from(path));
    }
    let path = std::env::var_os("PATH")?;
    [
        "chromium",
        "chromium-browser",
        "google-chrome",
        "google-chrome-stable",
    ]
    .iter()
    .flat_map(|name| std::env::split_paths(&path).map(move |folder| folder.join(name)))
    .find(|candidate| candidate.is_file())
}

/// Chromium, or `None` after saying loudly why the test does not run.
fn browser() -> Option<PathBuf> {
    let found = chromium();
    if found.is_none() {
        let required = std::env::var(REQUIRE_BROWSER).is_ok_and(|value| value == "1");
        assert!(
            !required,
            "{REQUIRE_BROWSER}=1 but no Chromium was found (install Debian's `chromium`, or set KSCOPE_CHROMIUM)"
        );
        eprintln!("SKIPPED: no Chromium on the PATH; the HTML report was not checked in a browser");
    }
    found
}

/// Runs headless Chromium on `page` with `arguments` (the network off, a
/// profile folder of its own) and returns its standard output; fails the
/// test after two minutes.
fn headless(browser: &Path, page: &Path, scratch: &Path, arguments: &[&str]) -> String {
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            // Containers often have a small /dev/shm, which crashes it.
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            // Every host name fails to resolve and every connection goes to
            // a closed port: the network is off for the page.
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "--proxy-server=127.0.0.1:9",
            "--virtual-time-budget=3000",
        ])
        .arg(format!(
            "--user-data-dir={}",
            scratch.join("chromium-profile").display()
        ))
        .args(arguments)
        .arg(format!("file://{}", page.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting Chromium");
    let began = Instant::now();
    loop {
        if child.try_wait().expect("waiting for Chromium").is_some() {
            break;
        }
        if began.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!(
                "Chromium did not finish with {} within two minutes",
                page.display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = child.wait_with_output().expect("Chromium's output");
    assert!(output.status.success(), "Chromium failed: {:?}", output.status);
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A scratch folder of this test's own.
fn scratch(name: &str) -> PathBuf {
    let folder = std::env::temp_dir().join(format!("kscope-html-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&folder);
    std::fs::create_dir_all(&folder).unwrap();
    folder
}

fn count(text: &str, needle: &str) -> usize {
    text.matches(needle).count()
}

/// The page loaded in the browser, ran its script without an error and
/// loaded nothing; returns the DOM after the script ran.
fn loaded_cleanly(browser: &Path, page: &Path, folder: &Path) -> String {
    let dom = headless(browser, page, folder, &["--dump-dom"]);
    assert!(
        dom.contains(r#"data-ready="yes""#),
        "the page's script did not finish: {}",
        &dom[..dom.len().min(400)]
    );
    assert!(
        dom.contains(r#"data-errors="0""#),
        "the page reported errors: {dom}"
    );
    assert!(dom.contains(r#"data-resources="0""#), "the page loaded something");
    assert!(
        dom.contains(r#"<ul id="page-errors"></ul>"#),
        "errors listed on the page"
    );
    dom
}

/// Takes a screenshot of `page` and checks it is a real picture.
fn screenshot(browser: &Path, page: &Path, folder: &Path) {
    let picture = folder.join("page.png");
    headless(
        browser,
        page,
        folder,
        &[
            &format!("--screenshot={}", picture.display()),
            "--window-size=1400,2400",
        ],
    );
    let bytes = std::fs::read(&picture).expect("a screenshot");
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    assert!(bytes.len() > 20_000, "a blank page? {} bytes", bytes.len());
}

/// Kernels of the profile's repetition tokens (what the page summarises),
/// and how many of them declare flops and bytes.
fn kernels(profile: &Profile) -> (usize, usize) {
    let tokens = profile.repetition_tokens();
    let mut totals: std::collections::BTreeMap<&str, (u64, u64)> = std::collections::BTreeMap::new();
    for record in &profile.dispatches {
        if tokens.is_empty() || record.token.is_some_and(|token| tokens.contains(&token)) {
            let entry = totals.entry(&record.kernel).or_default();
            entry.0 += record.flops;
            entry.1 += record.bytes;
        }
    }
    let with_flops = totals
        .values()
        .filter(|(flops, bytes)| *flops > 0 && *bytes > 0)
        .count();
    (totals.len(), with_flops)
}

/// Layers of the profile's repetition tokens (`layer_of` each scope).
fn layers(profile: &Profile) -> usize {
    let mut names: Vec<String> = profile
        .dispatches
        .iter()
        .map(|record| {
            let mut parts = record.scope.splitn(3, '.');
            match (parts.next(), parts.next()) {
                (Some("layer"), Some(number)) => format!("layer.{number}"),
                _ if record.scope.is_empty() => "(unscoped)".to_string(),
                _ => record.scope.to_string(),
            }
        })
        .collect();
    names.sort_unstable();
    names.dedup();
    names.len()
}

#[test]
fn a_real_model_profile_renders_in_a_browser() {
    let Some(browser) = browser() else {
        return;
    };
    let folder = scratch("real");
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/profiles/llama-3.2-1b.h200.json");
    let profile = Profile::load(&fixture).unwrap();
    let page = folder.join("report.html");
    std::fs::write(&page, render_html(&profile)).unwrap();
    let dom = loaded_cleanly(&browser, &page, &folder);
    let (all, with_flops) = kernels(&profile);
    assert!(with_flops >= 5, "{with_flops}");
    assert_eq!(
        count(&dom, r#"class="roofline-point""#),
        with_flops,
        "a point per kernel with flops"
    );
    assert_eq!(count(&dom, r#"class="bandwidth-bar""#), all - with_flops);
    // embed, 16 layers, lm_head, sample.
    assert_eq!(count(&dom, r#"class="layer-bar"#), layers(&profile));
    assert!(layers(&profile) >= 16);
    assert_eq!(count(&dom, r#"class="token-bar""#), profile.tokens.len());
    let _ = std::fs::remove_dir_all(&folder);
}

#[test]
fn the_report_page_renders_in_a_browser() {
    let Some(browser) = browser() else {
        return;
    };
    let folder = scratch("report");
    // 12 layers, one of them slow; a kernel without flops added (a copy).
    let mut profile = synthetic_layered_profile(6, 12, &|layer| if layer == 5 { 1.4 } else { 1.0 }, 41);
    for record in profile
        .dispatches
        .iter_mut()
        .filter(|record| &*record.kernel == "rms_norm_f32")
    {
        record.flops = 0;
    }
    let page = folder.join("report.html");
    std::fs::write(&page, render_html(&profile)).unwrap();
    let dom = loaded_cleanly(&browser, &page, &folder);
    let (all, with_flops) = kernels(&profile);
    assert_eq!(
        count(&dom, r#"class="roofline-point""#),
        with_flops,
        "a point per kernel with flops"
    );
    assert_eq!(
        count(&dom, r#"class="bandwidth-bar""#),
        all - with_flops,
        "a bar per kernel without"
    );
    assert_eq!(count(&dom, r#"class="layer-bar"#), 12, "a bar per layer");
    assert_eq!(
        count(&dom, r#"class="layer-bar outlier""#),
        1,
        "the slow layer, highlighted"
    );
    assert!(dom.contains(r#"<g class="layer-bar outlier" data-layer="layer.5">"#));
    assert_eq!(count(&dom, r#"class="token-bar""#), 6, "a bar per token");
    screenshot(&browser, &page, &folder);
    let _ = std::fs::remove_dir_all(&folder);
}

#[test]
fn the_comparison_page_renders_in_a_browser() {
    let Some(browser) = browser() else {
        return;
    };
    let folder = scratch("compare");
    let base = synthetic_layered_profile(8, 6, &|_| 1.0, 42);
    let new = synthetic_layered_profile(8, 6, &|layer| if layer == 2 { 1.5 } else { 1.0 }, 43);
    let comparison = compare(&base, &new, 0.05, false).unwrap();
    assert!(comparison.regressed());
    let page = folder.join("compare.html");
    std::fs::write(
        &page,
        render_comparison_html(&base, &new, &comparison, ("base.json", "new.json")),
    )
    .unwrap();
    let dom = loaded_cleanly(&browser, &page, &folder);
    assert_eq!(count(&dom, r#"class="delta-bar "#), 6, "a change bar per layer");
    assert!(dom.contains(r#"<g class="delta-bar verdict-regressed" data-layer="layer.2">"#));
    assert_eq!(
        count(&dom, r#"class="delta-bar verdict-regressed""#),
        1,
        "only the slow layer regressed"
    );
    assert_eq!(
        count(&dom, r#"class="layer-bar"#),
        12,
        "both runs' layer bars, side by side"
    );
    assert!(dom.contains("REGRESSION in"));
    screenshot(&browser, &page, &folder);
    let _ = std::fs::remove_dir_all(&folder);
}

/// The value of attribute `name` in the markup `tag` (the text of one element's start).
fn attribute<'a>(tag: &'a str, name: &str) -> &'a str {
    let start = tag
        .find(&format!(" {name}=\""))
        .unwrap_or_else(|| panic!("no {name} in {tag}"))
        + name.len()
        + 3;
    &tag[start..start + tag[start..].find('"').unwrap()]
}

/// Each element of `class` in `page`: its start tag and, for a mark, its
/// hover text (its lines' escapes undone).
fn elements<'a>(page: &'a str, element: &str, class: &str) -> Vec<(&'a str, String)> {
    page.split(&format!("<{element} class=\"{class}\""))
        .skip(1)
        .map(|rest| {
            let tag = &rest[..rest.find('>').unwrap()];
            let title = rest.find("<title>").map_or("", |start| {
                &rest[start + 7..start + rest[start..].find("</title>").unwrap()]
            });
            (tag, title.replace("&#10;", "\n"))
        })
        .collect()
}

/// The formats the roofline's legend names, in order, with their colours.
fn legend(page: &str) -> Vec<(String, String)> {
    let start = page
        .find(r#"<p class="legend formats">"#)
        .expect("a legend of formats");
    let legend = &page[start..start + page[start..].find("</p>").unwrap()];
    legend
        .split(r#"<span class="format-key""#)
        .skip(1)
        .map(|key| {
            let format = attribute(key, "data-format").to_string();
            let colour = key
                .split("background:")
                .nth(1)
                .and_then(|rest| rest.split('"').next())
                .unwrap()
                .to_string();
            (format, colour)
        })
        .collect()
}

#[test]
fn the_roofline_colours_kernels_by_the_format_they_read() {
    // A Q4_K_M-like run: three layers' mat-vecs over Q4_K blocks, one over
    // Q6_K; attention in f32; RmsNorm without flops (a bar).
    let mut profile = synthetic_layered_profile(4, 4, &|_| 1.0, 44);
    for record in &mut profile.dispatches {
        match &*record.kernel {
            "matvec_bf16" if record.scope.starts_with("layer.3.") => {
                record.kernel = "matvec_q6_k_q8".into();
                record.format = Some("q6_k".into());
            }
            "matvec_bf16" => {
                record.kernel = "matvec_q4_k_q8".into();
                record.format = Some("q4_k".into());
            }
            "rms_norm_f32" => record.flops = 0,
            _ => {}
        }
    }
    profile.conditions.weight_format = Some("Q4_K_M".into());
    let page = render_html(&profile);
    let keys = legend(&page);
    let names: Vec<&str> = keys.iter().map(|(format, _)| format.as_str()).collect();
    assert_eq!(names, ["q4_k", "q6_k", "f32"], "{keys:?}");
    let colour_of = |format: &str| {
        keys.iter()
            .find(|(key, _)| key == format)
            .map(|(_, colour)| colour.clone())
            .unwrap_or_else(|| panic!("{format} not in the legend"))
    };
    assert_ne!(colour_of("q4_k"), colour_of("q6_k"));
    // Every circle in its format's colour, its hover naming the format.
    let circles = elements(&page, "circle", "roofline-point");
    let mut placed: Vec<(&str, &str)> = circles
        .iter()
        .map(|(tag, title)| {
            let (name, format) = (attribute(tag, "data-name"), attribute(tag, "data-format"));
            assert_eq!(attribute(tag, "fill"), colour_of(format), "{tag}");
            assert!(
                title.starts_with(&format!("{name}\nformat: {format}\n")),
                "{title}"
            );
            (name, format)
        })
        .collect();
    placed.sort_unstable();
    assert_eq!(
        placed,
        [
            ("attention_f32", "f32"),
            ("matvec_q4_k_q8", "q4_k"),
            ("matvec_q6_k_q8", "q6_k")
        ]
    );
    let bars = elements(&page, "rect", "bandwidth-bar");
    assert_eq!(bars.len(), 1);
    assert_eq!(attribute(bars[0].0, "data-format"), "f32");
    assert_eq!(attribute(bars[0].0, "fill"), colour_of("f32"));
    // The time by format, and the recorded format among the conditions.
    assert!(page.contains("<h2>Per format, over 4 tokens</h2>"), "{page}");
    assert!(page.contains("<td>weight format</td><td>Q4_K_M</td>"));

    // A dense run's legend: its dtypes and the library kernels of no format.
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/profiles/llama-3.2-1b.h200.json");
    let dense = render_html(&Profile::load(&fixture).unwrap());
    let names: Vec<String> = legend(&dense).into_iter().map(|(format, _)| format).collect();
    assert_eq!(names, ["bf16", "f32", "other"]);
    assert!(!dense.contains("Per format"), "no format table for a dense run");

    let Some(browser) = browser() else {
        return;
    };
    let folder = scratch("formats");
    let file = folder.join("formats.html");
    std::fs::write(&file, &page).unwrap();
    let dom = loaded_cleanly(&browser, &file, &folder);
    for format in ["q4_k", "q6_k", "f32"] {
        assert!(
            dom.contains(&format!(r#"<span class="format-key" data-format="{format}">"#)),
            "{format}"
        );
    }
    let _ = std::fs::remove_dir_all(&folder);
}

#[test]
fn the_bandwidth_ceiling_rises_to_the_ridge_point() {
    let page = render_html(&synthetic_layered_profile(2, 2, &|_| 1.0, 45));
    let lines = elements(&page, "line", "ceiling bandwidth");
    assert_eq!(lines.len(), 1, "{page}");
    let (tag, title) = &lines[0];
    let at = |name: &str| -> f64 {
        attribute(tag, name)
            .parse()
            .unwrap_or_else(|_| panic!("{name} is not a number: {tag}"))
    };
    assert!(at("x1") < at("x2"), "{tag}");
    assert!(at("y1") > at("y2"), "rises: {tag}");
    assert_eq!(title, "read ceiling 100.0 GB/s");
}

#[test]
fn the_timeline_draws_idle_time_inside_submissions() {
    // llama-3.2-1b on an H200: each decode token's bar splits into device
    // busy, idle inside its submission and the host's time outside it.
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/profiles/llama-3.2-1b.h200.json");
    let profile = Profile::load(&path).unwrap();
    let page = render_html(&profile);
    assert!(page.contains("device idle inside submissions</span>"), "legend");
    let idle_heights: Vec<f64> = page
        .match_indices(r#"<rect class="idle""#)
        .filter_map(|(at, _)| {
            let rest = &page[at..];
            let height = rest.split("height=\"").nth(1)?.split('"').next()?;
            height.parse().ok()
        })
        .collect();
    assert_eq!(
        idle_heights.len(),
        profile.tokens.len(),
        "one idle segment per token"
    );
    assert!(
        idle_heights.iter().any(|&height| height > 0.0),
        "{idle_heights:?}"
    );
    assert!(page.contains("idle inside submissions"), "hover text");
}

#[test]
fn a_split_run_draws_each_ranks_steps() {
    use kernelscope::profile::{OpKind, Topology, rank_steps};
    let Some(browser) = browser() else {
        return;
    };
    let folder = scratch("ranks");
    // Two ranks of 5 tokens, each layer's norm standing in for an
    // all-reduce, so every step has compute and communication.
    let rank = |seed| {
        let mut profile = synthetic_layered_profile(5, 3, &|_| 1.0, seed);
        for record in profile
            .dispatches
            .iter_mut()
            .filter(|record| &*record.kernel == "rms_norm_f32")
        {
            record.op_kind = OpKind::AllReduce;
        }
        profile
    };
    let topology = Topology {
        ranks: 2,
        devices: vec!["cpu 0".into(), "cpu 1".into()],
        library: "in-process".into(),
        link: "shared memory".into(),
    };
    let split = rank(51).with_ranks(topology, vec![(rank(52), 0)]);
    let (steps, _) = rank_steps(&split);
    assert_eq!(steps.len(), 5);
    let page = folder.join("ranks.html");
    std::fs::write(&page, render_html(&split)).unwrap();
    let dom = loaded_cleanly(&browser, &page, &folder);
    assert!(dom.contains("<h2>Ranks</h2>"), "no ranks section");
    assert_eq!(
        count(&dom, r#"class="rank-bar""#),
        2 * steps.len(),
        "a bar per step and rank"
    );
    assert_eq!(
        count(&dom, r#"class="slowest""#),
        steps.len(),
        "a slowest rank a step"
    );
    for step in &steps {
        let slowest = format!(
            r#"<g class="rank-bar" data-step="{}" data-rank="{}">"#,
            step.position,
            step.slowest_rank()
        );
        let at = dom.find(&slowest).expect("the slowest rank's bar");
        let bar = &dom[at..at + dom[at..].find("</g>").unwrap()];
        assert!(
            bar.contains(r#"class="slowest""#) && bar.contains("(slowest)"),
            "{bar}"
        );
    }
    assert!(dom.contains("imbalance (the slowest rank"), "the imbalance line");
    let _ = std::fs::remove_dir_all(&folder);
}
