//! The versioned JSON profile: everything a run recorded plus the conditions
//! it ran under, so that two runs can be compared later (and refused when
//! they are not comparable).

use std::io::{Read, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{
    CounterSnapshot, DispatchRecord, DispatchTiming, ProfileLevel, SubmissionRecord, TimingMethod,
    TokenRecord,
};
use crate::error::{Error, Result};

/// The schema version written into every profile. Readers also accept
/// schema 2 (one copy bandwidth, no split of bytes into reads and writes)
/// and schema 1 (also timing methods as prose, enqueue fields on every
/// submission), converting them on load; they refuse any other.
pub const PROFILE_SCHEMA_VERSION: u32 = 3;

/// The largest profile file [`Profile::load`] reads (1 GiB: millions of
/// records, far more than any run writes).
pub const MAX_PROFILE_BYTES: u64 = 1 << 30;

/// The conditions a run was taken under.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Conditions {
    /// The device's name (`cpu: AMD EPYC 7B13 (2 threads)`, `cuda:0 NVIDIA H200`).
    pub device: String,
    /// The backend (`cpu`, `cuda`).
    pub backend: String,
    /// Driver version, where there is one.
    pub driver: Option<String>,
    /// `eager` (dispatch by dispatch) or `graph` (captured and replayed).
    pub mode: String,
    /// The profiling level.
    pub profiling: ProfileLevel,
    /// How submissions were timed.
    pub submission_timing: TimingMethod,
    /// Whether and how dispatches were timed.
    pub dispatch_timing: DispatchTiming,
    /// The model or workload, where there is one.
    pub model: Option<String>,
    /// The weights' format as people name it, where there is a model: a
    /// dtype (`bf16`) or a GGUF file's type (`Q4_K_M`, `Q8_0`). Absent from
    /// profiles written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_format: Option<String>,
    /// The model's shape, where there is a model: its architecture, layers,
    /// widths, heads and vocabulary (`llama: 16 layers, hidden 2048, ...`),
    /// whatever its weights' format. Two runs of one shape in different
    /// weight formats are one model in two formats. Absent from profiles
    /// written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_shape: Option<String>,
    /// The ceilings the roofline is drawn against (read, write and copy
    /// bandwidth, compute, the physical limits), each with its method.
    /// Profiles before schema 3 recorded a copy bandwidth and a compute rate
    /// only, and load with those as the copy and compute ceilings.
    #[serde(default)]
    pub ceilings: super::Ceilings,
    /// How the run was split over devices (tensor parallelism); absent for
    /// one device, and from profiles written before splits existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<super::Topology>,
    /// Whether kernels could begin before the one before them ended
    /// (programmatic dependent launch): their intervals on one stream may
    /// then overlap, which the cross-check otherwise flags. Absent (false)
    /// from profiles written before it was recorded.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub early_launch: bool,
    /// On a CPU, the instruction set its mat-vecs ran in
    /// (`cpu_simd::dot::describe`: `AVX-512 BF16 for bf16 weights (...),
    /// AVX2+FMA for the others; 8-bit integer products (quantized decode):
    /// ...`), set by
    /// whoever ran them; absent elsewhere and from profiles written before
    /// it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_kernels: Option<String>,
    /// The tokens timed, where not every token was (`--profile-tokens`):
    /// the others carry counters only. Absent when every token was timed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profiled_tokens: Option<super::TokenSelection>,
    /// How dispatch bytes were measured, where they were not declared
    /// (`kscope profile`: DRAM bytes by PM sampling every N µs); absent
    /// where dispatches declare their bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_measured: Option<String>,
    /// The program profiled from outside (`kscope profile -- CMD`): its
    /// command line, how its steps were found, how it ended. Absent for
    /// kscope's own runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<super::Program>,
    /// How the layers and roles of the dispatches were found (kscope's
    /// engine names them; a program's are found from its records, see
    /// [`annotate`](super::annotate)). Absent from profiles written before
    /// roles were recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anatomy: Option<String>,
}

impl Conditions {
    /// These conditions with the device's ceilings.
    pub fn with_ceilings(mut self, ceilings: super::Ceilings) -> Self {
        self.ceilings = ceilings;
        self
    }

    /// The roofline's ridge point in flops per byte (see
    /// [`Ceilings::ridge_point`](super::Ceilings::ridge_point)).
    pub fn ridge_point(&self) -> Option<f64> {
        self.ceilings.ridge_point()
    }

