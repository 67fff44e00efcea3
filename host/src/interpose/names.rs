//! Names for a hosted library's synchronization objects, as reports and timelines show them.
//!
//! A mutex, read-write lock, condition variable, semaphore or once-control is a process object
//! named after what it is (`pthread_mutex`, `pthread_rwlock`, …) and which one:
//! - the name the library gave it (`ISimclrOs::NameObject`), if it gave one before first use;
//! - else its symbol, when it lies in a loaded library's data (`g_registry_mutex`,
//!   `TeamSampler::instance+0x40`, `(anonymous namespace)::registry`), read from the library
//!   file's symbol table (internal symbols included) when it is loaded, C++ names demangled;
//! - else the function that first took it (`pthread_mutex first taken in Sampler::sample`),
//!   numbered when several objects share that (`… #2`).
//!
//! The object's identity in the process is its address; within a run each address keeps the
//! name it got first, and no two addresses share one.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Mutex;

/// A symbol of a loaded library: where it starts, how long it is, its (demangled) name.
#[derive(Clone, Debug)]
struct Symbol {
    start: usize,
    size: usize,
    name: String,
}

/// What is known: the loaded libraries' data and code symbols, sorted by address, and the
/// names given so far.
#[derive(Default)]
struct Known {
    data: Vec<Symbol>,
    code: Vec<Symbol>,
    /// Every name given, by address.
    named: BTreeMap<usize, String>,
    /// The names given, with their objects' kinds (`""`: named by the library), to keep
    /// the objects of one kind apart.
    used: BTreeSet<(String, String)>,
}

static KNOWN: Mutex<Known> = Mutex::new(Known {
    data: Vec::new(),
    code: Vec::new(),
    named: BTreeMap::new(),
    used: BTreeSet::new(),
});

fn known() -> std::sync::MutexGuard<'static, Known> {
    KNOWN.lock().unwrap_or_else(|e| e.into_inner())
}

/// Reads the symbols of the library file at `path`, loaded at `base`, for the run that loaded
/// it: every run hosts the library afresh (one at a time), so the names of the run before are
/// forgotten and the same run always gives the same names. A file this cannot read (stripped,
/// not ELF) names nothing by symbol.
pub(super) fn register(path: &Path, base: usize) {
    let (data, code) = std::fs::read(path)
        .ok()
        .and_then(|bytes| symbols(&bytes, base))
        .unwrap_or_default();
    let mut k = known();
    *k = Known {
        data,
        code,
        ..Known::default()
    };
    k.data.sort_by_key(|s| s.start);
    k.code.sort_by_key(|s| s.start);
}

/// The library's name for the object at `address`: kept if it is the first.
pub(super) fn give(address: usize, name: &str) {
    let mut k = known();
    if !k.named.contains_key(&address) {
        let name = unique(&mut k, "", name.to_string());
        k.named.insert(address, name);
    }
}

/// The name of the `kind` object at `address`; when it is new and not in a library's data,
/// `callers` gives the return addresses of the code that took it, innermost first: the first
/// in a library function of the team's own (not the C++ runtime's) names it.
pub(super) fn of(kind: &str, address: usize, callers: impl FnOnce() -> Vec<usize>) -> String {
    let mut k = known();
    if let Some(name) = k.named.get(&address) {
        return format!("{kind} {name}");
    }
    let name = match containing(&k.data, address) {
        Some(s) if address == s.start => s.name.clone(),
        Some(s) => format!("{}+{:#x}", s.name, address - s.start),
        None => {
            // The C++ runtime's own functions (std::mutex::lock, its gthread wrappers, names
            // this demangler leaves mangled) are not where the team's code took it.
            let own = |s: &&Symbol| !["std::", "__", "_Z"].iter().any(|p| s.name.starts_with(p));
            let taker = (callers().into_iter()).find_map(|ip| {
                containing(&k.code, ip.wrapping_sub(1))
                    .filter(own)
                    .map(|s| s.name.clone())
            });
            match taker {
                Some(function) => format!("first taken in {function}"),
                None => format!("{address:#x}"),
            }
        }
    };
    let name = unique(&mut k, kind, name);
    k.named.insert(address, name.clone());
    format!("{kind} {name}")
}

