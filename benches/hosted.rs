//! The COM layer's cost: a synchronous `DoStackSnapshot` of a 64-frame managed stack made
//! through the `ICorProfilerInfo*` vtable a hosted native profiler calls (`com/*`), against
//! the same walk through the Rust trait (`trait/*`, the peer), measured in the same run;
//! without and with `COR_PRF_SNAPSHOT_REGISTER_CONTEXT` (each callback then gets a copy of
//! the frame's 1,232-byte CONTEXT).

// Hosting needs a Unix loader; elsewhere this benchmark has nothing to run.
#[cfg(unix)]
mod com {
    use corprof::com::{ICorProfilerInfo10Vtbl, ICorProfilerInfo2Vtbl, UintPtr, HRESULT};
    use corprof::flags::snapshot::REGISTER_CONTEXT;
    use corprof::{HResult, ProfilerInfo, SnapshotFrame, ThreadId};
    use criterion::{criterion_group, Criterion, Throughput};
    use sim_clr::scenario::Scenario;
    use sim_clr::CallContext;
    use std::ffi::c_void;
    use std::hint::black_box;
    use std::sync::Arc;

    const DEPTH: usize = 64;

    unsafe extern "system-unwind" fn count(
        _func: UintPtr,
        ip: UintPtr,
        _frame_info: UintPtr,
        _size: u32,
        _context: *mut u8,
        data: *mut c_void,
    ) -> HRESULT {
        // SAFETY: `data` is the `usize` the benchmark passes.
        unsafe { *(data as *mut usize) += black_box(ip) & 1 };
        0
    }

    fn walks(c: &mut Criterion) {
        let text = format!(
            "platform = \"unix\"\n[[code]]\nname = \"R\"\nkind = \"jit\"\nframe_size = 32\n[[code]]\nname = \"host\"\nkind = \"native\"\n\
             [[threads]]\nname = \"main\"\nframes = [{{ fn = \"R\", repeat = {} }}, {{ fn = \"host\" }}]\n",
            DEPTH - 1
        );
        let runtime = Arc::new(Scenario::parse("bench.toml", &text).unwrap().runtime());
        let hosted = host::Hosted::new(runtime.clone());
        let info = hosted.info();
        // SAFETY: a COM object starts with its vtable pointer; `hosted` keeps it alive.
        let vtbl: &ICorProfilerInfo2Vtbl = unsafe {
            &(**(info as *const *const ICorProfilerInfo10Vtbl))
                .base
                .base
                .base
                .base
                .base
                .base
                .base
                .base
        };
        let mut group = c.benchmark_group("hosted");
        group.throughput(Throughput::Elements(DEPTH as u64));
        runtime
            .on_thread("main", CallContext::PInvoke, |rt| {
                host::as_runtime_thread(|| {
                    for (name, flags) in [("plain", 0), ("regctx", REGISTER_CONTEXT)] {
                        group.bench_function(format!("trait/{name}"), |b| {
                            b.iter(|| {
                                let mut n = 0usize;
                                let mut cb = |f: &SnapshotFrame<'_>| {
                                    n += black_box(f.ip) as usize & 1;
                                    HResult::S_OK
                                };
                                assert_eq!(
                                    rt.do_stack_snapshot(ThreadId::NULL, Some(&mut cb), flags, None, 0),
                                    HResult::S_OK
                                );
                                n
                            })
                        });
                        group.bench_function(format!("com/{name}"), |b| {
                            b.iter(|| {
                                let mut n = 0usize;
                                let data = &mut n as *mut usize as *mut c_void;
                                // SAFETY: the slot's declared arguments; `data` outlives the call.
                                let hr = unsafe {
                                    (vtbl.DoStackSnapshot)(
                                        info,
                                        0,
                                        Some(count),
                                        flags,
                                        data,
                                        std::ptr::null_mut(),
                                        0,
                                    )
                                };
                                assert_eq!(hr, 0);
                                n
                            })
                        });
                    }
                })
            })
            .unwrap();
        group.finish();
    }

    criterion_group!(benches, walks);
}

#[cfg(unix)]
criterion::criterion_main!(com::benches);

#[cfg(not(unix))]
fn main() {}