    /// The conditions that must match for two runs to be compared, as
    /// `name: a vs b` for each one that differs.
    pub fn differences(&self, other: &Conditions) -> Vec<String> {
        let mut differences = Vec::new();
        let mut check = |name: &str, a: &str, b: &str| {
            if a != b {
                differences.push(format!("{name}: {a} vs {b}"));
            }
        };
        check("device", &self.device, &other.device);
        check("backend", &self.backend, &other.backend);
        check("mode", &self.mode, &other.mode);
        check("profiling", self.profiling.name(), other.profiling.name());
        check(
            "driver",
            self.driver.as_deref().unwrap_or("none"),
            other.driver.as_deref().unwrap_or("none"),
        );
        check(
            "model",
            self.model.as_deref().unwrap_or("none"),
            other.model.as_deref().unwrap_or("none"),
        );
        let topology = |topology: &Option<super::Topology>| {
            topology
                .as_ref()
                .map_or_else(|| "one device".to_string(), super::Topology::describe)
        };
        check("topology", &topology(&self.topology), &topology(&other.topology));
        let program = |program: &Option<super::Program>| {
            program
                .as_ref()
                .map_or_else(|| "kscope's engine".to_string(), super::Program::name)
        };
        check("program", &program(&self.program), &program(&other.program));
        // The peaks are not compared: they are measured on the machine at
        // the start of each run, not chosen by the code under test, and
        // vary by a few percent between runs of the same device (the
        // comparison notes a large change, see `compare`).
        // Methods are compared as data (mechanism and revision), never by
        // their prose: a note such as why CUPTI was unavailable decides nothing.
        if self.submission_timing != other.submission_timing {
            differences.push(format!(
                "submission timing: {} vs {}",
                self.submission_timing, other.submission_timing
            ));
        }
        if !self.dispatch_timing.comparable_with(&other.dispatch_timing) {
            differences.push(format!(
                "dispatch timing: {} vs {}",
                self.dispatch_timing.describe(),
                other.dispatch_timing.describe()
            ));
        }
        differences
    }
}

/// A whole run's profile, as written to and read from JSON.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// Always [`PROFILE_SCHEMA_VERSION`].
    pub schema: u32,
    /// The tool and version that wrote it.
    pub tool: String,
    /// What the run ran on and how.
    pub conditions: Conditions,
    /// Counter totals over the run.
    pub counters: CounterSnapshot,
    /// Tokens, in order.
    pub tokens: Vec<TokenRecord>,
    /// Timed submissions, in order.
    pub submissions: Vec<SubmissionRecord>,
    /// Timed dispatches, in order.
    pub dispatches: Vec<DispatchRecord>,
    /// Warnings raised during the run (e.g. dispatch timing unsupported).
    pub warnings: Vec<String>,
    /// Every rank but rank 0 of a split run (rank 0's records are the ones
    /// above), on rank 0's clock; empty for one device.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranks: Vec<super::RankRecords>,
    /// A mixture-of-experts run's routing (absent for a dense model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experts: Option<super::ExpertRouting>,
}

