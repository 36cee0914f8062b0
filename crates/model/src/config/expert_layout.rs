//! Where a checkpoint keeps a sparse layer's experts. The engine holds
//! each layer's experts stacked (`[experts, rows, columns]`, gate and up
//! apart); checkpoints keep them one tensor per expert, as on the Hub and
//! as transformers' `save_pretrained` writes them (Qwen3-MoE's
//! `mlp.experts.E.gate_proj.weight`, Mixtral's
//! `block_sparse_moe.experts.E.w1.weight`), or stacked as transformers 5
//! holds them in memory (`mlp.experts.gate_up_proj` `[experts, 2 rows,
//! hidden]` with gate first, `mlp.experts.down_proj`). Both directions —
//! reading a checkpoint and writing a synthetic one — name tensors here.

use super::architecture::Architecture;
use super::model_config::Config;
use super::tensors::{LayerTensor, TensorRole, TensorSpec};

/// How a checkpoint stores experts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ExpertLayout {
    /// One tensor per expert and projection (the Hub's layout).
    #[default]
    PerExpert,
    /// `gate_up_proj` and `down_proj`, every expert stacked (transformers 5's
    /// in-memory layout).
    Stacked,
}

/// One piece of a stacked expert tensor as a checkpoint keeps it:
/// elements `start..start + length` of the file tensor `name` of `shape`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ExpertPiece {
    pub name: String,
    pub shape: Vec<usize>,
    pub start: usize,
    pub length: usize,
}

/// The per-expert name of projection `tensor` of expert `expert` in layer `layer`.
fn per_expert_name(architecture: Architecture, layer: usize, tensor: LayerTensor, expert: usize) -> String {
    let projection = match (architecture, tensor) {
        (Architecture::Mixtral, LayerTensor::ExpertGate) => "w1",
        (Architecture::Mixtral, LayerTensor::ExpertUp) => "w3",
        (Architecture::Mixtral, _) => "w2",
        (_, LayerTensor::ExpertGate) => "gate_proj",
        (_, LayerTensor::ExpertUp) => "up_proj",
        _ => "down_proj",
    };
    let block = if architecture == Architecture::Mixtral {
        "block_sparse_moe"
    } else {
        "mlp"
    };
    format!("model.layers.{layer}.{block}.experts.{expert}.{projection}.weight")
}

/// The names a layer's router may have, the layout's own first: Mixtral's
/// Hub files say `block_sparse_moe.gate`, transformers 5 `mlp.gate`.
pub(crate) fn router_names(architecture: Architecture, layer: usize, layout: ExpertLayout) -> [String; 2] {
    let modern = format!("model.layers.{layer}.mlp.gate.weight");
    if architecture == Architecture::Mixtral {
        let hub = format!("model.layers.{layer}.block_sparse_moe.gate.weight");
        match layout {
            ExpertLayout::PerExpert => [hub, modern],
            ExpertLayout::Stacked => [modern, hub],
        }
    } else {
        [modern.clone(), modern]
    }
}

impl Config {
    /// Where `layout` keeps the stacked expert tensor `tensor` of layer
    /// `layer`, in the order of the stacked tensor's elements.
    pub(crate) fn expert_pieces(
        &self,
        layer: usize,
        tensor: LayerTensor,
        layout: ExpertLayout,
    ) -> Vec<ExpertPiece> {
        let Some(experts) = &self.experts else {
            return Vec::new();
        };
        let (count, rows, hidden) = (experts.count, experts.intermediate_size, self.hidden_size);
        let matrix = rows * hidden;
        let matrix_shape = if tensor == LayerTensor::ExpertDown {
            vec![hidden, rows]
        } else {
            vec![rows, hidden]
        };
        match layout {
            ExpertLayout::PerExpert => (0..count)
                .map(|expert| ExpertPiece {
                    name: per_expert_name(self.architecture, layer, tensor, expert),
                    shape: matrix_shape.clone(),
                    start: 0,
                    length: matrix,
                })
                .collect(),
            ExpertLayout::Stacked if tensor == LayerTensor::ExpertDown => vec![ExpertPiece {
                name: format!("model.layers.{layer}.mlp.experts.down_proj"),
                shape: vec![count, hidden, rows],
                start: 0,
                length: count * matrix,
            }],
            ExpertLayout::Stacked => {
                let up_half = usize::from(tensor == LayerTensor::ExpertUp);
                (0..count)
                    .map(|expert| ExpertPiece {
                        name: format!("model.layers.{layer}.mlp.experts.gate_up_proj"),
                        shape: vec![count, 2 * rows, hidden],
                        start: (2 * expert + up_half) * matrix,
                        length: matrix,
                    })
                    .collect()
            }
        }
    }

    /// The tensors a checkpoint of this config in `layout` holds, in
    /// order, each with the runs of the engine's tensors it is made of
    /// (`(spec, start, length)` in the order of its elements): one whole
    /// tensor for everything but the experts.
    pub(crate) fn file_tensors(&self, layout: ExpertLayout) -> Vec<FileTensor> {
        let mut files: Vec<FileTensor> = Vec::new();
        // Stacked gate and up interleave in one file tensor: each run is
        // placed by its start there, then sorted.
        let mut placed: Vec<Vec<(usize, TensorSpec, usize, usize)>> = Vec::new();
        for spec in self.tensors() {
            let length: usize = spec.shape.iter().product();
            match spec.role {
                TensorRole::Layer { index, tensor } if tensor.is_stacked_experts() => {
                    let mut spec_start = 0;
                    for piece in self.expert_pieces(index, tensor, layout) {
                        let at = files
                            .iter()
                            .position(|file| file.name == piece.name)
                            .unwrap_or_else(|| {
                                files.push(FileTensor {
                                    name: piece.name.clone(),
                                    shape: piece.shape.clone(),
                                    sources: Vec::new(),
                                });
                                placed.push(Vec::new());
                                files.len() - 1
                            });
                        placed[at].push((piece.start, spec.clone(), spec_start, piece.length));
                        spec_start += piece.length;
                    }
                }
                TensorRole::Layer {
                    index,
                    tensor: LayerTensor::Router,
                } => {
                    let name = router_names(self.architecture, index, layout)[0].clone();
                    files.push(FileTensor {
                        name,
                        shape: spec.shape.clone(),
                        sources: Vec::new(),
                    });
                    placed.push(vec![(0, spec, 0, length)]);
                }
                _ => {
                    files.push(FileTensor {
                        name: spec.name.clone(),
                        shape: spec.shape.clone(),
                        sources: Vec::new(),
                    });
                    placed.push(vec![(0, spec, 0, length)]);
                }
            }
        }
        for (file, mut runs) in files.iter_mut().zip(placed) {
            runs.sort_by_key(|run| run.0);
            file.sources = runs
                .into_iter()
                .map(|(_, spec, start, length)| (spec, start, length))
                .collect();
        }
        files
    }
}

/// One tensor of a checkpoint file, made of runs of the engine's tensors.
#[derive(Clone, Debug)]
pub(crate) struct FileTensor {
    /// Its name in the file.
    pub name: String,
    /// Its shape in the file.
    pub shape: Vec<usize>,
    /// `(engine tensor, first element, elements)`, in the file's order.
    pub sources: Vec<(TensorSpec, usize, usize)>,
}
