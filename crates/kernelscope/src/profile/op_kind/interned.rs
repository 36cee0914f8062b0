//! The names of op kinds this build does not know, kept for the life of the
//! process so that an unknown kind stays `Copy` (a `&'static str`) and
//! reading its name takes no lock. Names come from untrusted profiles, so
//! they are bounded: in length and characters, and in how many distinct
//! ones the table grows to.

use std::collections::BTreeSet;
use std::sync::{Mutex, PoisonError};

/// The longest name, in bytes, an unknown op kind may have.
pub const MAX_UNKNOWN_NAME_BYTES: usize = 64;

/// How many distinct unknown op kind names one process keeps.
pub const MAX_UNKNOWN_KINDS: usize = 1024;

/// At most `MAX_UNKNOWN_NAME_BYTES` of `name`, for messages about names
/// that may be much longer.
fn shown(name: &str) -> String {
    if name.len() <= MAX_UNKNOWN_NAME_BYTES {
        return name.to_string();
    }
    let mut end = MAX_UNKNOWN_NAME_BYTES;
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &name[..end])
}

/// The names of the unknown kinds seen by this process, each leaked once
/// (bounded by `MAX_UNKNOWN_KINDS`).
static UNKNOWN_NAMES: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());

/// `name` as a `'static` string from the table, added if new and allowed.
pub(super) fn intern(name: &str) -> Result<&'static str, String> {
    if name.is_empty() {
        return Err("an op kind has an empty name".to_string());
    }
    if name.len() > MAX_UNKNOWN_NAME_BYTES {
        return Err(format!(
            "op kind `{}` is longer than {MAX_UNKNOWN_NAME_BYTES} bytes",
            shown(name)
        ));
    }
    if name.chars().any(char::is_control) {
        return Err(format!("op kind {name:?} holds a control character"));
    }
    // A panic elsewhere while the table was held leaves it consistent: a
    // name is either in it or not.
    let mut names = UNKNOWN_NAMES.lock().unwrap_or_else(PoisonError::into_inner);
    intern_in(&mut names, MAX_UNKNOWN_KINDS, name)
}

/// `name` from `names`, added (leaked) if new and `names` holds fewer than
/// `most`.
fn intern_in(names: &mut BTreeSet<&'static str>, most: usize, name: &str) -> Result<&'static str, String> {
    if let Some(interned) = names.get(name) {
        return Ok(interned);
    }
    if names.len() >= most {
        return Err(format!(
            "op kind `{name}`: this process already holds {most} op kinds it does not know"
        ));
    }
    let interned: &'static str = Box::leak(name.into());
    names.insert(interned);
    Ok(interned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_finds_a_name_again_and_refuses_one_past_its_bound() {
        let mut names = BTreeSet::new();
        let first = intern_in(&mut names, 2, "A1").unwrap();
        intern_in(&mut names, 2, "A2").unwrap();
        assert!(std::ptr::eq(intern_in(&mut names, 2, "A1").unwrap(), first));
        let error = intern_in(&mut names, 2, "A3").unwrap_err();
        assert!(error.contains("already holds 2 op kinds"), "{error}");
    }
}
