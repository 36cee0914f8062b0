//! Reading one Rust file for the structure test: its tokens (comments and
//! literals dropped), the names its `use` lines import, and every path it
//! names, in `use` lines and in code, with the module it is written in.

use std::collections::BTreeMap;

use super::Module;

/// One path a file names, where it names it.
#[derive(Clone, Debug)]
pub struct Reference {
    /// The module the path is written in (inline modules such as `tests` included).
    pub scope: Module,
    /// `["super", "nccl", "NcclGroup", "new"]`.
    pub segments: Vec<String>,
    pub line: usize,
}

/// What the analysis needs of one file.
#[derive(Debug, Default)]
pub struct FileFacts {
    /// Where it is, from `src/`.
    pub path: String,
    /// Names its `use` lines bring into the module (outside any block),
    /// each with every path it may stand for (`#[cfg]` alternatives).
    pub imports: BTreeMap<String, Vec<Vec<String>>>,
    pub references: Vec<Reference>,
}

/// What the reader needs to tell apart: names, `::`, braces, the rest.
#[derive(Clone, Debug, PartialEq)]
enum Token {
    Ident(String),
    PathSeparator,
    Open,
    Close,
    Other(char),
}

/// The tokens of Rust source with their lines; comments and string and
/// character literals are dropped, since a path in them names nothing.
fn tokenize(text: &str) -> Vec<(Token, usize)> {
    let characters: Vec<char> = text.chars().collect();
    let (mut tokens, mut line, mut at) = (Vec::new(), 1, 0);
    let skip_to = |at: &mut usize, line: &mut usize, end: usize| {
        *line += characters[*at..end.min(characters.len())]
            .iter()
            .filter(|&&c| c == '\n')
            .count();
        *at = end;
    };
    while at < characters.len() {
        let rest = &characters[at..];
        let starts = |prefix: &str| rest.iter().take(prefix.len()).copied().eq(prefix.chars());
        if starts("//") {
            let end = rest
                .iter()
                .position(|&c| c == '\n')
                .map_or(characters.len(), |p| at + p);
            skip_to(&mut at, &mut line, end);
        } else if starts("/*") {
            let (mut depth, mut index) = (0, at);
            while index < characters.len() {
                if characters[index..].starts_with(&['/', '*']) {
                    depth += 1;
                    index += 2;
                } else if characters[index..].starts_with(&['*', '/']) {
                    depth -= 1;
                    index += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    index += 1;
                }
            }
            skip_to(&mut at, &mut line, index);
        } else if let Some(hashes) = raw_string_start(rest) {
            // r"…", r#"…"#, br"…": ends at a quote followed by as many #.
            let opening = rest.iter().position(|&c| c == '"').unwrap() + 1;
            let closing: Vec<char> = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            let end = (at + opening..characters.len())
                .find(|&index| characters[index..].starts_with(&closing))
                .map_or(characters.len(), |index| index + closing.len());
            skip_to(&mut at, &mut line, end);
        } else if rest[0] == '"' || starts("b\"") {
            let mut index = at + if rest[0] == '"' { 1 } else { 2 };
            while index < characters.len() && characters[index] != '"' {
                index += if characters[index] == '\\' { 2 } else { 1 };
            }
            skip_to(&mut at, &mut line, index + 1);
        } else if rest[0] == '\'' {
            // A character literal ('x', '\n', '\u{..}'), else a lifetime.
            let end = if rest.get(1) == Some(&'\\') {
                // The escaped character may itself be a quote: '\''.
                rest.get(3..)
                    .and_then(|after| after.iter().position(|&c| c == '\''))
                    .map(|p| at + p + 4)
            } else {
                (rest.get(2) == Some(&'\'')).then_some(at + 3)
            };
            let end = end.unwrap_or(at + 1);
            skip_to(&mut at, &mut line, end);
        } else if rest[0].is_alphanumeric()
            || rest[0] == '_'
            || (rest[0] == '$' && rest.get(1).is_some_and(|c| c.is_alphanumeric() || *c == '_'))
        {
            let start = if rest[0] == '$' || starts("r#") {
                at + if rest[0] == '$' { 1 } else { 2 }
            } else {
                at
            };
            let end = (start..characters.len())
                .find(|&index| !(characters[index].is_alphanumeric() || characters[index] == '_'))
                .unwrap_or(characters.len());
            tokens.push((Token::Ident(characters[start..end].iter().collect()), line));
            at = end.max(at + 1);
        } else if starts("::") {
            tokens.push((Token::PathSeparator, line));
            at += 2;
        } else {
            match rest[0] {
                '\n' => line += 1,
                '{' => tokens.push((Token::Open, line)),
                '}' => tokens.push((Token::Close, line)),
                c if c.is_whitespace() => {}
                c => tokens.push((Token::Other(c), line)),
            }
            at += 1;
        }
    }
    tokens
}

