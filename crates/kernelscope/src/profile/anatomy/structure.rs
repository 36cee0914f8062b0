//! A decoder token's structure found in its flat kernel sequence: the
//! layers (the sequence repeats once per layer: its period, the attention
//! kernel as each layer's anchor) and each kernel's role (by its class and
//! where it stands between the layer's landmarks: norms, projections,
//! attention). Works on any engine's kernels: llama.cpp's
//! (`rms_norm_f32`, `quantize_q8_1`, `mul_mat_vec_q`, `flash_attn_ext_vec`),
//! PyTorch's (cuBLAS GEMVs, Inductor's `triton_red_fused_..._rsqrt`) and
//! kscope's own seen from outside.

pub(crate) use super::classes::{Class, Unit};
use super::{Role, Roles};

/// One layer as it repeats: the kernels from its attention norm to its
/// last projection (and residual), found from one token.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Template {
    /// The symbols, from the layer's first kernel.
    pub symbols: Vec<u32>,
    /// Where the anchor (the layer's attention kernel, once per layer) is.
    pub anchor: usize,
    /// How many projections come after the anchor.
    pub projections_after: usize,
    /// How many kernels end the template after its last projection.
    pub trailing: usize,
    /// The class of its first kernel.
    pub first_class: Class,
}

/// The period of `symbols` and where its longest periodic run begins: the
/// period whose run covers most (ties to the shorter), among those that
/// repeat at least twice and whose block holds a kernel `anchor_ok` accepts.
pub(crate) fn period(symbols: &[u32], anchor_ok: impl Fn(&[u32]) -> bool) -> Option<(usize, usize)> {
    let n = symbols.len();
    let mut best: Option<(usize, usize, usize)> = None; // (coverage, period, start)
    for period in 3..=n / 2 {
        let (mut run, mut run_start, mut longest, mut longest_start) = (0usize, 0usize, 0usize, 0usize);
        for i in 0..n - period {
            if symbols[i] == symbols[i + period] {
                if run == 0 {
                    run_start = i;
                }
                run += 1;
                if run > longest {
                    longest = run;
                    longest_start = run_start;
                }
            } else {
                run = 0;
            }
        }
        if longest < period {
            continue;
        }
        let coverage = longest + period;
        if best.is_none_or(|(covered, _, _)| coverage > covered)
            && anchor_ok(&symbols[longest_start..longest_start + period])
        {
            best = Some((coverage, period, longest_start));
        }
    }
    best.map(|(_, period, start)| (period, start))
}

/// The layer template of one token's units: the period found, turned to
/// begin at the layer's attention norm.
pub(crate) fn template(units: &[Unit]) -> Option<Template> {
    let symbols: Vec<u32> = units.iter().map(|unit| unit.symbol).collect();
    let class_of = |symbol: u32| {
        units
            .iter()
            .find(|unit| unit.symbol == symbol)
            .map_or(Class::Other, |unit| unit.class)
    };
    // The anchor: an attention kernel that occurs once in the block.
    let anchor_in = |block: &[u32]| {
        block.iter().position(|&symbol| {
            class_of(symbol) == Class::Attention
                && block.iter().filter(|&&other| other == symbol).count() == 1
        })
    };
    let (period, start) = period(&symbols, |block| anchor_in(block).is_some())?;
    let block = &symbols[start..start + period];
    let anchor = anchor_in(block)?;
    let at = |offset: usize| block[(anchor + offset) % period];
    // Forward from the anchor: the first projection (the output
    // projection), the norm after it (the MLP's), the projections after
    // that, and the next norm: the attention norm, where a layer begins.
    let mut layer_start = None;
    let mut seen_projection = false;
    let mut seen_mlp_norm = false;
    let mut seen_mlp_projection = false;
    for offset in 1..period {
        match class_of(at(offset)) {
            Class::Projection if !seen_mlp_norm => seen_projection = true,
            Class::Projection => seen_mlp_projection = true,
            Class::Norm if seen_projection && !seen_mlp_norm => seen_mlp_norm = true,
            Class::Norm if seen_mlp_projection => {
                layer_start = Some((anchor + offset) % period);
                break;
            }
            _ => {}
        }
    }
    let layer_start = layer_start.unwrap_or_else(|| start_without_norms(block, anchor, &class_of));
    let symbols: Vec<u32> = (0..period)
        .map(|offset| block[(layer_start + offset) % period])
        .collect();
    let anchor = (anchor + period - layer_start) % period;
    let projections_after = symbols[anchor + 1..]
        .iter()
        .filter(|&&symbol| class_of(symbol) == Class::Projection)
        .count();
    let trailing = symbols
        .iter()
        .rev()
        .take_while(|&&symbol| class_of(symbol) != Class::Projection)
        .count();
    let first_class = class_of(symbols[0]);
    Some(Template {
        symbols,
        anchor,
        projections_after,
        trailing,
        first_class,
    })
}

