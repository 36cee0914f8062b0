//! The gap account's page and text from two real profiles (the fixtures
//! kernelscope's own tests read: kscope's engine and llama.cpp on one H200).

use std::path::Path;

use kernelscope::profile::{Profile, annotate, gap_account};
use kernelscope_report::{render_gap_account, render_gap_html};

fn fixture(name: &str) -> Profile {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../kernelscope/tests/fixtures/programs")
        .join(name);
    let mut profile = Profile::load(&path).unwrap_or_else(|error| panic!("{name}: {error}"));
    annotate(&mut profile);
    profile
}

#[test]
fn the_page_draws_both_engines_per_role_sorted_by_difference() {
    let base = fixture("kscope-1b-bf16.json");
    let new = fixture("llamacpp-1b-bf16.json");
    let account = gap_account(&base, &new);
    let page = render_gap_html(&base, &new, &account, ("ks.json", "lcpp.json"));
    let chart_start = page.find("gap-roles").expect("the role chart");
    let chart = &page[chart_start..chart_start + page[chart_start..].find("</svg>").unwrap()];
    // Two bars per role row and one for idle.
    assert_eq!(
        chart.matches(r#"class="bar""#).count(),
        2 * (account.roles.len() + 1)
    );
    // Sorted by difference: the first label is the row that differs most
    // (idle inside a token included).
    let first_label = chart.split(r#"class="role""#).nth(1).unwrap();
    let biggest = account
        .roles
        .iter()
        .map(|row| (row.role.clone(), row.difference().abs()))
        .chain([(
            "idle inside a token".to_string(),
            (account.idle.new_us_per_token - account.idle.base_us_per_token).abs(),
        )])
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap();
    let label = first_label.split('>').nth(1).unwrap().split('<').next().unwrap();
    assert_eq!(label.replace("&amp;", "&"), biggest.0);
    assert!(page.contains("gap-layers"));
    let text = render_gap_account(&account);
    assert!(
        text.contains("[merged]") && text.contains("measured token"),
        "{text}"
    );
}
