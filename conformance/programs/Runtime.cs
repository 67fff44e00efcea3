// The runtime's own frames: what lies between a thread's start, a thread-pool work item, an
// async continuation, a reflection call, a static constructor, a finalizer or a wait and the
// managed code above it. Each shape walks its own thread by P/Invoke ("default"), except the
// wait, which a profiler thread walks under SuspendRuntime. Then code identity — generic
// instantiations over reference and value types, overloads — and threads spinning inside
// catch, finally and filter handlers, walked by a profiler thread under SuspendRuntime. Then
// code versions and unloading: a method with a tier-0 and a tier-1 activation on one stack,
// and an IP saved in a collectible assembly, looked up before and after it unloads. Last, the
// shapes .NET 8 changed: a loop before and after on-stack replacement, a Task.Run work item,
// two reverse P/Invokes on one stack, and threads blocked in Thread.Sleep and in a contended
// lock, walked by a profiler thread under SuspendRuntime. Then native code with a frame of its
// own calling managed code: a delegate, and an UnmanagedCallersOnly method.
using System;
using System.IO;
using System.Reflection;
using System.Reflection.Emit;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using System.Threading;
using System.Threading.Tasks;

static class Initialized
{
    public static int Value;
    static Initialized() { Native.Run("t_cctor:default"); Value = 1; }
}

class Finalized
{
    ~Finalized() { Native.Run("t_finalizer:default"); }
}

class Box<T>
{
    // Reference-type instantiations share one body: both frames have one FunctionID.
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static void HopRef(string name, bool first)
    {
        if (first) { Box<object>.HopRef(name, false); Helpers.Sink++; return; }
        Native.Run(name);
    }

    // Value-type instantiations have a body and a FunctionID each.
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static void HopValue(string name, bool first)
    {
        if (first) { Box<long>.HopValue(name, false); Helpers.Sink++; return; }
        Native.Run(name);
    }
}

static class Overloads
{
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static void Call(int depth, string name) { Native.Run(name); }

    [MethodImpl(MethodImplOptions.NoInlining)]
    public static void Call(string name) { Call(1, name); Helpers.Sink++; }
}

static class GenericMethods
{
    // A generic method: reference-type instantiations share one body and FunctionID, a
    // value-type one has its own.
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static void Hop<T>(string name, int step)
    {
        if (step == 0) { Hop<int>(name, 1); Helpers.Sink++; return; }
        if (step == 1) { Hop<object>(name, 2); Helpers.Sink++; return; }
        Native.Run(name);
    }
}

interface IRunner { void Go(string name); }

class Runner : IRunner
{
    [MethodImpl(MethodImplOptions.NoInlining)]
    public void Go(string name) { Native.Run(name); }
}

struct ValueRunner : IRunner
{
    public int Pad;
    [MethodImpl(MethodImplOptions.NoInlining)]
    public void Go(string name) { Native.Run(name); Pad++; }
}

static class Tiered
{
    // No loop: CoreCLR 3.1 compiles a method with a loop fully optimized at once, without
    // tiering. Phase 0 runs tier-0 code and stays on the stack while Warm has the method
    // promoted; phase 2 then runs the tier-1 code.
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static void Rec(int phase)
    {
        if (phase == 0) { Warm(); Helpers.Sink++; return; }
        if (phase == 2) { Native.Run("t_tierup:default"); Helpers.Sink++; return; }
        Helpers.Sink++;
    }

    // Calls Rec often enough for call counting to promote it, and waits for the background
    // tier-1 compilation.
    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Warm()
    {
        for (int round = 0; round < 10; round++)
        {
            for (int i = 0; i < 100; i++) Rec(1);
            System.Threading.Thread.Sleep(100);
        }
        Rec(2);
        Helpers.Sink++;
    }
}

