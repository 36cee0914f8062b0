//! The Jinja environment chat templates run in: transformers' settings
//! (trimmed blocks, no escaping) and the functions it gives templates
//! (`raise_exception`, `strftime_now`, a `tojson` spaced like Python's),
//! and how its errors read.

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use minijinja::value::{Kwargs, Value};
use minijinja::{AutoEscape, Environment, ErrorKind};
use serde::Serialize;

/// Nesting of macro calls and recursive loops; chat templates use a few.
const RECURSION_LIMIT: usize = 100;
/// Marks errors raised by the template's own `raise_exception(...)`, so
/// they read as the template's message rather than an engine failure.
const RAISED_MARKER: &str = "raise_exception: ";

/// A new environment with transformers' settings and functions.
pub(super) fn environment() -> Environment<'static> {
    let mut environment = Environment::new();
    // transformers' settings: blocks eat their newline and leading
    // whitespace, and nothing is escaped (the template name ends in
    // `.json` for tokenizer_config.json, which would otherwise turn
    // on JSON escaping).
    environment.set_trim_blocks(true);
    environment.set_lstrip_blocks(true);
    environment.set_auto_escape_callback(|_| AutoEscape::None);
    environment.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    environment.set_recursion_limit(RECURSION_LIMIT);
    environment.add_function("raise_exception", raise_exception);
    environment.add_function("strftime_now", strftime_now);
    environment.add_filter("tojson", python_tojson);
    environment
}

/// A minijinja error as one line: what went wrong, the template line, and
/// the causes. `fuel` is the render's budget, named when it ran out.
pub(super) fn describe(error: &minijinja::Error, fuel: Option<u64>) -> String {
    let mut text = match (error.kind(), error.detail()) {
        (ErrorKind::OutOfFuel, _) => format!(
            "the template ran out of fuel after {} instructions (a loop too long for a chat prompt)",
            fuel.unwrap_or_default()
        ),
        (ErrorKind::InvalidOperation, Some(detail)) if detail.starts_with(RAISED_MARKER) => {
            format!(
                "the template raised an exception: {}",
                &detail[RAISED_MARKER.len()..]
            )
        }
        (kind, Some(detail)) => format!("{kind}: {detail}"),
        (kind, None) => kind.to_string(),
    };
    if let Some(line) = error.line() {
        text.push_str(&format!(" (template line {line})"));
    }
    let mut cause = std::error::Error::source(error);
    while let Some(inner) = cause {
        text.push_str(&format!(": {inner}"));
        cause = inner.source();
    }
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// transformers' `raise_exception(message)`: the template refuses the input.
fn raise_exception(message: Value) -> std::result::Result<Value, minijinja::Error> {
    let message = match message.as_str() {
        Some(text) => text.to_string(),
        None => message.to_string(),
    };
    Err(minijinja::Error::new(
        ErrorKind::InvalidOperation,
        format!("{RAISED_MARKER}{message}"),
    ))
}

/// transformers' `strftime_now(format)`, in UTC (transformers uses local
/// time; the date is what templates want, and UTC needs no time zone data).
fn strftime_now(format: &str) -> std::result::Result<String, minijinja::Error> {
    let seconds = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_secs() as i64)
        .unwrap_or_default();
    format_utc(format, seconds).map_err(|problem| minijinja::Error::new(ErrorKind::InvalidOperation, problem))
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

/// `format` with C `strftime` specifiers filled in for the UTC time
/// `seconds` after the Unix epoch. The specifiers chat templates use are
/// supported, with glibc's `-` flag (`%-d`) to drop padding; any other is
/// an error naming it, rather than a silently wrong prompt.
fn format_utc(format: &str, seconds: i64) -> std::result::Result<String, String> {
    let days = seconds.div_euclid(86_400);
    let second_of_day = seconds.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    let (hour, minute, second) = (second_of_day / 3600, second_of_day / 60 % 60, second_of_day % 60);
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    const DAYS_BEFORE_MONTH: [i64; 12] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let day_of_year = DAYS_BEFORE_MONTH[month as usize - 1] + day + i64::from(leap && month > 2);
    // 1970-01-01 was a Thursday.
    let weekday = WEEKDAYS[(days + 4).rem_euclid(7) as usize];
    let month_name = MONTHS[month as usize - 1];
    let hour_12 = if hour % 12 == 0 { 12 } else { hour % 12 };

    let mut text = String::new();
    let mut characters = format.chars();
    while let Some(character) = characters.next() {
        if character != '%' {
            text.push(character);
            continue;
        }
        let mut specifier = characters.next();
        let unpadded = specifier == Some('-');
        if unpadded {
            specifier = characters.next();
        }
        let number = |value: i64, width: usize| {
            if unpadded {
                value.to_string()
            } else {
                format!("{value:0width$}")
            }
        };
        match specifier {
            Some('Y') => text.push_str(&year.to_string()),
            Some('y') => text.push_str(&number(year.rem_euclid(100), 2)),
            Some('m') => text.push_str(&number(month, 2)),
            Some('d') => text.push_str(&number(day, 2)),
            Some('e') => text.push_str(&format!("{day:>2}")),
            Some('j') => text.push_str(&number(day_of_year, 3)),
            Some('H') => text.push_str(&number(hour, 2)),
            Some('I') => text.push_str(&number(hour_12, 2)),
            Some('M') => text.push_str(&number(minute, 2)),
            Some('S') => text.push_str(&number(second, 2)),
            Some('p') => text.push_str(if hour < 12 { "AM" } else { "PM" }),
            Some('B') => text.push_str(month_name),
            Some('b') | Some('h') => text.push_str(&month_name[..3]),
            Some('A') => text.push_str(weekday),
            Some('a') => text.push_str(&weekday[..3]),
            Some('F') => text.push_str(&format!("{year}-{month:02}-{day:02}")),
            Some('T') => text.push_str(&format!("{hour:02}:{minute:02}:{second:02}")),
            Some('%') => text.push('%'),
            other => {
                let shown = other
                    .map(|character| format!("%{character}"))
                    .unwrap_or_else(|| "a trailing %".into());
                return Err(format!(
                    "strftime_now: {shown} is not supported (supported: %Y %y %m %d %e %j %H %I %M %S %p %B %b %h %A %a %F %T %%, and %- to drop padding)"
                ));
            }
        }
    }
    Ok(text)
}

/// The proleptic Gregorian (year, month, day) of `days` after 1970-01-01
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let shifted = days + 719_468;
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// transformers' `tojson` filter: Python's `json.dumps(value,
/// ensure_ascii=False, indent=indent)`, whose spacing (`", "`, `": "`)
/// differs from compact JSON, and which leaves `<`, `>`, `&` unescaped.
/// Tool-calling templates render schemas with it; the model was trained on
/// Python's spacing.
fn python_tojson(
    value: &Value,
    indent: Option<Value>,
    arguments: Kwargs,
) -> std::result::Result<Value, minijinja::Error> {
    let indent: Option<Value> = match indent {
        Some(indent) => Some(indent),
        None => arguments.get("indent")?,
    };
    arguments.assert_all_used()?;
    let mut bytes = Vec::new();
    let written = match indent.filter(|indent| !indent.is_none()) {
        Some(indent) => {
            let width = usize::try_from(indent)?;
            let indentation = " ".repeat(width.min(64));
            let formatter = serde_json::ser::PrettyFormatter::with_indent(indentation.as_bytes());
            value.serialize(&mut serde_json::Serializer::with_formatter(&mut bytes, formatter))
        }
        None => value.serialize(&mut serde_json::Serializer::with_formatter(
            &mut bytes,
            PythonJsonFormatter,
        )),
    };
    written.map_err(|error| {
        minijinja::Error::new(ErrorKind::InvalidOperation, "tojson: cannot serialize the value")
            .with_source(error)
    })?;
    let text = String::from_utf8(bytes)
        .map_err(|_| minijinja::Error::new(ErrorKind::InvalidOperation, "tojson: the JSON is not UTF-8"))?;
    Ok(Value::from_safe_string(text))
}

/// Python's default `json.dumps` separators: `", "` and `": "`.
struct PythonJsonFormatter;

impl serde_json::ser::Formatter for PythonJsonFormatter {
    fn begin_array_value<W: ?Sized + Write>(&mut self, writer: &mut W, first: bool) -> std::io::Result<()> {
        if first { Ok(()) } else { writer.write_all(b", ") }
    }

    fn begin_object_key<W: ?Sized + Write>(&mut self, writer: &mut W, first: bool) -> std::io::Result<()> {
        if first { Ok(()) } else { writer.write_all(b", ") }
    }

    fn begin_object_value<W: ?Sized + Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        writer.write_all(b": ")
    }
}

