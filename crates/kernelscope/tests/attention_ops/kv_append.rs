//! KvAppend: each row written to its position in the key and value caches, nothing else touched.

use kernelscope::ops;
use kernelscope::ops::kv_append::KvAppend;
use kernelscope::testing::Backend;

use crate::helpers::{DTYPES, assert_close, device_for, download, random, rounded, upload};

fn kv_append_writes_exactly_its_rows(backend: Backend) {
    let Some(device) = device_for(backend) else {
        return;
    };
    let max_positions = 40;
    for dtype in DTYPES {
        let op = KvAppend::new(&ops::registry(), &device, dtype).unwrap();
        for kv_dim in [5, 32] {
            for targets in [vec![0usize], vec![39], vec![7, 2, 39]] {
                let rows = targets.len();
                let seed = (kv_dim * 100 + rows) as u64;
                let old_keys = random(seed, max_positions * kv_dim, -1.0, 1.0);
                let old_values = random(seed + 1, max_positions * kv_dim, -1.0, 1.0);
                let (key, value) = (
                    random(seed + 2, rows * kv_dim, 2.0, 3.0),
                    random(seed + 3, rows * kv_dim, -3.0, -2.0),
                );
                let key_cache = upload(&device, &old_keys, dtype, &[max_positions, kv_dim]);
                let value_cache = upload(&device, &old_values, dtype, &[max_positions, kv_dim]);
                // The positions sit after two unrelated slots, as the step buffer's do.
                let mut slots = vec![11u32, 12];
                slots.extend(targets.iter().map(|&t| t as u32));
                let positions = device.buffer_from_slice(&slots, &[slots.len()]).unwrap();
                let mut encoder = device.command_encoder();
                op.encode(
                    &mut encoder,
                    &device.buffer_from_slice(&key, &[rows, kv_dim]).unwrap(),
                    &device.buffer_from_slice(&value, &[rows, kv_dim]).unwrap(),
                    &key_cache,
                    &value_cache,
                    &positions,
                    2,
                )
                .unwrap();
                encoder.commit_and_wait().unwrap();
                let (mut expected_keys, mut expected_values) =
                    (rounded(&old_keys, dtype), rounded(&old_values, dtype));
                for (row, &target) in targets.iter().enumerate() {
                    let (source, destination) = (
                        row * kv_dim..(row + 1) * kv_dim,
                        target * kv_dim..(target + 1) * kv_dim,
                    );
                    expected_keys[destination.clone()].copy_from_slice(&rounded(&key[source.clone()], dtype));
                    expected_values[destination].copy_from_slice(&rounded(&value[source], dtype));
                }
                let what = format!("kv_append {dtype} kv_dim {kv_dim} rows {targets:?}");
                assert_close(
                    &download(&key_cache),
                    &expected_keys,
                    0.0,
                    0.0,
                    &format!("{what} keys"),
                );
                assert_close(
                    &download(&value_cache),
                    &expected_values,
                    0.0,
                    0.0,
                    &format!("{what} values"),
                );
            }
        }
    }
}

kernelscope::device_tests!(kv_append_writes_exactly_its_rows);