static class Looped
{
    // A method with a loop: CoreCLR 3.1 compiles it fully optimized at once; .NET 8 compiles
    // it at tier 0 with patchpoints, and moves the running loop to an on-stack-replacement body
    // once it has run long enough. The first round walks before that, the last after.
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static void Run(int rounds)
    {
        for (int i = 0; i < rounds; i++)
        {
            if (i == 0) Native.Run("t_osr/before:default");
            if (i == rounds - 1) Native.Run("t_osr/after:default");
            Helpers.Sink += i & 1;
        }
    }
}

// The runtime knows these attributes by name, whatever assembly defines them (mcs has no
// UnmanagedCallersOnly of its own): CoreCLR 3.1 calls it NativeCallable, .NET 5 and later
// UnmanagedCallersOnly; each runtime ignores the other's.
namespace System.Runtime.InteropServices
{
    [AttributeUsage(AttributeTargets.Method)] sealed class UnmanagedCallersOnlyAttribute : Attribute { }
    [AttributeUsage(AttributeTargets.Method)] sealed class NativeCallableAttribute : Attribute { }
}

// Native code with a frame of its own (InvokeCallbackFramed) entering managed code: through a
// delegate, and through an UnmanagedCallersOnly method, whose native entry point only `ldftn`
// gives (C# 9's function pointers, which mcs lacks): a dynamic method emits it.
static class Reentries
{
    static readonly Action Entered = Body;

    [MethodImpl(MethodImplOptions.NoInlining)]
    public static void Outer() { Native.InvokeCallbackFramed(Entered); Helpers.Sink++; }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Body() { Native.Run("t_sandwich_framed:regctx"); Helpers.Sink++; }

    [UnmanagedCallersOnly, NativeCallable]
    public static void UcoEntered() { Native.Run("t_uco:regctx"); Helpers.Sink++; }

    [MethodImpl(MethodImplOptions.NoInlining)]
    public static void UcoOuter()
    {
        var pointer = new DynamicMethod("UcoPointer", typeof(IntPtr), Type.EmptyTypes, typeof(Reentries).Module);
        var il = pointer.GetILGenerator();
        il.Emit(OpCodes.Ldftn, typeof(Reentries).GetMethod("UcoEntered"));
        il.Emit(OpCodes.Ret);
        Native.InvokePointer((IntPtr)pointer.Invoke(null, null));
        Helpers.Sink++;
    }
}

static class Sandwiches
{
    static readonly Action Middle = MiddleBody;
    static readonly Action Top = TopBody;

    // managed -> native -> managed -> native -> managed: two reverse P/Invokes on one stack.
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static void Outer() { Native.InvokeCallback(Middle); Helpers.Sink++; }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void MiddleBody() { Native.InvokeCallback(Top); Helpers.Sink++; }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void TopBody() { Native.Run("t_sandwich2:regctx"); Helpers.Sink++; }
}

