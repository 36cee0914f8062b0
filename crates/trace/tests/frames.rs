//! Record files round-trip, and a file cut anywhere (a process killed
//! mid-write) reads as the whole frames before the cut and says it was cut;
//! garbage ends the reading where it starts, naming it; kinds and versions
//! the reader does not know are skipped.

use kernelscope_trace::{
    ApiCall, Device, End, EndReason, Ending, ExternalCorrelation, Frame, Header, Kernel, Memcpy, Memset,
    NvtxRange, PmSample, Sync, TraceError, Writer, read,
};
use proptest::prelude::*;

fn header() -> Header {
    Header {
        pid: 4242,
        parent_pid: 7,
        command: vec!["python".into(), "serve.py".into(), "--model".into(), "x y".into()],
        rank: Some(1),
        local_rank: Some(1),
        world_size: Some(2),
        cupti_version: Some(130001),
        devices: vec!["cuda:0 NVIDIA H100 80GB HBM3 (sm_90)".into()],
    }
}

/// A xorshift generator: random fields, never all zeros.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn word(&mut self) -> u32 {
        self.next() as u32
    }
}

/// One record of every kind, its fields from `seed` (never all zeros).
fn records(seed: u64, name: u32, message: u32) -> Vec<Frame> {
    let mut random = Random(seed | 1);
    let kernel = Kernel {
        start_ns: random.next(),
        end_ns: random.next(),
        graph_node: random.next(),
        correlation: random.word(),
        name,
        device: random.word() % 8,
        context: random.word(),
        stream: random.word(),
        graph: random.word(),
        grid: [random.word(), random.word(), random.word()],
        block: [random.word(), random.word(), random.word()],
        registers: random.word() % 256,
        shared_bytes: random.word(),
    };
    vec![
        Frame::Kernel(kernel),
        Frame::Memcpy(Memcpy {
            start_ns: random.next(),
            end_ns: random.next(),
            bytes: random.next(),
            correlation: random.word(),
            copy_kind: 1,
            device: 0,
            context: random.word(),
            stream: random.word(),
            graph: 0,
        }),
        Frame::Memset(Memset {
            start_ns: random.next(),
            end_ns: random.next(),
            bytes: random.next(),
            correlation: random.word(),
            value: random.word() % 256,
            device: 1,
            context: random.word(),
            stream: random.word(),
            graph: random.word(),
        }),
        Frame::Sync(Sync {
            start_ns: random.next(),
            end_ns: random.next(),
            correlation: random.word(),
            sync_kind: 3,
            context: random.word(),
            stream: random.word(),
        }),
        Frame::ApiCall(ApiCall {
            start_ns: random.next(),
            end_ns: random.next(),
            thread: random.next(),
            range: random.next(),
            correlation: random.word(),
            callback: random.word(),
            domain: 1,
            what: 1 + random.word() % 4,
        }),
        Frame::ExternalCorrelation(ExternalCorrelation {
            external: random.next(),
            correlation: random.word(),
            external_kind: 2,
        }),
        Frame::NvtxRange(NvtxRange {
            start_ns: random.next(),
            end_ns: random.next(),
            thread: random.next(),
            id: random.next(),
            parent: random.next(),
            domain: 0,
            message,
            depth: random.word() % 4,
            stacked: 1,
        }),
        Frame::PmSample(PmSample {
            start_ns: random.next(),
            end_ns: random.next(),
            dram_read_bytes: random.next(),
            dram_write_bytes: random.next(),
            device: 0,
            padding: 0,
        }),
        Frame::Device(Device {
            memory_bytes: random.next(),
            ordinal: random.word() % 8,
            name: message,
            major: 9,
            minor: random.word() % 10,
            multiprocessors: 1 + random.word() % 200,
            padding: 0,
        }),
    ]
}

/// A file of `header`, two texts and `copies` rounds of every record, with
/// or without its end frame; and the frames written.
fn file(seed: u64, copies: usize, ended: bool) -> (Vec<u8>, Vec<Frame>) {
    let mut writer = Writer::new(Vec::new(), &header()).unwrap();
    let name = writer.text("_Z12matvec_bf16PKtPKfPfjj").unwrap();
    let message = writer.text("layer.3 ✓").unwrap();
    assert_eq!(
        writer.text("_Z12matvec_bf16PKtPKfPfjj").unwrap(),
        name,
        "each text sent once"
    );
    let mut written = Vec::new();
    for copy in 0..copies {
        for frame in records(seed.wrapping_add(copy as u64), name, message) {
            match &frame {
                Frame::Kernel(record) => writer.record(record),
                Frame::Memcpy(record) => writer.record(record),
                Frame::Memset(record) => writer.record(record),
                Frame::Sync(record) => writer.record(record),
                Frame::ApiCall(record) => writer.record(record),
                Frame::ExternalCorrelation(record) => writer.record(record),
                Frame::NvtxRange(record) => writer.record(record),
                Frame::PmSample(record) => writer.record(record),
                Frame::Device(record) => writer.record(record),
            }
            .unwrap();
            written.push(frame);
        }
    }
    let bytes = if ended {
        writer
            .end(&End {
                at_ns: 99,
                signal: 11,
                dropped: 3,
            })
            .unwrap()
    } else {
        // A process killed here: what it wrote is what there is.
        writer_sink(writer)
    };
    (bytes, written)
}

