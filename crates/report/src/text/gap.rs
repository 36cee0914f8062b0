//! The gap account as text: per role, per decode token, both engines side
//! by side with the difference and its share of the measured difference
//! (GB/s and % of the read ceiling where bytes are known), the idle and
//! unattributed rows, the total; then per layer; then the slowest kernels
//! of the rows that differ most (a phase of a kernel timed inside it
//! marked †).

use std::fmt::Write;

use kernelscope::profile::{GapAccount, GapRow, GapSide};

use super::table::table;
use crate::in_kernel::IN_KERNEL_NOTE;
use crate::summary::IN_KERNEL_MARK;

fn us(value: f64) -> String {
    format!("{value:.1}")
}

fn signed(value: f64) -> String {
    format!("{value:+.1}")
}

fn share(part: f64, whole: f64) -> String {
    if whole.abs() > 1e-9 {
        format!("{:.1}%", 100.0 * part / whole)
    } else {
        "-".into()
    }
}

/// GB/s and % of the read ceiling for bytes moved in µs.
fn rate(bytes: Option<f64>, us_per_token: f64, side: &GapSide) -> String {
    match bytes {
        Some(bytes) if us_per_token > 0.0 => {
            let gbps = bytes / (us_per_token * 1e3);
            match side.read_ceiling_gbps {
                Some(ceiling) if ceiling > 0.0 => format!("{gbps:.0} ({:.0}%)", 100.0 * gbps / ceiling),
                _ => format!("{gbps:.0}"),
            }
        }
        _ => "-".into(),
    }
}

fn name(side: &GapSide) -> String {
    match &side.weight_format {
        Some(format) => format!("{} ({format})", side.program),
        None => side.program.clone(),
    }
}

/// The account as text.
pub fn render_gap_account(account: &GapAccount) -> String {
    let mut out = String::new();
    let (base, new) = (name(&account.base), name(&account.new));
    let difference = account.total.new_us_per_token - account.total.base_us_per_token;
    let _ = writeln!(
        out,
        "gap account, per decode token: base {base} {:.1} µs ({} tokens, {} layers), new {new} {:.1} µs ({} tokens, {} layers): new {} by {:.1} µs ({:+.1}%)",
        account.total.base_us_per_token,
        account.base.tokens,
        account.layers.base,
        account.total.new_us_per_token,
        account.new.tokens,
        account.layers.new,
        if difference > 0.0 { "slower" } else { "faster" },
        difference.abs(),
        if account.total.base_us_per_token > 0.0 {
            100.0 * difference / account.total.base_us_per_token
        } else {
            0.0
        }
    );
    for note in &account.notes {
        let _ = writeln!(out, "note: {note}");
    }
    let header = [
        "role",
        "base µs",
        "new µs",
        "new − base",
        "share of gap",
        "base calls",
        "new calls",
        "base GB/s (% read ceiling)",
        "new GB/s (% read ceiling)",
    ];
    let row = |row: &GapRow| {
        vec![
            if row.merged_from.is_empty() {
                row.role.clone()
            } else {
                format!("{} [merged]", row.role)
            },
            us(row.base_us_per_token),
            us(row.new_us_per_token),
            signed(row.difference()),
            share(row.difference(), difference),
            format!("{:.1}", row.base_calls_per_token),
            format!("{:.1}", row.new_calls_per_token),
            rate(row.base_bytes_per_token, row.base_us_per_token, &account.base),
            rate(row.new_bytes_per_token, row.new_us_per_token, &account.new),
        ]
    };
    let plain = |label: &str, base_value: f64, new_value: f64| {
        let mut cells = vec![
            label.to_string(),
            us(base_value),
            us(new_value),
            signed(new_value - base_value),
            share(new_value - base_value, difference),
        ];
        cells.extend(["".to_string(), "".to_string(), "".to_string(), "".to_string()]);
        cells
    };
    let (base_sum, new_sum) = account.sums();
    let mut rows: Vec<Vec<String>> = account.roles.iter().map(row).collect();
    rows.push(plain(
        "idle inside a token",
        account.idle.base_us_per_token,
        account.idle.new_us_per_token,
    ));
    rows.push(plain(
        "unattributed",
        account.unattributed.base_us_per_token,
        account.unattributed.new_us_per_token,
    ));
    rows.push(plain(
        "measured token",
        account.total.base_us_per_token,
        account.total.new_us_per_token,
    ));
    let _ = writeln!(out, "\nper role (µs per decode token, largest difference first):");
    let _ = writeln!(out, "{}", table(&header, rows));
    let _ = writeln!(
        out,
        "the rows add up to {base_sum:.1} µs (base) and {new_sum:.1} µs (new) of the measured {:.1} and {:.1}",
        account.total.base_us_per_token, account.total.new_us_per_token
    );
    for row in account.roles.iter().filter(|row| !row.merged_from.is_empty()) {
        let _ = writeln!(
            out,
            "merged: {} (one kernel does them together: {})",
            row.merged_from.join(", "),
            row.merged_because.join("; ")
        );
    }
    if let Some(biggest) = account.biggest() {
        let _ = writeln!(
            out,
            "biggest: {} ({:+.1} µs per token, {} of the difference)",
            biggest.role,
            biggest.difference(),
            share(biggest.difference(), difference)
        );
    }
    let layers = account
        .per_layer
        .iter()
        .map(|layer| {
            vec![
                layer.layer.clone(),
                us(layer.base_us_per_token),
                us(layer.new_us_per_token),
                signed(layer.new_us_per_token - layer.base_us_per_token),
                share(layer.new_us_per_token - layer.base_us_per_token, difference),
            ]
        })
        .collect::<Vec<_>>();
    let _ = writeln!(out, "\nper layer (µs per decode token):");
    let _ = writeln!(
        out,
        "{}",
        table(
            &["layer", "base µs", "new µs", "new − base", "share of gap"],
            layers
        )
    );
    for kernels in &account.top_kernels {
        let _ = writeln!(out, "\nslowest kernels of {}:", kernels.role);
        let rows = [("base", &kernels.base), ("new", &kernels.new)]
            .into_iter()
            .flat_map(|(side, list)| {
                list.iter().map(move |kernel| {
                    let mut name: String = kernel.kernel.chars().take(90).collect();
                    if kernel.in_kernel {
                        name = format!("{name} {IN_KERNEL_MARK}");
                    }
                    vec![
                        side.to_string(),
                        name,
                        us(kernel.us_per_token),
                        format!("{:.1}", kernel.calls_per_token),
                    ]
                })
            })
            .collect::<Vec<_>>();
        let _ = writeln!(
            out,
            "{}",
            table(&["side", "kernel", "µs/token", "calls/token"], rows)
        );
    }
    let phases = account
        .top_kernels
        .iter()
        .flat_map(|kernels| kernels.base.iter().chain(&kernels.new))
        .any(|kernel| kernel.in_kernel);
    if phases {
        let _ = writeln!(out, "{IN_KERNEL_NOTE}");
    }
    out
}