/// Where a layer begins in a block that has no norm kernels (a norm
/// written as elementwise kernels): after the projection that comes
/// before the last run of other kernels before the q/k/v projection, and
/// after the residual add that follows that projection.
fn start_without_norms(block: &[u32], anchor: usize, class_of: &impl Fn(u32) -> Class) -> usize {
    let period = block.len();
    let back = |offset: usize| block[(anchor + period - offset) % period];
    // Back from the anchor to the q/k/v projection, then to the projection before it.
    let qkv = (1..period).find(|&offset| class_of(back(offset)) == Class::Projection);
    let Some(qkv) = qkv else { return anchor };
    let previous = (qkv + 1..period).find(|&offset| class_of(back(offset)) == Class::Projection);
    let Some(previous) = previous else {
        return (anchor + period - qkv) % period;
    };
    // The residual add after the previous projection stays with it.
    (anchor + period - previous + 2) % period
}

/// The layer each unit of a token is in (`None`: before the first layer or
/// after the last), by `template`: one layer per anchor. A layer ends
/// with as many projections after its anchor as the template has (and
/// the kernels the template ends with after its last projection, such as
/// a residual add); the next begins right after. The first begins at the
/// first kernel of the template's first kernel's class (a norm) before
/// its anchor. Counting projections rather than matching names keeps
/// layers whose kernels are named apart (Inductor numbers each fused
/// kernel) in step.
pub(crate) fn layers(units: &[Unit], template: &Template) -> Vec<Option<usize>> {
    let anchor_symbol = template.symbols[template.anchor];
    let anchors: Vec<usize> = units
        .iter()
        .enumerate()
        .filter(|(_, unit)| unit.symbol == anchor_symbol)
        .map(|(position, _)| position)
        .collect();
    let mut of_unit = vec![None; units.len()];
    let Some(&first_anchor) = anchors.first() else {
        return of_unit;
    };
    let end_of_layer = |anchor: usize, limit: usize| {
        let mut end = anchor;
        let mut projections = 0;
        for (position, unit) in units.iter().enumerate().take(limit).skip(anchor + 1) {
            if projections == template.projections_after {
                break;
            }
            if unit.class == Class::Projection {
                projections += 1;
            }
            end = position;
        }
        for &symbol in &template.symbols[template.symbols.len() - template.trailing..] {
            if end + 1 < limit && units[end + 1].symbol == symbol {
                end += 1;
            } else {
                break;
            }
        }
        end
    };
    let first_start = if template.first_class == Class::Norm {
        (0..=first_anchor).find(|&position| units[position].class == Class::Norm)
    } else {
        (0..=first_anchor).find(|&position| units[position].symbol == template.symbols[0])
    }
    .unwrap_or_else(|| first_anchor.saturating_sub(template.anchor));
    let mut start = first_start;
    for (layer, &anchor) in anchors.iter().enumerate() {
        let next_anchor = anchors.get(layer + 1).copied().unwrap_or(units.len());
        let end = end_of_layer(anchor, next_anchor);
        for slot in &mut of_unit[start.min(anchor)..=end] {
            *slot = Some(layer);
        }
        start = end + 1;
    }
    of_unit
}