impl Profile {
    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a profile is always serialisable")
    }

    /// Writes [`to_json`](Self::to_json)'s text to `writer` as it goes: a
    /// profile of millions of dispatches never stands whole in memory.
    pub fn write_json(&self, writer: impl std::io::Write) -> std::io::Result<()> {
        let mut writer = std::io::BufWriter::new(writer);
        serde_json::to_writer_pretty(&mut writer, self).map_err(std::io::Error::other)?;
        writer.flush()
    }

    /// Writes the profile as JSON to `path`.
    pub fn save(&self, path: &Path) -> Result<()> {
        let written = std::fs::File::create(path).and_then(|file| self.write_json(file));
        written.map_err(|source| Error::Io {
            context: format!("writing profile {}", path.display()),
            source,
        })
    }

    /// Reads a profile, refusing files that are not kernelscope profiles, are
    /// of another schema version or do not hold together (see
    /// [`from_json`](Self::from_json)), with a one-line message naming the file.
    pub fn load(path: &Path) -> Result<Profile> {
        let problem = |problem: String| Error::ProfileFile {
            path: path.to_path_buf(),
            problem,
        };
        // Opening a FIFO waits for a writer: what is not a plain file is
        // refused before it is opened.
        let metadata = std::fs::metadata(path).map_err(|error| problem(format!("cannot read: {error}")))?;
        if !metadata.is_file() {
            return Err(problem(format!(
                "not a regular file ({})",
                file_kind(&metadata.file_type())
            )));
        }
        let file = std::fs::File::open(path).map_err(|error| problem(format!("cannot read: {error}")))?;
        let text = read_at_most(file, MAX_PROFILE_BYTES).map_err(|error| match error {
            TooLarge::Io(error) => problem(format!("cannot read: {error}")),
            TooLarge::Past(limit) => {
                problem(format!("larger than the {} MiB a profile may have", limit >> 20))
            }
        })?;
        Self::from_json(&text, path)
    }

    /// Parses and checks a profile read from `path` (named in errors only):
    /// the one way in for profiles that did not come from this process, so
    /// everything after it (report, comparison, trace) can trust that every
    /// span ends at or after its start, every dispatch belongs to a
    /// submission that has it, and no sum of times, bytes, flops or counters
    /// passes `u64::MAX`. The error names the first record that fails.
    pub fn from_json(text: &str, path: &Path) -> Result<Profile> {
        Self::parse(text).map_err(|problem| Error::ProfileFile {
            path: path.to_path_buf(),
            problem,
        })
    }

    fn parse(text: &str) -> std::result::Result<Profile, String> {
        // A profile of the current schema is read straight into its structs:
        // a JSON tree of a 600 MB profile first took several times its size
        // (and aborted under a 4 GB limit). Older schemas go through the
        // tree, where their upgrades rewrite it.
        serde_json::from_str::<serde::de::IgnoredAny>(text).map_err(|error| format!("not JSON: {error}"))?;
        #[derive(serde::Deserialize)]
        struct SchemaOnly {
            schema: Option<serde_json::Value>,
        }
        let schema = serde_json::from_str::<SchemaOnly>(text)
            .ok()
            .and_then(|head| head.schema)
            .ok_or("not a kernelscope profile: no \"schema\" field")?;
        let profile: Profile = match schema.as_u64() {
            Some(version) if version == u64::from(PROFILE_SCHEMA_VERSION) => {
                serde_json::from_str(text).map_err(|error| format!("malformed profile: {error}"))?
            }
            Some(old @ (1 | 2)) => {
                let mut value: serde_json::Value =
                    serde_json::from_str(text).map_err(|error| format!("not JSON: {error}"))?;
                if old == 1 {
                    super::schema_1::upgrade(&mut value)?;
                }
                super::schema_2::upgrade(&mut value)?;
                serde_json::from_value(value).map_err(|error| format!("malformed profile: {error}"))?
            }
            _ => {
                return Err(format!(
                    "profile schema {schema} is not supported (this kscope reads schemas 1 to {PROFILE_SCHEMA_VERSION})"
                ));
            }
        };
        profile.check()?;
        profile.check_ranks()?;
        // Idle is derived from the dispatches: recomputed, never trusted
        // (a stored split 1 ns off by rounding is not an error).
        Ok(profile.with_idle())
    }

    /// Whether a split run's other ranks hold together: each checked like a
    /// profile of its own, numbered 1, 2, … in order, as many as the
    /// topology says.
    fn check_ranks(&self) -> std::result::Result<(), String> {
        match (&self.conditions.topology, self.ranks.len()) {
            (None, 0) => return Ok(()),
            (None, _) => return Err("ranks: present, but conditions.topology is absent".into()),
            (Some(topology), count)
                if topology.ranks != count + 1 || topology.devices.len() != topology.ranks =>
            {
                return Err(format!(
                    "conditions.topology: {} ranks and {} devices, but the profile holds {} ranks",
                    topology.ranks,
                    topology.devices.len(),
                    count + 1
                ));
            }
            _ => {}
        }
        for (position, records) in self.ranks.iter().enumerate() {
            if records.rank != position + 1 {
                return Err(format!(
                    "ranks[{position}]: rank {} where {} was due",
                    records.rank,
                    position + 1
                ));
            }
            let alone = Profile {
                counters: records.counters,
                tokens: records.tokens.clone(),
                submissions: records.submissions.clone(),
                dispatches: records.dispatches.clone(),
                ranks: Vec::new(),
                ..self.clone_header()
            };
            alone
                .check()
                .map_err(|problem| format!("ranks[{position}] (rank {}): {problem}", records.rank))?;
        }
        Ok(())
    }

    /// The profile's schema, tool, conditions and warnings, with no records.
    fn clone_header(&self) -> Profile {
        Profile {
            schema: self.schema,
            tool: self.tool.clone(),
            conditions: self.conditions.clone(),
            counters: CounterSnapshot::default(),
            tokens: Vec::new(),
            submissions: Vec::new(),
            dispatches: Vec::new(),
            warnings: self.warnings.clone(),
            ranks: Vec::new(),
            experts: None,
        }
    }

    /// This profile (rank 0's) joined by the other ranks' profiles of one
    /// split run, `others[i]` being rank i + 1's with its clock's offset
    /// from rank 0's (`offset_ns` added to its times puts them on rank 0's
    /// clock), under `topology`.
    pub fn with_ranks(mut self, topology: super::Topology, others: Vec<(Profile, i128)>) -> Profile {
        self.conditions.topology = Some(topology);
        for (position, (profile, offset_ns)) in others.into_iter().enumerate() {
            self.warnings.extend(
                profile
                    .warnings
                    .iter()
                    .filter(|warning| !self.warnings.contains(warning))
                    .cloned()
                    .collect::<Vec<_>>(),
            );
            self.ranks
                .push(super::RankRecords::from_profile(position + 1, profile, offset_ns));
        }
        self
    }

    /// How many tokens of `phase` there are and the sum of their counters;
    /// `None` without such tokens.
    pub fn phase_counters(&self, phase: super::Phase) -> Option<(usize, CounterSnapshot)> {
        let tokens = self.tokens.iter().filter(|token| token.phase == phase);
        // Saturating: a loaded profile's token counters were checked to add
        // up within u64, and live ones cannot come near it.
        let (count, sum) = tokens.fold((0, CounterSnapshot::default()), |(count, sum), token| {
            (count + 1, sum.saturating_add(token.counters))
        });
        (count > 0).then_some((count, sum))
    }

    /// The timed decode tokens (or, when none were marked as decode, every
    /// timed token): what per-token means are taken over. Tokens a token
    /// selection left untimed have no records and would count as zeros.
    pub fn repetition_tokens(&self) -> Vec<u32> {
        let timed = || self.tokens.iter().filter(|token| token.timed);
        let decode: Vec<u32> = timed()
            .filter(|token| token.phase == super::Phase::Decode)
            .map(|token| token.index)
            .collect();
        if decode.is_empty() {
            timed().map(|token| token.index).collect()
        } else {
            decode
        }
    }

    /// How many tokens were timed and how many there were in all.
    pub fn timed_tokens(&self) -> (usize, usize) {
        let timed = self.tokens.iter().filter(|token| token.timed).count();
        (timed, self.tokens.len())
    }
}

