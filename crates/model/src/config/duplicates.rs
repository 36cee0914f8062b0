//! The first key a JSON text gives twice in one object, with the path of
//! that object: serde_json keeps the last value of a repeated key, so a
//! config.json saying `vocab_size` twice would silently run the second.

use std::collections::HashSet;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// The first repeated key (`rope_scaling.factor`), or `None`; `None` too
/// where the text is not JSON (the parser then says why).
pub(super) fn first_repeated_key(text: &str) -> Option<String> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let mut found = None;
    let _ = Walk {
        path: String::new(),
        found: &mut found,
    }
    .deserialize(&mut deserializer);
    found
}

/// Visits one value at `path`, recording the first repeated key in `found`.
struct Walk<'a> {
    path: String,
    found: &'a mut Option<String>,
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = if self.path.is_empty() {
                key.clone()
            } else {
                format!("{}.{key}", self.path)
            };
            if !seen.insert(key) && self.found.is_none() {
                *self.found = Some(path.clone());
            }
            map.next_value_seed(Walk {
                path,
                found: &mut *self.found,
            })?;
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut index = 0usize;
        while seq
            .next_element_seed(Walk {
                path: format!("{}[{index}]", self.path),
                found: &mut *self.found,
            })?
            .is_some()
        {
            index += 1;
        }
        Ok(())
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_repeated_key_is_named_with_its_path() {
        assert_eq!(first_repeated_key(r#"{"a": 1, "b": 2}"#), None);
        assert_eq!(
            first_repeated_key(r#"{"vocab_size": 1, "x": [1], "vocab_size": 2}"#).as_deref(),
            Some("vocab_size")
        );
        assert_eq!(
            first_repeated_key(r#"{"rope_scaling": {"factor": 8, "factor": 4}}"#).as_deref(),
            Some("rope_scaling.factor")
        );
        assert_eq!(
            first_repeated_key(r#"{"list": [{"k": 1, "k": 1}]}"#).as_deref(),
            Some("list[0].k")
        );
        // The same key in two objects is no repeat.
        assert_eq!(first_repeated_key(r#"{"a": {"k": 1}, "b": {"k": 2}}"#), None);
        assert_eq!(first_repeated_key("not json"), None);
    }
}
