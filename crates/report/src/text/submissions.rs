//! The text report's view of submissions: the per-label table of their
//! times (with the host's enqueue time where a backend measures it) and
//! the cross-check of each label's dispatch times against its submissions'.

use std::fmt::Write;

use kernelscope::profile::{DRIFT_FLAG_THRESHOLD, Profile, cross_check, submission_table};

use super::table::table;
use crate::tables::{ms, us};

/// The per-label submission table, longest total first.
pub(super) fn render_submissions(profile: &Profile, out: &mut String) {
    let table_rows = submission_table(&profile.submissions);
    if table_rows.is_empty() {
        return;
    }
    let _ = writeln!(out, "\nsubmissions by label (sorted by total):");
    // Backends that run work as it is committed (the CPU) have no separate enqueue.
    let enqueue_measured = table_rows.iter().any(|row| row.host_enqueue_ns > 0);
    let mut header = vec![
        "label", "count", "total ms", "min µs", "max µs", "p50 µs", "p95 µs",
    ];
    if enqueue_measured {
        header.push("host enqueue µs (mean)");
    }
    let rows = table_rows.into_iter().map(|row| {
        let mut cells = vec![
            row.label,
            row.count.to_string(),
            ms(row.total_ns),
            us(row.min_ns as f64),
            us(row.max_ns as f64),
            us(row.p50_ns as f64),
            us(row.p95_ns as f64),
        ];
        if enqueue_measured {
            cells.push(us(row.host_enqueue_ns as f64 / row.count as f64));
        }
        cells
    });
    let _ = writeln!(out, "{}", table(&header, rows));
}

/// One line per label: the dispatch sum against the submissions' time, the
/// drift between them (flagged past the threshold), and where the
/// difference went.
pub(super) fn render_cross_check(profile: &Profile, out: &mut String) {
    let checks = cross_check(profile);
    if checks.is_empty() {
        if !profile.submissions.is_empty() {
            let _ = writeln!(
                out,
                "\ncross-check: no per-dispatch times to check against submissions"
            );
        }
        return;
    }
    let _ = writeln!(out);
    for check in checks {
        let verdict = if check.flagged {
            format!(
                "FLAGGED: drift over {:.0}% means a measurement bug or idle gaps between dispatches",
                DRIFT_FLAG_THRESHOLD * 100.0
            )
        } else {
            "ok".to_string()
        };
        let _ = writeln!(
            out,
            "cross-check {}: dispatch sum {} ms vs submission {} ms over {} submissions, drift {:+.1}% (before the first dispatch {} ms, between and after dispatches {} ms) {verdict}",
            check.label,
            ms(check.dispatch_sum_ns),
            ms(check.submission_ns),
            check.submissions,
            check.drift * 100.0,
            ms(check.lead_ns),
            ms(check.gaps_ns)
        );
        if check.device_held > 0 {
            let _ = writeln!(
                out,
                "  {} of {} submissions held until fully enqueued (host enqueue {} ms in all): their time starts when the device could begin, not while the host was still launching",
                check.device_held,
                check.submissions,
                ms(check.host_enqueue_ns)
            );
        }
    }
}
