//! Profiles and record files that are not what they claim: a FIFO (which
//! would wait for a writer forever), random bytes, a torn header. Each is
//! refused at once, naming the file and what is wrong.

use crate::helpers::{Scratch, make_fifo, refused};

#[test]
fn fifos_and_garbage_are_refused_not_waited_on() {
    let scratch = Scratch::new("special-files");
    // A FIFO as the profile to report or compare.
    let fifo = scratch.0.join("profile.json");
    make_fifo(&fifo);
    let fifo = fifo.to_str().unwrap();
    refused(&["report", fifo], &[fifo, "not a regular file (a FIFO)"]);
    refused(&["compare", fifo, fifo], &[fifo, "a FIFO"]);
    // Record folders holding a FIFO, random bytes, a header frame cut short.
    let records = scratch.0.join("records");
    std::fs::create_dir(&records).unwrap();
    let folder = records.to_str().unwrap();
    let record = records.join("4242.kst");
    make_fifo(&record);
    refused(&["profile", "--from-records", folder], &["4242.kst", "a FIFO"]);
    std::fs::remove_file(&record).unwrap();
    let mut random = kernelscope::rng::SplitMix64::new(77);
    let garbage: Vec<u8> = (0..4096).map(|_| random.next_u64() as u8).collect();
    std::fs::write(&record, &garbage).unwrap();
    refused(
        &["profile", "--from-records", folder],
        &["4242.kst", "not a kscope record file", "at byte 0"],
    );
    // A header frame whose length says 40 bytes, of which 10 are there.
    let mut torn = 40u32.to_le_bytes().to_vec();
    torn.extend_from_slice(&[1, 0, 1, 0]);
    torn.extend_from_slice(&garbage[..10]);
    std::fs::write(&record, &torn).unwrap();
    refused(
        &["profile", "--from-records", folder],
        &["4242.kst", "not a kscope record file"],
    );
    // A whole record file whose kernel-name text frame is not UTF-8.
    let mut records_bytes = kernelscope::testing::program_records::program_records(
        &kernelscope::testing::program_records::ProgramShape::default(),
        5,
    );
    let name = kernelscope::testing::program_records::GRAPH_KERNEL_NAMES[1].as_bytes();
    let at = records_bytes
        .windows(name.len())
        .position(|window| window == name)
        .expect("the kernel's name is in the file");
    records_bytes[at] = 0xff;
    std::fs::write(&record, &records_bytes).unwrap();
    refused(
        &["profile", "--from-records", folder],
        &["4242.kst", "garbled at byte", "text that is not UTF-8"],
    );
}
