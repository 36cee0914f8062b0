//! The HTML the page is written in, at its smallest: text escaped for
//! element content and quoted attributes, and a table of text cells.

use std::fmt::Write;

/// `text` with the characters HTML gives meaning to escaped (for element
/// text and quoted attributes alike).
pub(super) fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for character in text.chars() {
        match character {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&#39;"),
            '\n' => escaped.push_str("&#10;"),
            other => escaped.push(other),
        }
    }
    escaped
}

/// A table of class `class`, headed `header`, every cell escaped.
pub(super) fn table(out: &mut String, class: &str, header: &[&str], rows: &[Vec<String>]) {
    let _ = write!(out, r#"<table class="{class}"><thead><tr>"#);
    for cell in header {
        let _ = write!(out, "<th>{}</th>", escape(cell));
    }
    out.push_str("</tr></thead><tbody>");
    for row in rows {
        out.push_str("<tr>");
        for cell in row {
            let _ = write!(out, "<td>{}</td>", escape(cell));
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table>");
}
