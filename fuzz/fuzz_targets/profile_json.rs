//! The profile reader behind `kscope compare`: any bytes must be refused or
//! give a profile that every reader (text report, HTML page, trace,
//! comparison) handles without a panic or an overflow.
#![no_main]

use kernelscope::profile::{Profile, compare};
use kernelscope_report::{chrome_trace, render_comparison, render_html, render_report};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(profile) = Profile::from_json(text, std::path::Path::new("profile.json")) else {
        return;
    };
    let _ = render_report(&profile);
    let _ = render_html(&profile);
    let _ = chrome_trace(&profile);
    if let Ok(comparison) = compare(&profile, &profile, 0.05, true) {
        // A profile never regresses against itself.
        assert!(!comparison.regressed(), "regressed against itself");
        let _ = render_comparison(&comparison);
    }
});
