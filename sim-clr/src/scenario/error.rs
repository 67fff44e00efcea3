//! Errors in scenario files: always the file, the line and the field at fault.

use std::fmt;
use std::ops::Range;

/// A malformed or inconsistent scenario.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScenarioError {
    /// The file (as given to the parser).
    pub file: String,
    /// 1-based line of the offending text (0: the whole file).
    pub line: usize,
    /// 1-based column of the offending text on its line, in characters (0: unknown).
    pub column: usize,
    /// The field (key) at fault.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // One line, whatever the file's name or text holds: control characters escaped.
        let (file, field, message) = (
            printable(&self.file),
            printable(&self.field),
            printable(&self.message),
        );
        match (self.line, self.column) {
            (0, _) => write!(f, "{file}: {message}"),
            (line, 0) => write!(f, "{file}:{line}: field `{field}`: {message}"),
            (line, column) => write!(f, "{file}:{line}:{column}: field `{field}`: {message}"),
        }
    }
}

impl std::error::Error for ScenarioError {}

/// `text` with its control characters (newlines, escape sequences, NUL) escaped: a file
/// name or a user's text printed on one line, never reaching the terminal as a command.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    if text.chars().any(char::is_control) {
        text.chars()
            .map(|c| {
                if c.is_control() {
                    c.escape_default().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect::<String>()
            .into()
    } else {
        text.into()
    }
}

/// The TOML parser's message in this project's words, on one line: `expected Y, found X`
/// instead of serde's `invalid type: X, expected Y`, a table instead of a Rust struct.
fn reworded(message: &str) -> String {
    let message = message
        .trim()
        .lines()
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(": ");
    let message = match message.split_once("expected struct ") {
        Some((head, _)) => format!("{head}expected a table"),
        None => message,
    };
    for prefix in ["invalid type: ", "invalid value: "] {
        if let Some((found, expected)) = message
            .strip_prefix(prefix)
            .and_then(|m| m.rsplit_once(", expected "))
        {
            return format!(
                "expected {}, found {}",
                in_file_words(expected),
                in_file_words(found)
            );
        }
    }
    if message == "number too large to fit in target type" {
        return "the number is too large for this field".into();
    }
    message
}

/// What serde calls a value or a Rust type, as a scenario file's reader knows it: a range of
/// whole numbers, an array, a table.
fn in_file_words(what: &str) -> String {
    let range = |max: &str| format!("a whole number from 0 to {max}");
    match what {
        "u8" => range("255"),
        "u16" => range("65535"),
        "u32" => range("4294967295"),
        // TOML's integers stop at 2^63 - 1.
        "u64" | "usize" | "u128" => range("9223372036854775807"),
        "i8" | "i16" | "i32" | "i64" | "i128" | "isize" => "a whole number".into(),
        "f32" | "f64" => "a number".into(),
        "a sequence" | "sequence" => "an array".into(),
        "a map" | "map" => "a table".into(),
        other => match other.strip_prefix("floating point ") {
            Some(value) => format!("the number {value}"),
            None => other.to_string(),
        },
    }
}

/// Maps byte offsets of one source text to lines, and builds errors for it.
pub(crate) struct Source<'a> {
    pub file: &'a str,
    pub text: &'a str,
    /// The byte offset where each line after the first starts.
    line_starts: Vec<usize>,
}

impl<'a> Source<'a> {
    /// The source `text` of `file`, its lines indexed once.
    pub fn new(file: &'a str, text: &'a str) -> Source<'a> {
        let line_starts = text.match_indices('\n').map(|(i, _)| i + 1).collect();
        Source {
            file,
            text,
            line_starts,
        }
    }

    /// The 1-based line of byte offset `at`, by binary search.
    pub fn line(&self, at: usize) -> usize {
        self.line_starts.partition_point(|&start| start <= at) + 1
    }

    /// The 1-based column, in characters, of byte offset `at` on its line `line`.
    fn column(&self, line: usize, at: usize) -> usize {
        let start = if line > 1 { self.line_starts[line - 2] } else { 0 };
        let at = at.min(self.text.len());
        self.text.get(start..at).map_or(1, |s| s.chars().count() + 1)
    }

    /// An error at `span` about `field`.
    pub fn error(&self, span: Range<usize>, field: &str, message: impl Into<String>) -> ScenarioError {
        let line = self.line(span.start);
        ScenarioError {
            file: self.file.to_string(),
            line,
            column: self.column(line, span.start),
            field: field.to_string(),
            message: message.into(),
        }
    }

    /// The key on the line containing byte `at` (`key = …`) or the table header there; on a
    /// blank or comment line, the nearest such line above; `<file>` when there is none.
    pub fn key_at(&self, at: usize) -> String {
        let at = at.min(self.text.len());
        let end = self.text[at..].find('\n').map_or(self.text.len(), |i| at + i);
        let key = self.text[..end]
            .lines()
            .rev()
            .map(str::trim)
            .find(|line| !line.is_empty() && !line.starts_with('#'))
            .map(|line| match line.split_once('=') {
                Some((key, _)) => key.trim(),
                None => line.trim_matches(|c| c == '[' || c == ']'),
            })
            .filter(|key| !key.is_empty());
        match key {
            Some(key) => key.chars().take(40).collect(),
            None => "<file>".to_string(),
        }
    }

    /// Converts a TOML syntax or shape error, recovering the field name from serde's message
    /// or from the text at the error's position.
    pub fn toml_error(&self, err: &toml::de::Error) -> ScenarioError {
        let message = reworded(err.message());
        let span = err.span().unwrap_or(0..0);
        let quoted = ["unknown field `", "missing field `", "duplicate key `"]
            .iter()
            .find_map(|p| {
                message
                    .split_once(p)
                    .and_then(|(_, rest)| rest.split_once('`'))
                    .map(|(f, _)| f.to_string())
            });
        let field = quoted.unwrap_or_else(|| self.key_at(span.start));
        self.error(span, &field, message)
    }
}
