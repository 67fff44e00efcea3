//! Naming what a walk reports: modules, assemblies, the app domain, classes and method names
//! through metadata (`GetModuleInfo2`, `GetClassIDInfo2`, `GetTokenAndMetaDataFromFunction`,
//! `IMetaDataImport`), the entry rules these APIs follow, `SetEventMask2` and
//! `RequestProfilerDetach`.

use corprof::flags::event;
use corprof::metadata::MODULE_DISK;
use corprof::{ClassId, FunctionId, HResult, ModuleId, ObjectId, ProfilerCallback, ProfilerInfo, ThreadId};
use sim_clr::scenario::Scenario;
use sim_clr::{CallContext, CallbackKind, Runtime};
use std::sync::{Arc, Mutex, Weak};

const SCENARIO: &str = r#"
platform = "unix"
[runtime]
event_mask = ["ENABLE_STACK_SNAPSHOT", "ENABLE_OBJECT_ALLOCATED", "MONITOR_OBJECT_ALLOCATED", "MONITOR_MODULE_LOADS"]
[[code]]
name = "Shop.Cart::Add"
kind = "jit"
module = "/app/Shop.dll"
[[code]]
name = "Shop.Cart::Total"
kind = "jit"
module = "/app/Shop.dll"
[[code]]
name = "Program::Main"
kind = "jit"
module = "/app/App.exe"
[[code]]
name = "host!main"
kind = "native"
[[threads]]
name = "main"
frames = [{ fn = "Shop.Cart::Total" }, { fn = "Shop.Cart::Add" }, { fn = "Program::Main" }, { fn = "host!main" }]
"#;

fn runtime() -> Arc<Runtime> {
    Arc::new(Scenario::parse("metadata.toml", SCENARIO).unwrap().runtime())
}

fn function(rt: &Runtime, name: &str) -> FunctionId {
    rt.with_code(|c| c.function(c.by_name(name).unwrap()).function_id)
}

/// `Class::Method` of `function`, as a profiler names it from a callback.
fn name_of(rt: &Runtime, function: FunctionId) -> Result<String, HResult> {
    let (import, token) = rt.get_token_and_metadata_from_function(function)?;
    let method = import.get_method_props(token)?;
    let class = import.get_type_def_props(method.class)?;
    Ok(format!("{}::{}", class.name, method.name))
}

/// Names every managed frame of its own thread in `ObjectAllocated`, keeps the modules it is
/// told about, and implements `ICorProfilerCallback3` when asked to.
struct Namer {
    runtime: Weak<Runtime>,
    modules: Mutex<Vec<ModuleId>>,
    names: Mutex<Vec<Result<String, HResult>>>,
    callback3: bool,
}

impl ProfilerCallback for Namer {
    fn module_load_finished(&self, module: ModuleId, _status: HResult) -> HResult {
        let rt = self.runtime.upgrade().unwrap();
        // A SYNC API: allowed here, in a callback.
        assert!(rt.get_module_metadata(module).is_ok());
        self.modules.lock().unwrap().push(module);
        HResult::S_OK
    }

    fn object_allocated(&self, _object: ObjectId, _class: ClassId) -> HResult {
        let rt = self.runtime.upgrade().unwrap();
        let mut functions = Vec::new();
        let mut cb = |f: &corprof::SnapshotFrame<'_>| {
            functions.push(f.func_id);
            HResult::S_OK
        };
        assert_eq!(
            rt.do_stack_snapshot(ThreadId::NULL, Some(&mut cb), 0, None, 0),
            HResult::S_OK
        );
        let names = functions
            .into_iter()
            .filter(|f| !f.is_null())
            .map(|f| name_of(&rt, f))
            .collect();
        *self.names.lock().unwrap() = names;
        HResult::S_OK
    }

    fn implements_callback3(&self) -> bool {
        self.callback3
    }
}

fn attach(callback3: bool) -> (Arc<Runtime>, Arc<Namer>) {
    attach_to(runtime(), callback3)
}

fn attach_to(rt: Arc<Runtime>, callback3: bool) -> (Arc<Runtime>, Arc<Namer>) {
    let namer = Arc::new(Namer {
        runtime: Arc::downgrade(&rt),
        modules: Mutex::new(Vec::new()),
        names: Mutex::new(Vec::new()),
        callback3,
    });
    rt.set_profiler(namer.clone());
    (rt, namer)
}