/// How many `#` a raw string starting here has, if one starts here.
fn raw_string_start(rest: &[char]) -> Option<usize> {
    let after_prefix = match rest {
        ['r', ..] => &rest[1..],
        ['b', 'r', ..] => &rest[2..],
        _ => return None,
    };
    let hashes = after_prefix.iter().take_while(|&&c| c == '#').count();
    (after_prefix.get(hashes) == Some(&'"')).then_some(hashes)
}

/// Every path a `use` tree names, braces expanded, `as` renames kept as
/// `path as name`.
fn expand(prefix: &str, tree: &str, out: &mut Vec<String>) {
    let tree = tree.trim();
    if let Some(open) = tree.find('{') {
        let head = format!("{prefix}{}", &tree[..open]);
        let inner = &tree[open + 1..tree.rfind('}').unwrap()];
        let (mut depth, mut start) = (0, 0);
        for (index, character) in inner.char_indices() {
            match character {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand(&head, &inner[start..index], out);
                    start = index + 1;
                }
                _ => {}
            }
        }
        expand(&head, &inner[start..], out);
    } else if !tree.is_empty() {
        out.push(format!("{prefix}{tree}"));
    }
}

/// Reads one file of module `module`: its imports and every path it names.
pub fn read_file(module: &Module, text: &str) -> FileFacts {
    let tokens = tokenize(text);
    let mut facts = FileFacts::default();
    // Inline modules (`mod tests { … }`) by the brace depth they opened at.
    let (mut depth, mut inline, mut pending_inline) = (0usize, Vec::<(usize, String)>::new(), None);
    let mut index = 0;
    while index < tokens.len() {
        let scope: Module = module
            .iter()
            .cloned()
            .chain(inline.iter().map(|(_, name)| name.clone()))
            .collect();
        match &tokens[index].0 {
            Token::Open => {
                depth += 1;
                if let Some(name) = pending_inline.take() {
                    inline.push((depth, name));
                }
            }
            Token::Close => {
                if inline.last().is_some_and(|(opened, _)| *opened == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
            }
            Token::Ident(word) if word == "mod" => {
                if let (Some((Token::Ident(name), _)), Some((Token::Open, _))) =
                    (tokens.get(index + 1), tokens.get(index + 2))
                {
                    pending_inline = Some(name.clone());
                }
            }
            Token::Ident(word) if word == "use" => {
                let line = tokens[index].1;
                let mut tree = String::new();
                index += 1;
                while index < tokens.len() && tokens[index].0 != Token::Other(';') {
                    tree.push_str(&match &tokens[index].0 {
                        Token::Ident(word) if word == "as" => " as ".to_string(),
                        Token::Ident(word) => word.clone(),
                        Token::PathSeparator => "::".into(),
                        Token::Open => "{".into(),
                        Token::Close => "}".into(),
                        Token::Other(character) => character.to_string(),
                    });
                    index += 1;
                }
                let mut paths = Vec::new();
                expand("", &tree, &mut paths);
                for path in paths {
                    let (path, alias) = match path.split_once(" as ") {
                        Some((path, alias)) => (path.to_string(), Some(alias.trim().to_string())),
                        None => (path, None),
                    };
                    let mut segments: Vec<String> =
                        path.split("::").map(|part| part.trim().to_string()).collect();
                    if segments.last().is_some_and(|last| last == "self") {
                        segments.pop();
                    }
                    let name = alias.or_else(|| segments.last().cloned()).unwrap_or_default();
                    if depth == 0 && inline.is_empty() && name != "*" && name != "_" {
                        facts.imports.entry(name).or_default().push(segments.clone());
                    }
                    facts.references.push(Reference {
                        scope: scope.clone(),
                        segments,
                        line,
                    });
                }
            }
            Token::Ident(first) => {
                let follows_path =
                    index > 0 && matches!(tokens[index - 1].0, Token::PathSeparator | Token::Other('.'));
                let mut segments = vec![first.clone()];
                let mut next = index + 1;
                while let (Some((Token::PathSeparator, _)), Some((Token::Ident(segment), _))) =
                    (tokens.get(next), tokens.get(next + 1))
                {
                    segments.push(segment.clone());
                    next += 2;
                }
                if !follows_path && segments.len() > 1 {
                    facts.references.push(Reference {
                        scope,
                        segments,
                        line: tokens[index].1,
                    });
                    index = next - 1;
                }
            }
            Token::PathSeparator | Token::Other(_) => {}
        }
        index += 1;
    }
    facts
}