/// `name`, or `name #N` with the first N that no other object of `kind` has.
fn unique(k: &mut Known, kind: &str, name: String) -> String {
    let mut candidate = name.clone();
    let mut n = 2;
    let taken = |k: &Known, c: &String| {
        k.used.contains(&(kind.to_string(), c.clone())) || k.used.contains(&(String::new(), c.clone()))
    };
    while taken(k, &candidate) {
        candidate = format!("{name} #{n}");
        n += 1;
    }
    k.used.insert((kind.to_string(), candidate.clone()));
    candidate
}

/// The symbol of `sorted` whose bytes hold `address`.
fn containing(sorted: &[Symbol], address: usize) -> Option<&Symbol> {
    let i = sorted.partition_point(|s| s.start <= address);
    let s = sorted.get(i.checked_sub(1)?)?;
    (address < s.start + s.size.max(1)).then_some(s)
}

/// An ELF64 little-endian file's object and function symbols (its full symbol table, else its
/// dynamic one), at their addresses once loaded at `base`.
fn symbols(file: &[u8], base: usize) -> Option<(Vec<Symbol>, Vec<Symbol>)> {
    let u16_at = |at: usize| Some(u16::from_le_bytes(file.get(at..at + 2)?.try_into().ok()?));
    let u32_at = |at: usize| Some(u32::from_le_bytes(file.get(at..at + 4)?.try_into().ok()?));
    let u64_at = |at: usize| Some(u64::from_le_bytes(file.get(at..at + 8)?.try_into().ok()?));
    if file.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let sections = u64_at(0x28)? as usize;
    let entry_size = u16_at(0x3a)? as usize;
    let count = u16_at(0x3c)? as usize;
    let section = |i: usize| -> Option<(u32, usize, usize, u32, usize)> {
        let at = sections.checked_add(i.checked_mul(entry_size)?)?;
        // sh_type, sh_offset, sh_size, sh_link, sh_entsize
        Some((
            u32_at(at + 4)?,
            u64_at(at + 0x18)? as usize,
            u64_at(at + 0x20)? as usize,
            u32_at(at + 0x28)?,
            u64_at(at + 0x38)? as usize,
        ))
    };
    const SHT_SYMTAB: u32 = 2;
    const SHT_DYNSYM: u32 = 11;
    let table = [SHT_SYMTAB, SHT_DYNSYM]
        .into_iter()
        .find_map(|kind| (0..count).filter_map(section).find(|s| s.0 == kind))?;
    let (_, offset, size, link, entsize) = table;
    let (_, strings, strings_size, _, _) = section(link as usize)?;
    let strings = file.get(strings..strings.checked_add(strings_size)?)?;
    if entsize < 24 {
        return None;
    }
    let (mut data, mut code) = (Vec::new(), Vec::new());
    for i in 0..size / entsize {
        let at = offset + i * entsize;
        let name = u32_at(at)? as usize;
        let info = *file.get(at + 4)?;
        let shndx = u16_at(at + 6)?;
        let value = u64_at(at + 8)? as usize;
        let length = u64_at(at + 16)? as usize;
        if shndx == 0 || value == 0 {
            continue;
        }
        let raw = strings.get(name..)?;
        let raw = &raw[..raw.iter().position(|&b| b == 0)?];
        let Ok(raw) = std::str::from_utf8(raw) else {
            continue;
        };
        let symbol = Symbol {
            start: base.wrapping_add(value),
            size: length,
            name: demangle(raw),
        };
        match info & 0xf {
            1 => data.push(symbol),
            2 => code.push(symbol),
            _ => {}
        }
    }
    Some((data, code))
}

