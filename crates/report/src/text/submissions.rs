//! The text report's view of submissions: the per-label table of their
//! times (with the host's enqueue time where a backend measures it) and
//! the cross-check of each label's dispatch clock against its submissions'.

use std::fmt::Write;

use kernelscope::profile::{CLOCK_RESOLUTION_NS, CrossCheck, Profile, cross_check, submission_table};

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

/// One line per label: whether the two clocks agree (and, where they do
/// not, how and where first), then the submissions held until enqueued.
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
        let _ = writeln!(out, "{}", cross_check_line(&check));
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

/// The cross-check of one label in a line: the verdict first.
pub(crate) fn cross_check_line(check: &CrossCheck) -> String {
    let mut line = format!(
        "cross-check {}: dispatch sum {} ms, device busy {} ms of {} ms over {} submissions (idle {:.1}%): ",
        check.label,
        ms(check.dispatch_sum_ns),
        ms(check.idle.busy_ns),
        ms(check.submission_ns),
        check.submissions,
        check.idle_share() * 100.0
    );
    if !check.flagged {
        line.push_str("the clocks agree");
        if check.largest_alignment_ns.unsigned_abs() > CLOCK_RESOLUTION_NS as u128 {
            let _ = write!(
                line,
                " (dispatch records sit inside their submissions once shifted {} µs {}: the two clocks' calibrations differ by that much)",
                us(check.largest_alignment_ns.unsigned_abs() as f64),
                if check.largest_alignment_ns > 0 {
                    "later"
                } else {
                    "earlier"
                }
            );
        }
        return line;
    }
    let found: Vec<String> = [
        (&check.longer_than_span, "span longer than their submission"),
        (&check.overlapping, "overlap on one serial stream"),
        (&check.outside, "sit outside their submission at any steady alignment of the clocks"),
    ]
    .into_iter()
    .filter(|(disagreement, _)| disagreement.seen())
    .map(|(disagreement, what)| {
        format!(
            "in {} submissions the dispatches {what} (worst {} µs beyond the clocks' resolution, first at submission {})",
            disagreement.submissions,
            us(disagreement.worst_ns as f64),
            disagreement.first_submission.unwrap_or_default()
        )
    })
    .collect();
    let _ = write!(
        line,
        "FLAGGED: the clocks disagree, so one of them is wrong: {}",
        found.join("; ")
    );
    line
}
