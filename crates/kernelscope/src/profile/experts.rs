//! A mixture-of-experts run's routing in its profile: how many rows each
//! sparse layer sent to each expert (tallied by the router on the device,
//! read once when the profile is taken), what a routed row reads, and what
//! follows from them: each layer's load and imbalance, the bytes a token
//! actually touches, and each expert's share of its layer's time.

use serde::{Deserialize, Serialize};

use super::DispatchRecord;

/// The routing of a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExpertRouting {
    /// Experts in each sparse layer.
    pub experts: usize,
    /// Experts each row is routed to.
    pub per_token: usize,
    /// Bytes of one expert's weights as stored (gate, up and down): what a
    /// decoded token reads for each expert it is routed to.
    pub expert_bytes: u64,
    /// One entry per sparse layer, in order.
    pub layers: Vec<LayerRouting>,
}

/// One sparse layer's routing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LayerRouting {
    /// The decoder layer.
    pub layer: usize,
    /// Rows routed to each expert (`experts` entries).
    pub tokens: Vec<u64>,
}

impl LayerRouting {
    /// Rows routed in all (rows × experts per row).
    pub fn routed(&self) -> u64 {
        self.tokens.iter().sum()
    }

    /// Experts that took no row.
    pub fn idle(&self) -> usize {
        self.tokens.iter().filter(|&&count| count == 0).count()
    }

    /// The busiest expert and its rows (the lowest index on a tie).
    pub fn busiest(&self) -> (usize, u64) {
        self.tokens
            .iter()
            .copied()
            .enumerate()
            .fold(
                (0, 0),
                |best, (expert, count)| if count > best.1 { (expert, count) } else { best },
            )
    }

    /// The busiest expert's rows over the mean (1 is perfect balance; the
    /// layer's grouped GEMMs wait on the busiest expert).
    pub fn imbalance(&self) -> f64 {
        let mean = self.routed() as f64 / self.tokens.len().max(1) as f64;
        if mean == 0.0 {
            return 0.0;
        }
        self.busiest().1 as f64 / mean
    }
}

impl ExpertRouting {
    /// Checks the routing holds together: a row of tallies per layer, one
    /// per expert, layers in order, k of the experts per row.
    pub fn check(&self) -> Result<(), String> {
        if self.per_token == 0 || self.per_token > self.experts {
            return Err(format!(
                "experts: {} per token of {} experts",
                self.per_token, self.experts
            ));
        }
        for (position, layer) in self.layers.iter().enumerate() {
            if layer.tokens.len() != self.experts {
                return Err(format!(
                    "experts: layer {} has {} tallies for {} experts",
                    layer.layer,
                    layer.tokens.len(),
                    self.experts
                ));
            }
            if position > 0 && layer.layer <= self.layers[position - 1].layer {
                return Err(format!("experts: layer {} is out of order", layer.layer));
            }
            if !layer.routed().is_multiple_of(self.per_token as u64) {
                return Err(format!(
                    "experts: layer {} routed {} rows, not a multiple of {} per token",
                    layer.layer,
                    layer.routed(),
                    self.per_token
                ));
            }
        }
        Ok(())
    }

    /// Bytes of expert weights a decoded token reads: its `per_token`
    /// experts in every sparse layer.
    pub fn active_bytes_per_token(&self) -> u64 {
        self.expert_bytes * (self.per_token * self.layers.len()) as u64
    }

    /// Each expert's share of its layer's MLP time: the time of the
    /// dispatches in scope `layer.N.mlp` split over its experts in
    /// proportion to the rows routed to each (every routed row reads the
    /// same bytes of its expert, so rows are the work), as
    /// `(layer, expert, rows, ns)`, busiest first.
    pub fn apportioned_time(&self, dispatches: &[DispatchRecord]) -> Vec<(usize, usize, u64, u64)> {
        let mut mlp_ns = std::collections::HashMap::new();
        for dispatch in dispatches {
            let layer = dispatch
                .scope
                .strip_prefix("layer.")
                .and_then(|rest| rest.strip_suffix(".mlp"))
                .and_then(|number| number.parse::<usize>().ok());
            if let Some(layer) = layer {
                *mlp_ns.entry(layer).or_insert(0u64) += dispatch.end_ns.saturating_sub(dispatch.start_ns);
            }
        }
        let mut shares = Vec::new();
        for layer in &self.layers {
            let (routed, ns) = (layer.routed(), mlp_ns.get(&layer.layer).copied().unwrap_or(0));
            if routed == 0 {
                continue;
            }
            for (expert, &rows) in layer.tokens.iter().enumerate() {
                if rows > 0 {
                    let share = (u128::from(ns) * u128::from(rows) / u128::from(routed)) as u64;
                    shares.push((layer.layer, expert, rows, share));
                }
            }
        }
        shares.sort_by(|a, b| b.3.cmp(&a.3).then(a.0.cmp(&b.0)).then(a.1.cmp(&b.1)));
        shares
    }
}