#[test]
fn a_profiler_names_the_frames_it_walks_through_metadata() {
    let (rt, namer) = attach(false);
    assert_eq!(
        rt.raise("main", CallbackKind::ObjectAllocated),
        Some(HResult::S_OK)
    );
    let names: Vec<_> = namer.names.lock().unwrap().clone();
    assert_eq!(
        names,
        [
            Ok("Shop.Cart::Total".to_string()),
            Ok("Shop.Cart::Add".to_string()),
            Ok("Program::Main".to_string())
        ]
    );
}

#[test]
fn module_loads_are_announced_in_a_callback_where_sync_apis_work() {
    let (rt, namer) = attach(false);
    rt.announce_modules();
    let modules = namer.modules.lock().unwrap().clone();
    let names: Vec<_> = modules
        .iter()
        .map(|&m| rt.get_module_info2(m).unwrap().name)
        .collect();
    assert_eq!(names, ["/app/Shop.dll", "/app/App.exe"]);
    // Without MONITOR_MODULE_LOADS nothing is announced.
    let (rt, namer) = attach(false);
    let mask = rt.get_event_mask().unwrap();
    assert_eq!(
        rt.set_event_mask(mask & !event::MONITOR_MODULE_LOADS),
        HResult::S_OK
    );
    rt.announce_modules();
    assert!(namer.modules.lock().unwrap().is_empty());
}

#[test]
fn sync_metadata_apis_refuse_a_managed_thread_outside_a_callback() {
    let rt = runtime();
    let main = function(&rt, "Program::Main");
    // A P/Invoke into the profiler is not a callback (R27).
    let refused = rt
        .on_thread("main", CallContext::PInvoke, |rt| {
            rt.get_token_and_metadata_from_function(main).err()
        })
        .unwrap();
    assert_eq!(refused, Some(HResult::CORPROF_E_UNSUPPORTED_CALL_SEQUENCE));
    // A thread that never ran managed code may call them at any time.
    assert_eq!(name_of(&rt, main), Ok("Program::Main".into()));
    // The ASYNC ones work anywhere.
    let module = rt
        .on_thread("main", CallContext::PInvoke, |rt| {
            rt.get_function_info(main).unwrap().module_id
        })
        .unwrap();
    let info = rt.get_module_info2(module).unwrap();
    assert_eq!((info.name.as_str(), info.flags), ("/app/App.exe", MODULE_DISK));
}

#[test]
fn classes_modules_assemblies_and_the_domain_fit_together() {
    let rt = runtime();
    let add = rt.get_function_info(function(&rt, "Shop.Cart::Add")).unwrap();
    let total = rt.get_function_info(function(&rt, "Shop.Cart::Total")).unwrap();
    let main = rt.get_function_info(function(&rt, "Program::Main")).unwrap();
    assert_eq!(add.class_id, total.class_id);
    assert_ne!(add.module_id, main.module_id);
    assert_eq!(
        (add.token, total.token, main.token),
        (0x0600_0001, 0x0600_0002, 0x0600_0001)
    );
    let class = rt.get_class_id_info2(add.class_id).unwrap();
    assert_eq!(class.module_id, add.module_id);
    let import = rt.get_module_metadata(class.module_id).unwrap();
    assert_eq!(
        import.get_type_def_props(class.type_def).unwrap().name,
        "Shop.Cart"
    );
    let module = rt.get_module_info2(add.module_id).unwrap();
    let assembly = rt.get_assembly_info(module.assembly_id).unwrap();
    assert_eq!(
        (assembly.name.as_str(), assembly.module_id),
        ("Shop", add.module_id)
    );
    let domain = rt.get_app_domain_info(assembly.app_domain_id).unwrap();
    assert_eq!(domain.name, "clrhost");
    for bad in [
        rt.get_class_id_info2(ClassId::NULL).err(),
        rt.get_module_info2(ModuleId::NULL).err(),
        rt.get_module_info2(ModuleId(0x1234)).err(),
        rt.get_token_and_metadata_from_function(FunctionId::NULL).err(),
        rt.get_app_domain_info(corprof::AppDomainId(7)).err(),
        rt.get_assembly_info(corprof::AssemblyId::NULL).err(),
    ] {
        assert_eq!(bad, Some(HResult::E_INVALIDARG));
    }
    assert_eq!(
        import.get_method_props(0x0600_0099),
        Err(HResult::CLDB_E_RECORD_NOTFOUND)
    );
}

