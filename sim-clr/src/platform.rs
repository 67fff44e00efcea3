//! The operating system whose runtime is simulated: the one fact every layer above memory
//! needs (code layout, thread start, the runtime's rules).

/// Which operating system's runtime is simulated (R11, R13, R43).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Platform {
    /// Windows: cross-thread walks OS-suspend the target.
    Windows,
    /// Linux/macOS: cross-thread walks only under `SuspendRuntime`.
    Unix,
}

impl Platform {
    /// `"windows"` or `"unix"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Platform::Windows => "windows",
            Platform::Unix => "unix",
        }
    }
}

impl std::str::FromStr for Platform {
    type Err = String;

    /// `"windows"` or `"unix"` ([`Platform::as_str`]), or an error that lists them.
    fn from_str(text: &str) -> Result<Platform, String> {
        [Platform::Windows, Platform::Unix]
            .into_iter()
            .find(|p| p.as_str() == text)
            .ok_or_else(|| format!("`{text}` is not a platform (`windows`, `unix`)"))
    }
}