partial class Program
{
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static void Reflected() { Native.Run("t_reflection:default"); }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static async Task Continued()
    {
        await Task.Yield();
        Native.Run("t_async:default");
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Abandon() { new Finalized(); }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Started() { Native.Run("t_thread:default"); }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Queued(object done)
    {
        Native.Run("t_pool:default");
        ((ManualResetEventSlim)done).Set();
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Waits(object gate)
    {
        Native.RegisterTarget();
        Helpers.Ready = true;
        ((ManualResetEvent)gate).WaitOne();
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Sleeps()
    {
        Native.RegisterTarget();
        Helpers.Ready = true;
        try { Thread.Sleep(Timeout.Infinite); }
        catch (ThreadInterruptedException) { Helpers.Sink++; }
    }

    static readonly object Gate = new object();

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Contends()
    {
        Native.RegisterTarget();
        Helpers.Ready = true;
        lock (Gate) { Helpers.Sink++; }
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void RunTask() { Native.Run("t_task_run:default"); }

    // Runs Plugin::Run from a collectible context (the profiler saves the IP of its frame),
    // then unloads the context; returns a weak reference to it. AssemblyLoadContext is
    // reached by reflection: the compiler's reference assemblies do not have it.
    [MethodImpl(MethodImplOptions.NoInlining)]
    static WeakReference RunPlugin()
    {
        var type = Type.GetType("System.Runtime.Loader.AssemblyLoadContext, System.Runtime.Loader", true);
        var context = Activator.CreateInstance(type, new object[] { "plugin", true });
        var path = Path.Combine(Path.GetDirectoryName(typeof(Program).Assembly.Location), "Plugin.dll");
        var plugin = (Assembly)type.GetMethod("LoadFromAssemblyPath").Invoke(context, new object[] { path });
        var run = plugin.GetType("Plugin").GetMethod("Run");
        run.Invoke(null, new object[] { (Action)SaveInPlugin });
        Native.Run("t_unload/before:fip_saved");
        type.GetMethod("Unload").Invoke(context, null);
        return new WeakReference(context);
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void SaveInPlugin() { Native.Run("t_unload/save:save2"); }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void FirstTarget() { Native.Run("t_multicast:default"); }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void SecondTarget() { Helpers.Sink++; }

    // Dispatch stubs and delegates: an interface call, an interface call on a boxed struct
    // (an unboxing stub), a multicast delegate and a closure.
    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Dispatch()
    {
        IRunner runner = new Runner();
        runner.Go("t_interface:default");
        IRunner boxed = new ValueRunner();
        boxed.Go("t_unboxing:default");
        Action both = FirstTarget;
        both += SecondTarget;
        both();
        int captured = Helpers.Sink;
        Action closure = () => { Helpers.Sink += captured; Native.Run("t_closure:default"); };
        closure();
    }

    static void Main()
    {
        var started = new Thread(Started);
        started.Start();
        started.Join();
        using (var done = new ManualResetEventSlim())
        {
            ThreadPool.QueueUserWorkItem(Queued, done);
            done.Wait();
        }
        Continued().Wait();
        typeof(Program).GetMethod("Reflected").Invoke(null, null);
        Helpers.Sink += Initialized.Value;
        Abandon();
        GC.Collect();
        GC.WaitForPendingFinalizers();
        using (var gate = new ManualResetEvent(false))
        {
            var waiter = new Thread(Waits);
            waiter.Start(gate);
            while (!Helpers.Ready) Thread.Sleep(1);
            Thread.Sleep(100);
            Native.Run("t_wait:nt_suspended");
            gate.Set();
            waiter.Join();
        }
        Box<string>.HopRef("t_generic_ref:default", true);
        Box<int>.HopValue("t_generic_value:default", true);
        Overloads.Call("t_overload:default");
        WalkTarget(SpinInCatch, "t_in_catch:nt_suspended_walk", t => Helpers.Stop = true);
        WalkTarget(SpinInFinallyOuter, "t_in_finally:nt_suspended_walk", t => Helpers.Stop = true);
        WalkTarget(SpinInFilter, "t_in_filter:nt_suspended_walk", t => Helpers.Stop = true);
        GenericMethods.Hop<string>("t_generic_method:default", 0);
        Dispatch();
        Helpers.MatrixAt(500, "t_deep:default");
        Tiered.Rec(0);
        var unloaded = RunPlugin();
        for (int i = 0; i < 20 && unloaded.IsAlive; i++)
        {
            GC.Collect();
            GC.WaitForPendingFinalizers();
        }
        GC.Collect();
        Native.Run("t_unload/after:fip_saved");
        Looped.Run(1000000);
        Task.Run((Action)RunTask).Wait();
        Sandwiches.Outer();
        WalkTarget(Sleeps, "t_sleep:nt_suspended_walk", t => t.Interrupt());
        Monitor.Enter(Gate);
        WalkTarget(Contends, "t_monitor:nt_suspended_walk", t => Monitor.Exit(Gate));
        Reentries.Outer();
        Reentries.UcoOuter();
    }
}