/// The roles of one layer's units, by where each stands between the
/// layer's landmarks: the attention norm before the first projection; the
/// q/k/v projections and what runs between them and attention (rope, the
/// cache write, per-head norms); attention; the output projection and its
/// residual; the MLP norm; the gate/up projections and their activation,
/// or a router and experts; the down projection and its residual.
pub(crate) fn layer_roles(units: &[Unit]) -> Vec<Roles> {
    let quantize = |unit: &Unit, role: Role| {
        let roles = match unit.class {
            Class::Quantize => Roles::one(Role::ActivationQuantization),
            _ => Roles::one(role),
        };
        let roles = match (unit.normalises, role) {
            (true, Role::QkvProjection) => roles.with(Role::AttentionNorm),
            (true, Role::GateUp | Role::Router) => roles.with(Role::MlpNorm),
            _ => roles,
        };
        if unit.quantizes && unit.class != Class::Quantize {
            roles.with(Role::ActivationQuantization)
        } else {
            roles
        }
    };
    let Some(first_attention) = units.iter().position(|unit| unit.class == Class::Attention) else {
        return units.iter().map(|unit| quantize(unit, Role::Other)).collect();
    };
    let last_attention = units
        .iter()
        .rposition(|unit| unit.class == Class::Attention)
        .expect("one at least");
    let mut roles = vec![Roles::NONE; units.len()];
    let first_projection = units[..first_attention]
        .iter()
        .position(|unit| unit.class == Class::Projection);
    let last_projection = units[..first_attention]
        .iter()
        .rposition(|unit| unit.class == Class::Projection);
    for (position, unit) in units[..first_attention].iter().enumerate() {
        let role = match (first_projection, last_projection) {
            (Some(first), Some(last)) if position >= first => match unit.class {
                Class::Projection => Role::QkvProjection,
                // A norm that feeds another of the projections (kscope
                // normalises once per weight format) is the attention
                // norm; one after them (Qwen3's per-head q/k norms) is not.
                Class::Norm if position < last => Role::AttentionNorm,
                _ => Role::RopeKvWrite,
            },
            _ => Role::AttentionNorm,
        };
        roles[position] = quantize(unit, role);
    }
    // After attention: projections (a split-K reduction joins the one before it).
    let projections: Vec<usize> = (last_attention + 1..units.len())
        .filter(|&position| {
            units[position].class == Class::Projection && !units[position].finishes_projection
        })
        .collect();
    let Some(&output) = projections.first() else {
        for position in first_attention..units.len() {
            roles[position] = quantize(&units[position], Role::Attention);
        }
        return roles;
    };
    for position in first_attention..output {
        roles[position] = quantize(&units[position], Role::Attention);
    }
    let mlp_first = projections.get(1).copied().unwrap_or(units.len());
    // Between the output projection and the MLP's first projection: the
    // residual add, then the MLP norm (from the first norm kernel; where
    // no kernel is named a norm, all but the first).
    let mlp_norm_from = (output + 1..mlp_first)
        .find(|&position| units[position].class == Class::Norm)
        .unwrap_or_else(|| {
            if mlp_first - output > 2 {
                output + 2
            } else {
                output + 1
            }
        });
    for position in output..mlp_first {
        let role = if position < mlp_norm_from {
            Role::OutputProjection
        } else {
            Role::MlpNorm
        };
        roles[position] = quantize(&units[position], role);
    }
    if mlp_first == units.len() {
        return roles;
    }
    let down = *projections.last().expect("two at least");
    let routing = (mlp_first..units.len()).find(|&position| units[position].routes);
    for position in mlp_first..units.len() {
        let role = match routing {
            Some(routing) => {
                let routed_from = (routing..units.len())
                    .find(|&after| units[after].class == Class::Projection)
                    .unwrap_or(units.len());
                if position < routed_from {
                    Role::Router
                } else {
                    Role::Experts
                }
            }
            None if position < down => Role::GateUp,
            None => Role::Down,
        };
        roles[position] = quantize(&units[position], role);
    }
    roles
}

/// The roles of the units before the first layer: the embedding, and
/// whatever else the program runs first.
pub(crate) fn head_roles(units: &[Unit]) -> Vec<Roles> {
    units
        .iter()
        .map(|unit| {
            Roles::one(match unit.class {
                Class::Embedding => Role::Embedding,
                Class::Quantize => Role::ActivationQuantization,
                _ => Role::Other,
            })
        })
        .collect()
}

