//! Errors in scenario files: always the file, the line and the field at fault.

use std::fmt;
use std::ops::Range;

/// A malformed or inconsistent scenario.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScenarioError {
    /// The file (as given to the parser).
    pub file: String,
    /// 1-based line of the offending text.
    pub line: usize,
    /// The field (key) at fault.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}: field `{}`: {}",
            self.file, self.line, self.field, self.message
        )
    }
}

impl std::error::Error for ScenarioError {}

/// Maps byte offsets of one source text to lines, and builds errors for it.
pub(crate) struct Source<'a> {
    pub file: &'a str,
    pub text: &'a str,
}

impl Source<'_> {
    /// The 1-based line of byte offset `at`.
    pub fn line(&self, at: usize) -> usize {
        let at = at.min(self.text.len());
        self.text[..at].bytes().filter(|&b| b == b'\n').count() + 1
    }

    /// An error at `span` about `field`.
    pub fn error(&self, span: Range<usize>, field: &str, message: impl Into<String>) -> ScenarioError {
        ScenarioError {
            file: self.file.to_string(),
            line: self.line(span.start),
            field: field.to_string(),
            message: message.into(),
        }
    }

    /// The key on the line containing byte `at` (`key = …`), or the table header there.
    fn key_at(&self, at: usize) -> String {
        let at = at.min(self.text.len());
        let start = self.text[..at].rfind('\n').map_or(0, |i| i + 1);
        let line = self.text[start..].lines().next().unwrap_or("").trim();
        let key = match line.split_once('=') {
            Some((key, _)) => key.trim(),
            None => line.trim_matches(|c| c == '[' || c == ']'),
        };
        if key.is_empty() {
            "<document>".to_string()
        } else {
            key.chars().take(40).collect()
        }
    }

    /// Converts a TOML syntax or shape error, recovering the field name from serde's message
    /// or from the text at the error's position.
    pub fn toml_error(&self, err: &toml::de::Error) -> ScenarioError {
        let message = err.message().trim().to_string();
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