/// The bytes a writer has written, without an end frame.
fn writer_sink(writer: Writer<Vec<u8>>) -> Vec<u8> {
    // `end` is the only way to take the sink; write the end frame and cut it off.
    let bytes = writer.end(&End::default()).unwrap();
    let end_frame = kernelscope_trace::FRAME_HEADER_BYTES + std::mem::size_of::<End>();
    bytes[..bytes.len() - end_frame].to_vec()
}

#[test]
fn a_file_round_trips() {
    let (bytes, written) = file(17, 3, true);
    let trace = read(&bytes);
    assert_eq!(trace.header, Some(header()));
    assert_eq!(trace.frames, written);
    assert_eq!(trace.skipped, 0);
    let Ending::Ended(end) = trace.ending else {
        panic!("{:?}", trace.ending)
    };
    assert_eq!(end.reason(), EndReason::Signal(11));
    assert_eq!(end.dropped, 3);
    let Frame::Kernel(kernel) = &trace.frames[0] else {
        panic!()
    };
    assert_eq!(trace.text(kernel.name), "_Z12matvec_bf16PKtPKfPfjj");
    assert_eq!(trace.text(0), "");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Cut anywhere, a file reads as the whole frames before the cut.
    #[test]
    fn a_file_cut_anywhere_keeps_every_whole_frame(seed in any::<u64>(), cut_share in 0.0f64..1.0) {
        let (bytes, written) = file(seed, 2, true);
        let cut = ((bytes.len() as f64) * cut_share) as usize;
        let trace = read(&bytes[..cut]);
        prop_assert!(trace.frames.len() <= written.len());
        prop_assert_eq!(&trace.frames[..], &written[..trace.frames.len()]);
        match trace.ending {
            Ending::Cut { at } => prop_assert!(at <= cut),
            other => prop_assert!(false, "cut at {} of {}: {:?}", cut, bytes.len(), other),
        }
    }
}

#[test]
fn a_file_without_its_end_frame_says_it_was_cut_after_its_last_frame() {
    let (bytes, written) = file(5, 2, false);
    let trace = read(&bytes);
    assert_eq!(trace.frames, written);
    assert_eq!(trace.ending, Ending::Cut { at: bytes.len() });
}

#[test]
fn garbage_ends_the_reading_where_it_starts() {
    let (bytes, written) = file(9, 1, true);
    let first_record = {
        // Header, then two texts: the first record's offset.
        let mut at = 0;
        for _ in 0..3 {
            let length = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
            at += kernelscope_trace::FRAME_HEADER_BYTES + length;
        }
        at
    };
    let garbled = |edit: &dyn Fn(&mut Vec<u8>)| {
        let mut copy = bytes.clone();
        edit(&mut copy);
        read(&copy)
    };
    // A length past the limit.
    let trace =
        garbled(&|bytes| bytes[first_record..first_record + 4].copy_from_slice(&u32::MAX.to_le_bytes()));
    assert_eq!(
        trace.ending,
        Ending::Garbled {
            at: first_record,
            problem: "a frame longer than the limit"
        }
    );
    assert!(trace.frames.is_empty());
    // A known record of the wrong size (one byte short, the frame still whole).
    let trace = garbled(&|bytes| {
        let length = u32::from_le_bytes(bytes[first_record..first_record + 4].try_into().unwrap());
        bytes[first_record..first_record + 4].copy_from_slice(&(length - 1).to_le_bytes());
    });
    assert!(
        matches!(trace.ending, Ending::Garbled { at, problem: "a record of the wrong size" } if at == first_record),
        "{:?}",
        trace.ending
    );
    // Frames after the end frame.
    let trace = garbled(&|bytes| bytes.extend_from_slice(&[0; 16]));
    assert!(
        matches!(
            trace.ending,
            Ending::Garbled {
                problem: "frames after the end frame",
                ..
            }
        ),
        "{:?}",
        trace.ending
    );
    assert_eq!(trace.frames, written);
    // A header that is not JSON.
    let trace = garbled(&|bytes| bytes[8] = b'!');
    assert_eq!(
        trace.ending,
        Ending::Garbled {
            at: 0,
            problem: "a header that is not its JSON"
        }
    );
}

#[test]
fn unknown_kinds_and_versions_are_skipped() {
    let (bytes, written) = file(3, 1, true);
    let mut with_unknown = bytes[..bytes.len() - (8 + std::mem::size_of::<End>())].to_vec();
    // A kind from a later writer, then a kernel of a later layout version.
    for (kind, version) in [(900u16, 1u16), (3, 2)] {
        with_unknown.extend_from_slice(&5u32.to_le_bytes());
        with_unknown.extend_from_slice(&kind.to_le_bytes());
        with_unknown.extend_from_slice(&version.to_le_bytes());
        with_unknown.extend_from_slice(b"later");
    }
    with_unknown.extend_from_slice(&bytes[bytes.len() - (8 + std::mem::size_of::<End>())..]);
    let trace = read(&with_unknown);
    assert_eq!(trace.frames, written);
    assert_eq!(trace.skipped, 2);
    assert!(matches!(trace.ending, Ending::Ended(_)), "{:?}", trace.ending);
}

#[test]
fn a_frame_past_the_limit_is_refused_when_written() {
    let mut writer = Writer::new(Vec::new(), &header()).unwrap();
    let long = "x".repeat(kernelscope_trace::MAX_PAYLOAD_BYTES);
    let error = writer.text(&long).unwrap_err();
    assert!(
        matches!(error, TraceError::TooLong { kind: "text", .. }),
        "{error}"
    );
    assert!(error.to_string().contains("text frame"), "{error}");
}