/// The roles of the units after the last layer: the final norm, the LM
/// head (the first projection), and sampling after it.
pub(crate) fn tail_roles(units: &[Unit]) -> Vec<Roles> {
    let head = units.iter().position(|unit| unit.class == Class::Projection);
    units
        .iter()
        .enumerate()
        .map(|(position, unit)| {
            let role = match (unit.class, head) {
                (Class::Transfer, _) => Role::Other,
                (Class::Quantize, _) => Role::ActivationQuantization,
                (Class::Projection, _) => Role::LmHead,
                (Class::Norm, Some(head)) if position < head => Role::FinalNorm,
                (Class::Sample, _) => Role::Sampling,
                (_, Some(head)) if position > head => Role::Sampling,
                _ => Role::Other,
            };
            let roles = Roles::one(role);
            let roles = if unit.normalises && role == Role::LmHead {
                roles.with(Role::FinalNorm)
            } else {
                roles
            };
            if unit.quantizes && role == Role::FinalNorm {
                roles.with(Role::ActivationQuantization)
            } else {
                roles
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::anatomy::classes::symbol_name;
    use crate::rng::SplitMix64;

    /// A unit of `class` named `name`, interned in `names`.
    fn unit(names: &mut Vec<String>, name: &str, class: Class) -> Unit {
        let symbol = match names.iter().position(|known| known == name) {
            Some(position) => position,
            None => {
                names.push(name.to_string());
                names.len() - 1
            }
        } as u32;
        Unit {
            symbol,
            class,
            quantizes: false,
            routes: false,
            finishes_projection: false,
            normalises: false,
        }
    }

    /// A random decoder token: a random head, `layers` copies of a random
    /// layer (norm, one to three q/k/v projections with random kernels
    /// between, attention of one or two kernels, the output projection,
    /// the MLP norm, one or two gate/up projections with an activation,
    /// the down projection), then a final norm, the LM head and sampling.
    /// Returns the units and where each layer begins.
    fn random_token(rng: &mut SplitMix64, layers: usize) -> (Vec<Unit>, Vec<usize>) {
        let mut names = Vec::new();
        let tag = rng.next_u64() % 1000;
        let name = |what: &str| format!("{what}_{tag}");
        let mut units = Vec::new();
        for head in 0..rng.next_u64() % 3 {
            units.push(unit(&mut names, &name(&format!("head{head}")), Class::Other));
        }
        let qkv = 1 + (rng.next_u64() % 3) as usize;
        let between = (rng.next_u64() % 3) as usize;
        let attention = 1 + (rng.next_u64() % 2) as usize;
        let gate_up = 1 + (rng.next_u64() % 2) as usize;
        let mut starts = Vec::new();
        for _ in 0..layers {
            starts.push(units.len());
            units.push(unit(&mut names, &name("norm"), Class::Norm));
            for projection in 0..qkv {
                units.push(unit(
                    &mut names,
                    &name(&format!("gemv{projection}")),
                    Class::Projection,
                ));
                for other in 0..between {
                    units.push(unit(&mut names, &name(&format!("rope{other}")), Class::Other));
                }
            }
            for part in 0..attention {
                units.push(unit(
                    &mut names,
                    &name(&format!("attention{part}")),
                    Class::Attention,
                ));
            }
            units.push(unit(&mut names, &name("gemv_o"), Class::Projection));
            units.push(unit(&mut names, &name("norm"), Class::Norm));
            for projection in 0..gate_up {
                units.push(unit(
                    &mut names,
                    &name(&format!("gemv_up{projection}")),
                    Class::Projection,
                ));
            }
            units.push(unit(&mut names, &name("silu"), Class::Other));
            units.push(unit(&mut names, &name("gemv_down"), Class::Projection));
        }
        units.push(unit(&mut names, &name("norm"), Class::Norm));
        units.push(unit(&mut names, &name("gemv_head"), Class::Projection));
        for sample in 0..rng.next_u64() % 3 {
            units.push(unit(&mut names, &name(&format!("argmax{sample}")), Class::Sample));
        }
        (units, starts)
    }

    #[test]
    fn random_decoders_split_into_exactly_their_layers() {
        let mut rng = SplitMix64::new(0x6a9);
        for case in 0..200 {
            let layers = 2 + (rng.next_u64() % 39) as usize;
            let (units, starts) = random_token(&mut rng, layers);
            let template = template(&units).unwrap_or_else(|| panic!("case {case}: no template"));
            let found = super::layers(&units, &template);
            let numbered: Vec<usize> = found.iter().flatten().copied().collect();
            assert_eq!(
                numbered.iter().max().map(|last| last + 1),
                Some(layers),
                "case {case}: {layers} layers"
            );
            for (layer, &start) in starts.iter().enumerate() {
                assert_eq!(
                    found[start],
                    Some(layer),
                    "case {case}: layer {layer} starts at {start}"
                );
                if start > 0 {
                    assert_ne!(
                        found[start - 1],
                        Some(layer),
                        "case {case}: layer {layer} starts early"
                    );
                }
            }
            // The final norm and the LM head are outside every layer.
            let head = units
                .iter()
                .rposition(|unit| unit.class == Class::Projection)
                .unwrap();
            assert_eq!(found[head], None, "case {case}");
            assert_eq!(found[head - 1], None, "case {case}");
        }
    }

    #[test]
    fn symbols_drop_template_arguments_and_compiler_numbers() {
        assert_eq!(symbol_name("mul_mat_vec_q<(ggml_type)12, 1>"), "mul_mat_vec_q<>");
        assert_eq!(symbol_name("mul_mat_vec_q<(ggml_type)14, 1>"), "mul_mat_vec_q<>");
        assert_eq!(
            symbol_name("triton_red_fused__to_copy_add_mean_rsqrt_17"),
            "triton_red_fused__to_copy_add_mean_rsqrt"
        );
        assert_eq!(symbol_name("sm90_gemm_128x64"), "sm90_gemm_128x64");
    }
}
