//! Reading a profile file: refused when it is not a kernelscope profile,
//! is too large, of an unknown schema or does not hold together; older
//! schemas converted on the way in (`schema_3.rs`).

use std::io::Read;
use std::path::Path;

use super::CounterSnapshot;
use super::data::{PROFILE_SCHEMA_VERSION, Profile};
use crate::error::{Error, Result};

/// The largest profile file [`Profile::load`] reads (1 GiB: millions of
/// records, far more than any run writes).
pub const MAX_PROFILE_BYTES: u64 = 1 << 30;

impl Profile {
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
        // A profile of the current schema (or of schema 3) is read straight
        // into its structs: a JSON tree of a 600 MB profile first took
        // several times its size (and aborted under a 4 GB limit). Older
        // schemas go through the tree, where their upgrades rewrite it.
        serde_json::from_str::<serde::de::IgnoredAny>(text).map_err(|error| format!("not JSON: {error}"))?;
        // A struct also deserializes from a JSON array (`[1]` reads as
        // schema 1), and the older schemas' upgrades index the tree as an
        // object: refuse anything else here. The text is valid JSON, so its
        // first non-blank byte says what the top-level value is.
        if !text.trim_start().starts_with('{') {
            return Err("not a kernelscope profile: the top-level JSON value is not an object".into());
        }
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
            Some(old @ 1..=3) => super::schema_3::read(text, old)?,
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