/// `text` for a one-line message: quoted, escaped, and cut after 60 characters.
pub(super) fn quoted(text: &str) -> String {
    const SHOWN: usize = 60;
    let shown: String = text.chars().take(SHOWN).collect();
    let ellipsis = if text.chars().nth(SHOWN).is_some() {
        "…"
    } else {
        ""
    };
    format!("\"{}{ellipsis}\"", shown.escape_debug())
}

/// Why [`read_at_most`] gave up.
enum TooLarge {
    /// Reading failed (including text that is not UTF-8).
    Io(std::io::Error),
    /// There was more than the limit.
    Past(u64),
}

/// All of `source` as text, or [`TooLarge::Past`] as soon as it has more
/// than `limit` bytes: a regular file is measured before it is read, and a
/// stream (a pipe, or a device such as /dev/zero) is read to one byte past
/// the limit at most, never until memory runs out.
fn read_at_most(source: std::fs::File, limit: u64) -> std::result::Result<String, TooLarge> {
    if let Ok(metadata) = source.metadata()
        && metadata.is_file()
        && metadata.len() > limit
    {
        return Err(TooLarge::Past(limit));
    }
    read_stream_at_most(source, limit)
}

fn read_stream_at_most(source: impl Read, limit: u64) -> std::result::Result<String, TooLarge> {
    let mut text = String::new();
    source
        .take(limit.saturating_add(1))
        .read_to_string(&mut text)
        .map_err(TooLarge::Io)?;
    if text.len() as u64 > limit {
        return Err(TooLarge::Past(limit));
    }
    Ok(text)
}

/// What a file that is not a regular one is, in words.
pub fn file_kind(kind: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_block_device() || kind.is_char_device() {
        "a device"
    } else {
        "not a plain file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endless_streams_are_cut_one_byte_past_the_limit() {
        let endless = std::io::repeat(b' ');
        assert!(matches!(
            read_stream_at_most(endless, 4096),
            Err(TooLarge::Past(4096))
        ));
        let exact = std::io::repeat(b'x').take(4096);
        assert_eq!(
            read_stream_at_most(exact, 4096).ok().map(|text| text.len()),
            Some(4096)
        );
        let binary: &[u8] = &[b'{', 0xff, 0xfe];
        assert!(matches!(read_stream_at_most(binary, 4096), Err(TooLarge::Io(_))));
    }
}