/// A C++ name of the simple kinds a variable or function has (`_ZN…E` nested names of
/// source names, the anonymous namespace, `std::`; a function's parameters left out), else
/// the name as it is.
fn demangle(mangled: &str) -> String {
    let Some(rest) = mangled.strip_prefix("_Z") else {
        return mangled.to_string();
    };
    let source_name = |s: &str| -> Option<(String, usize)> {
        let digits = s.bytes().take_while(u8::is_ascii_digit).count();
        let len: usize = s.get(..digits)?.parse().ok()?;
        let name = s.get(digits..digits + len)?;
        let name = if name.starts_with("_GLOBAL__N") {
            "(anonymous namespace)".to_string()
        } else {
            name.to_string()
        };
        Some((name, digits + len))
    };
    // Internal linkage (a `static` function or variable) is marked by an `L`.
    let rest = rest.strip_prefix('L').unwrap_or(rest);
    let parsed = if let Some(mut nested) = rest.strip_prefix('N') {
        let mut parts = Vec::new();
        // A const member function's qualifier.
        nested = nested.strip_prefix('K').unwrap_or(nested);
        if let Some(after) = nested.strip_prefix("St") {
            parts.push("std".to_string());
            nested = after;
        }
        loop {
            if nested.starts_with('E') {
                break Some(parts.join("::"));
            }
            match source_name(nested) {
                Some((name, used)) => {
                    parts.push(name);
                    nested = &nested[used..];
                }
                None => break None,
            }
        }
    } else if let Some(std) = rest.strip_prefix("St") {
        let std = std.strip_prefix('L').unwrap_or(std);
        source_name(std).map(|(name, _)| format!("std::{name}"))
    } else {
        source_name(rest).map(|(name, _)| name)
    };
    parsed
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| mangled.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simple_cxx_names_demangle_and_others_stay() {
        assert_eq!(
            demangle("_ZN12_GLOBAL__N_18registryE"),
            "(anonymous namespace)::registry"
        );
        assert_eq!(demangle("_ZN11TeamSampler8instanceE"), "TeamSampler::instance");
        assert_eq!(
            demangle("_ZN4team7Sampler12sample_roundEv"),
            "team::Sampler::sample_round"
        );
        assert_eq!(demangle("_Z6samplePv"), "sample");
        assert_eq!(demangle("_ZNSt6chrono3nowE"), "std::chrono::now");
        assert_eq!(demangle("g_registry_mutex"), "g_registry_mutex");
        assert_eq!(demangle("_ZN3fooIiE3barE"), "_ZN3fooIiE3barE");
        assert_eq!(demangle("_ZN999E"), "_ZN999E");
        assert_eq!(
            demangle("_ZL20__gthread_mutex_lockP15pthread_mutex_t"),
            "__gthread_mutex_lock"
        );
        assert_eq!(
            demangle("_ZStL23__glibcxx_rwlock_wrlockP16pthread_rwlock_t"),
            "std::__glibcxx_rwlock_wrlock"
        );
        assert_eq!(demangle("_ZNK4team7Sampler7samplesEv"), "team::Sampler::samples");
    }

    #[test]
    fn names_are_kept_per_address_and_never_shared() {
        let mut k = Known::default();
        let f = || "first taken in f".to_string();
        assert_eq!(unique(&mut k, "pthread_mutex", f()), "first taken in f");
        assert_eq!(unique(&mut k, "pthread_mutex", f()), "first taken in f #2");
        assert_eq!(unique(&mut k, "pthread_cond", f()), "first taken in f");
        assert_eq!(unique(&mut k, "pthread_mutex", f()), "first taken in f #3");
        let sorted = vec![
            Symbol {
                start: 100,
                size: 8,
                name: "a".into(),
            },
            Symbol {
                start: 200,
                size: 64,
                name: "b".into(),
            },
        ];
        assert_eq!(containing(&sorted, 104).map(|s| s.name.as_str()), Some("a"));
        assert!(containing(&sorted, 108).is_none());
        assert_eq!(containing(&sorted, 240).map(|s| s.name.as_str()), Some("b"));
        assert!(containing(&sorted, 99).is_none());
    }
}
