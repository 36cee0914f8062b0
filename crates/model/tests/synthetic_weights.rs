//! Preset weights made on the device (a kernel per tensor, each rank only
//! its share) hold exactly the bytes the CPU generator writes into a
//! checkpoint for the same elements of the whole tensors: rows, columns of
//! every row, vectors and whole tensors, in every weight dtype, on every
//! backend.

use kernelscope::testing::Backend;
use kernelscope::{Buffer, DType, DeviceOptions};
use kernelscope_model::synthetic::{encode, tensor_values_in};
use kernelscope_model::{FeedForward, Parallel, Partition, SyntheticOptions, Weights, preset};

/// The buffer's bytes (every tensor here has an even number of 16-bit elements).
fn bytes(buffer: &Buffer) -> Vec<u8> {
    buffer
        .reinterpret(DType::U32)
        .unwrap()
        .to_vec::<u32>()
        .unwrap()
        .into_iter()
        .flat_map(u32::to_le_bytes)
        .collect()
}

/// A tensor's name, its whole shape, this rank's buffer of it, and the
/// `(first element, length)` runs of the whole tensor the buffer holds.
type Check<'a> = (&'static str, Vec<usize>, &'a Buffer, Vec<(usize, usize)>);

fn device_generation_matches_the_cpu_generator(backend: Backend) {
    let Some(device) = backend.device(DeviceOptions::new()) else {
        return;
    };
    let config = preset("tiny-qwen2").unwrap();
    let (vocab, hidden, dim) = (config.vocab_size, config.hidden_size, config.head_dim);
    let query = config.num_heads * dim;
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for ranks in [1usize, 2, 4] {
            for rank in 0..ranks {
                let partition = Partition::new(&config, rank, ranks).unwrap();
                let seed = 40 + rank as u64;
                let options = SyntheticOptions {
                    dtype,
                    seed,
                    quiet: true,
                };
                let weights = Weights::synthetic(&config, &partition, &device, options).unwrap();
                let rows = |range: std::ops::Range<usize>, length: usize| {
                    vec![(range.start * length, range.len() * length)]
                };
                let query_columns = partition.query_heads.start * dim..partition.query_heads.end * dim;
                let layer = &weights.layers[1];
                // Each linear layer knows how it was split.
                let (outputs, inputs, vocabulary) = if ranks == 1 {
                    (Parallel::Whole, Parallel::Whole, Parallel::Whole)
                } else {
                    (
                        Parallel::SplitOutputs,
                        Parallel::SplitInputs,
                        Parallel::SplitVocabulary,
                    )
                };
                let FeedForward::Dense { gate, up, down } = &layer.feed_forward else {
                    panic!("a dense preset has a dense MLP");
                };
                for linear in [&layer.query, &layer.key, &layer.value, gate, up] {
                    assert_eq!(linear.parallel, outputs);
                }
                assert_eq!(layer.output.parallel, inputs);
                assert_eq!(down.parallel, inputs);
                assert_eq!(weights.lm_head.parallel, vocabulary);
                let checks: Vec<Check> = vec![
                    (
                        "model.embed_tokens.weight",
                        vec![vocab, hidden],
                        &weights.embedding,
                        rows(partition.vocabulary.clone(), hidden),
                    ),
                    (
                        "model.layers.1.self_attn.o_proj.weight",
                        vec![hidden, query],
                        &layer.output.weight,
                        (0..hidden)
                            .map(|row| (row * query + query_columns.start, query_columns.len()))
                            .collect(),
                    ),
                    (
                        "model.layers.1.mlp.gate_proj.weight",
                        vec![config.intermediate_size, hidden],
                        &gate.weight,
                        rows(partition.intermediate.clone(), hidden),
                    ),
                    (
                        "model.layers.1.self_attn.q_proj.bias",
                        vec![query],
                        layer.query.held_bias().unwrap(),
                        rows(query_columns.clone(), 1),
                    ),
                    (
                        "model.norm.weight",
                        vec![hidden],
                        &weights.final_norm,
                        vec![(0, hidden)],
                    ),
                ];
                for (name, shape, buffer, runs) in checks {
                    let expected = encode(&tensor_values_in(name, &shape, seed, &runs), dtype).unwrap();
                    assert!(
                        bytes(buffer) == expected,
                        "{name} ({dtype}, rank {rank} of {ranks}) differs from the CPU generator"
                    );
                }
            }
        }
    }
}

kernelscope::device_tests!(device_generation_matches_the_cpu_generator);

#[test]
fn the_counter_generator_is_the_sequential_one() {
    // The sequence itself, drawn one value after another, over more values
    // than one of tensor_values' parallel chunks.
    let name = "model.layers.0.mlp.up_proj.weight";
    let long = [300, 500];
    let generator = kernelscope_model::synthetic::TensorGenerator::new(name, &long, 9);
    let sequential =
        kernelscope::rng::SplitMix64::new(generator.seed).vec_f32(300 * 500, generator.low, generator.high);
    assert_eq!(
        kernelscope_model::synthetic::tensor_values(name, &long, 9),
        sequential
    );
    let shape = [37, 11];
    let whole = kernelscope_model::synthetic::tensor_values(name, &shape, 9);
    let counted = tensor_values_in(name, &shape, 9, &[(0, 37 * 11)]);
    assert_eq!(whole, counted);
    let columns = tensor_values_in(name, &shape, 9, &[(3, 4), (14, 4)]);
    assert_eq!(columns, [&whole[3..7], &whole[14..18]].concat());
}