/// The notes a comparison gives on two runs' routing: for each sparse layer
/// both have, the share of routed rows that went to other experts (half the
/// summed difference of the two runs' shares per expert: 0 when every
/// expert took the same share, 100 % when no expert is shared), worst
/// first, and a busiest expert that changed. Nothing where neither run has
/// routing; a note where only one has.
pub fn routing_changes(base: Option<&ExpertRouting>, new: Option<&ExpertRouting>) -> Vec<String> {
    let (base, new) = match (base, new) {
        (None, None) => return Vec::new(),
        (Some(_), None) | (None, Some(_)) => {
            return vec!["routing not compared: only one profile has a mixture of experts".into()];
        }
        (Some(base), Some(new)) => (base, new),
    };
    if base.experts != new.experts {
        return vec![format!(
            "routing not compared: {} experts against {}",
            base.experts, new.experts
        )];
    }
    let mut moved: Vec<(f64, String)> = Vec::new();
    for layer in &base.layers {
        let Some(other) = new.layers.iter().find(|other| other.layer == layer.layer) else {
            continue;
        };
        let (a, b) = (layer.routed().max(1) as f64, other.routed().max(1) as f64);
        let distance = 0.5
            * layer
                .tokens
                .iter()
                .zip(&other.tokens)
                .map(|(&x, &y)| (x as f64 / a - y as f64 / b).abs())
                .sum::<f64>();
        let (before, after) = (layer.busiest().0, other.busiest().0);
        let busiest = if before == after {
            String::new()
        } else {
            format!(", busiest expert e{before} → e{after}")
        };
        moved.push((
            distance,
            format!(
                "routing: layer.{} sent {:.1}% of its rows to other experts{busiest}",
                layer.layer,
                100.0 * distance
            ),
        ));
    }
    moved.sort_by(|x, y| y.0.total_cmp(&x.0));
    let changed = moved.iter().filter(|(distance, _)| *distance > 0.0).count();
    let mut notes: Vec<String> = moved
        .into_iter()
        .filter(|(distance, _)| *distance > 0.0)
        .take(5)
        .map(|(_, note)| note)
        .collect();
    if changed > notes.len() {
        notes.push(format!(
            "routing: {} more layers changed less",
            changed - notes.len()
        ));
    }
    if changed == 0 && !base.layers.is_empty() {
        notes.push("routing: every sparse layer sent the same share of rows to each expert".into());
    }
    notes
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::profile::OpKind;
    use crate::rng::SplitMix64;

    fn dispatch(scope: &str, start_ns: u64, end_ns: u64) -> DispatchRecord {
        DispatchRecord {
            label: Arc::from("decode"),
            submission: 0,
            index: 0,
            kernel: Arc::from("moe_down_add_bf16"),
            format: Some(Arc::from("bf16")),
            op_kind: OpKind::MatVec,
            scope: Arc::from(scope),
            stream: 0,
            token: Some(0),
            start_ns,
            end_ns,
            bytes: 1,
            bytes_written: 1,
            flops: 1,
            roles: Default::default(),
            measured_bytes: 0,
            in_kernel: None,
        }
    }

    /// Random tallies of `layers` layers, `k` choices per row over `rows` rows.
    fn routing(seed: u64, layers: usize, experts: usize, k: usize, rows: usize) -> ExpertRouting {
        let mut rng = SplitMix64::new(seed);
        let layers = (0..layers)
            .map(|layer| {
                let mut tokens = vec![0u64; experts];
                for _ in 0..rows * k {
                    tokens[(rng.next_u64() % experts as u64) as usize] += 1;
                }
                LayerRouting {
                    layer: 2 * layer + 1,
                    tokens,
                }
            })
            .collect();
        ExpertRouting {
            experts,
            per_token: k,
            expert_bytes: 3 * 768 * 2048 * 2,
            layers,
        }
    }

    #[test]
    fn load_figures_follow_the_tallies() {
        let routing = routing(7, 3, 16, 4, 50);
        assert!(routing.check().is_ok());
        for layer in &routing.layers {
            assert_eq!(layer.routed(), 200);
            let (busiest, rows) = layer.busiest();
            assert_eq!(layer.tokens[busiest], rows);
            assert!(layer.tokens.iter().all(|&count| count <= rows));
            assert!((layer.imbalance() - rows as f64 / (200.0 / 16.0)).abs() < 1e-12);
            assert_eq!(layer.idle(), layer.tokens.iter().filter(|&&c| c == 0).count());
        }
        assert_eq!(routing.active_bytes_per_token(), 3 * 4 * 3 * 768 * 2048 * 2);
    }

    #[test]
    fn each_layers_mlp_time_is_split_by_routed_rows() {
        let routing = routing(9, 2, 8, 2, 30);
        let dispatches = [
            dispatch("layer.1.mlp", 0, 600_000),
            dispatch("layer.1.mlp", 700_000, 1_000_000),
            dispatch("layer.1.attn", 1_000_000, 5_000_000),
            dispatch("layer.3.mlp", 5_000_000, 5_480_000),
        ];
        let shares = routing.apportioned_time(&dispatches);
        for layer in &routing.layers {
            let ns = if layer.layer == 1 { 900_000 } else { 480_000 };
            let mine: Vec<_> = shares.iter().filter(|share| share.0 == layer.layer).collect();
            assert_eq!(mine.len(), layer.tokens.iter().filter(|&&c| c > 0).count());
            for &&(_, expert, rows, share) in &mine {
                assert_eq!(rows, layer.tokens[expert]);
                assert_eq!(share, ns * rows / layer.routed());
            }
            let total: u64 = mine.iter().map(|share| share.3).sum();
            assert!(ns - total < mine.len() as u64, "rounding down only");
        }
        assert!(
            shares.windows(2).all(|pair| pair[0].3 >= pair[1].3),
            "busiest first"
        );
    }

    #[test]
    fn a_comparison_notes_how_much_routing_moved() {
        let base = routing(11, 3, 8, 2, 40);
        assert_eq!(
            routing_changes(Some(&base), Some(&base)),
            ["routing: every sparse layer sent the same share of rows to each expert"]
        );
        // Half of layer 3's rows of its busiest expert go to another.
        let mut new = base.clone();
        let layer = &mut new.layers[1];
        let (busiest, rows) = layer.busiest();
        let other = (busiest + 1) % 8;
        layer.tokens[busiest] -= rows / 2;
        layer.tokens[other] += rows / 2;
        let notes = routing_changes(Some(&base), Some(&new));
        let share = 100.0 * (rows / 2) as f64 / 80.0;
        assert!(
            notes[0].starts_with(&format!(
                "routing: layer.3 sent {share:.1}% of its rows to other experts"
            )),
            "{notes:?}"
        );
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert_eq!(
            routing_changes(Some(&base), None),
            ["routing not compared: only one profile has a mixture of experts"]
        );
        assert!(routing_changes(None, None).is_empty());
    }

    #[test]
    fn routing_that_does_not_hold_together_is_refused() {
        let mut short = routing(3, 2, 8, 2, 10);
        short.layers[1].tokens.pop();
        assert!(short.check().unwrap_err().contains("tallies"));
        let mut unordered = routing(3, 2, 8, 2, 10);
        unordered.layers[1].layer = 0;
        assert!(unordered.check().unwrap_err().contains("order"));
        let mut odd = routing(3, 2, 8, 2, 10);
        odd.layers[0].tokens[0] += 1;
        assert!(odd.check().unwrap_err().contains("multiple"));
        let mut too_many = routing(3, 2, 8, 2, 10);
        too_many.per_token = 9;
        assert!(too_many.check().is_err());
    }
}
