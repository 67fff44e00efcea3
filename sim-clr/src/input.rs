//! Reading the files simclr is given (scenarios, recorded logs, results, ELF files) without
//! blocking or exhausting memory: only regular files are opened (opening a FIFO would block,
//! a device such as `/dev/zero` never ends), and no more than a limit is read.

use std::io::{Error, ErrorKind, Read};
use std::path::Path;

/// The bytes of the regular file at `path`, if it holds at most `limit` bytes. A path that is
/// not a regular file, or one larger than `limit`, is an error ([`ErrorKind::InvalidInput`],
/// [`ErrorKind::FileTooLarge`]) before anything is read.
pub fn read(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    let metadata = std::fs::metadata(path)?;
    if !metadata.is_file() {
        return Err(Error::new(ErrorKind::InvalidInput, "not a regular file"));
    }
    let too_big = || {
        Error::new(
            ErrorKind::FileTooLarge,
            format!("larger than the limit of {limit} bytes"),
        )
    };
    if metadata.len() > limit {
        return Err(too_big());
    }
    let mut bytes = Vec::new();
    // The file may grow after the check: read one byte past the limit at most.
    std::fs::File::open(path)?
        .take(limit + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(too_big());
    }
    Ok(bytes)
}

/// [`read`], as UTF-8 text.
pub fn read_text(path: &Path, limit: u64) -> std::io::Result<String> {
    String::from_utf8(read(path, limit)?).map_err(|e| Error::new(ErrorKind::InvalidData, e))
}
