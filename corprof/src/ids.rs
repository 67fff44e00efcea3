//! Opaque identifiers the runtime hands to profilers.
//!
//! In CoreCLR each id is a pointer to a runtime structure (`ThreadID` is a `Thread*`,
//! `FunctionID` a `MethodDesc*`), so a profiler may pass any 64-bit value — including a bogus
//! one — and the runtime reinterprets it without validation (R4).

use std::fmt;

macro_rules! ids {
    ($($(#[$doc:meta])* $name:ident;)*) => {$(
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
        pub struct $name(pub u64);

        impl $name {
            /// The null id.
            pub const NULL: $name = $name(0);

            /// True for the null id.
            pub fn is_null(self) -> bool {
                self.0 == 0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "0x{:x}", self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "(0x{:x})"), self.0)
            }
        }
    )*};
}

ids! {
    /// `ThreadID`: a managed thread (`Thread*`); 0 in `DoStackSnapshot` means "the caller".
    ThreadId;
    /// `FunctionID`: a method (`MethodDesc*`); 0 in a snapshot callback marks a native run.
    FunctionId;
    /// `ModuleID`: a loaded module.
    ModuleId;
    /// `ClassID`: a loaded type.
    ClassId;
    /// `ReJITID`: the version of a method's IL (0 for the original).
    ReJitId;
    /// `ObjectID`: a managed object's address.
    ObjectId;
    /// `AssemblyID`: a loaded assembly.
    AssemblyId;
    /// `AppDomainID`: an application domain (.NET Core has one).
    AppDomainId;
}

/// `mdMethodDef` and other metadata tokens (`0x06xxxxxx` for methods).
pub type MdToken = u32;
