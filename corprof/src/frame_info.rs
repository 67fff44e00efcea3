//! `COR_PRF_FRAME_INFO` as `DoStackSnapshot` builds it (spec §1.4, R24).

use crate::ids::FunctionId;

/// The layout of CoreCLR's `COR_PRF_FRAME_INFO_INTERNAL`, which a snapshot callback receives
/// (as an opaque `COR_PRF_FRAME_INFO`) for each frame.
///
/// It is a stack local of the walk, valid only during the callback: the borrow a callback
/// receives cannot outlive it, which is exactly the runtime's rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct FrameInfo {
    /// `sizeof(COR_PRF_FRAME_INFO_INTERNAL)`: 40 on x64.
    pub size: u16,
    /// Always [`FrameInfo::CURRENT_VERSION`].
    pub version: u16,
    /// The frame's function; 0 for a native run.
    pub func_id: FunctionId,
    /// The frame's instruction pointer (equals the callback's `ip`).
    pub ip: u64,
    /// Generic context argument; always NULL from `DoStackSnapshot`.
    pub extra_arg: u64,
    /// `this`; always NULL from `DoStackSnapshot`.
    pub this_arg: u64,
}

/// What `DoStackSnapshot` passes for function 0 at IP 0: [`FrameInfo::for_snapshot`].
impl Default for FrameInfo {
    fn default() -> FrameInfo {
        FrameInfo::for_snapshot(FunctionId::NULL, 0)
    }
}

impl FrameInfo {
    /// `COR_PRF_FRAME_INFO_INTERNAL_CURRENT_VERSION`.
    pub const CURRENT_VERSION: u16 = 1;
    /// The struct's size on x64.
    pub const SIZE: u16 = 40;

    /// The frame info `DoStackSnapshot` passes for a frame (R24): NULL generic context and `this`.
    pub fn for_snapshot(func_id: FunctionId, ip: u64) -> FrameInfo {
        FrameInfo {
            size: FrameInfo::SIZE,
            version: FrameInfo::CURRENT_VERSION,
            func_id,
            ip,
            extra_arg: 0,
            this_arg: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::FrameInfo;
    use std::mem::{offset_of, size_of};

    #[test]
    fn layout_matches_the_runtime_struct() {
        assert_eq!(size_of::<FrameInfo>(), FrameInfo::SIZE as usize);
        assert_eq!(offset_of!(FrameInfo, func_id), 8);
        assert_eq!(offset_of!(FrameInfo, ip), 16);
        assert_eq!(offset_of!(FrameInfo, extra_arg), 24);
        assert_eq!(offset_of!(FrameInfo, this_arg), 32);
    }
}