#[cfg(test)]
mod tests {
    use super::format_utc;

    #[test]
    fn dates_match_python_strftime() {
        let format = "%Y-%m-%d %H:%M:%S %A %a %B %b %j %I %p %y %e";
        // Expected strings from Python's datetime.strftime in UTC.
        for (seconds, expected) in [
            (0, "1970-01-01 00:00:00 Thursday Thu January Jan 001 12 AM 70  1"),
            (
                951_782_400,
                "2000-02-29 00:00:00 Tuesday Tue February Feb 060 12 AM 00 29",
            ),
            (
                1_709_251_199,
                "2024-02-29 23:59:59 Thursday Thu February Feb 060 11 PM 24 29",
            ),
            (
                4_102_444_799,
                "2099-12-31 23:59:59 Thursday Thu December Dec 365 11 PM 99 31",
            ),
            (
                1_735_689_600,
                "2025-01-01 00:00:00 Wednesday Wed January Jan 001 12 AM 25  1",
            ),
        ] {
            assert_eq!(format_utc(format, seconds).unwrap(), expected, "at {seconds}");
        }
        assert_eq!(format_utc("%d %b %Y", 1_709_251_199).unwrap(), "29 Feb 2024");
        assert_eq!(
            format_utc("%-d/%-m %F %T %%", 1_735_689_600).unwrap(),
            "1/1 2025-01-01 00:00:00 %"
        );
    }

    #[test]
    fn unsupported_specifiers_are_named() {
        let error = format_utc("%Y %Q", 0).unwrap_err();
        assert!(error.contains("%Q is not supported"), "{error}");
        assert!(format_utc("100%", 0).unwrap_err().contains("a trailing %"));
    }
}