#[test]
fn the_event_mask_has_a_high_word() {
    let rt = runtime();
    let low = rt.get_event_mask().unwrap();
    let unloads = corprof::flags::high::MONITOR_DYNAMIC_FUNCTION_UNLOADS;
    assert_eq!(rt.set_event_mask2(low, unloads), HResult::S_OK);
    assert_eq!(rt.get_event_mask2(), Ok((low, unloads)));
    assert_eq!(rt.get_event_mask(), Ok(low));
    // The high word's immutable bit changes only in a startup Initialize.
    let tiering = corprof::flags::high::DISABLE_TIERED_COMPILATION;
    assert_eq!(rt.set_event_mask2(low, unloads | tiering), HResult::E_FAIL);
    assert_eq!(rt.get_event_mask2(), Ok((low, unloads)));
}

#[test]
fn detaching_needs_callback3_and_no_immutable_flags_then_refuses_every_call() {
    let (rt, _) = attach(false);
    assert_eq!(
        rt.request_profiler_detach(100),
        HResult::CORPROF_E_CALLBACK3_REQUIRED
    );
    // ENABLE_OBJECT_ALLOCATED can never be cleared: such a profiler cannot detach.
    let (rt, _) = attach(true);
    assert_eq!(
        rt.request_profiler_detach(100),
        HResult::CORPROF_E_IMMUTABLE_FLAGS_SET
    );
    let text = SCENARIO.replace(r#""ENABLE_OBJECT_ALLOCATED", "MONITOR_OBJECT_ALLOCATED", "#, "");
    let (rt, _) = attach_to(
        Arc::new(Scenario::parse("detach.toml", &text).unwrap().runtime()),
        true,
    );
    assert_eq!(rt.request_profiler_detach(100), HResult::S_OK);
    assert_eq!(rt.get_event_mask(), Err(HResult::CORPROF_E_PROFILER_DETACHING));
    assert_eq!(
        rt.get_module_info2(ModuleId(1)).err(),
        Some(HResult::CORPROF_E_PROFILER_DETACHING)
    );
}

#[test]
fn instantiations_and_overloads_have_their_own_function_ids_under_one_name() {
    let text = r#"
platform = "unix"
[[code]]
name = "Cache<int>::Get"
method = "Cache`1::Get"
type_args = ["System.Int32"]
kind = "jit"
[[code]]
name = "Cache<__Canon>::Get"
method = "Cache`1::Get"
type_args = ["System.__Canon"]
kind = "jit"
[[code]]
name = "Parse(string)"
method = "Number::Parse"
kind = "jit"
[[code]]
name = "Parse(span)"
method = "Number::Parse"
kind = "jit"
"#;
    let rt = Scenario::parse("identity.toml", text).unwrap().runtime();
    let ids: Vec<FunctionId> = [
        "Cache<int>::Get",
        "Cache<__Canon>::Get",
        "Parse(string)",
        "Parse(span)",
    ]
    .iter()
    .map(|n| function(&rt, n))
    .collect();
    let mut distinct = ids.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 4, "every function is its own FunctionID");
    let info: Vec<_> = ids
        .iter()
        .map(|&f| rt.get_function_info2(f, None).unwrap())
        .collect();
    assert_eq!(
        info[0].token, info[1].token,
        "instantiations share the method's token"
    );
    assert_ne!(info[2].token, info[3].token, "overloads are distinct methods");
    let names: Vec<_> = ids.iter().map(|&f| name_of(&rt, f).unwrap()).collect();
    assert_eq!(
        names,
        ["Cache`1::Get", "Cache`1::Get", "Number::Parse", "Number::Parse"]
    );
    let type_name = |class: ClassId| {
        let c = rt.get_class_id_info2(class).unwrap();
        let import = rt.get_module_metadata(c.module_id).unwrap();
        import.get_type_def_props(c.type_def).unwrap().name
    };
    assert_eq!(
        info[0]
            .type_args
            .iter()
            .map(|&c| type_name(c))
            .collect::<Vec<_>>(),
        ["System.Int32"]
    );
    assert_eq!(
        info[1]
            .type_args
            .iter()
            .map(|&c| type_name(c))
            .collect::<Vec<_>>(),
        ["System.__Canon"]
    );
    assert!(info[2].type_args.is_empty());
    // GetFunctionInfo reports no type arguments; GetFunctionInfo2 does.
    assert!(rt.get_function_info(ids[0]).unwrap().type_args.is_empty());
}
