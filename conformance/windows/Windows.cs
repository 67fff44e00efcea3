// The Windows lane's own shapes: targets in every state a cross-thread walk meets — spinning in
// managed code, blocked in a wait, blocked in native code called by P/Invoke, spinning inside a
// catch, a finally and a filter, asleep — each walked from a thread the profiler starts in
// every way the profiler can (case `nt_windows`: plain, with contexts, seeded from each frame
// and with bad seeds, around its own SuspendThread, with a NULL callback, under SuspendRuntime
// and after ResumeRuntime); then two profiler threads walking one target at once
// (`nt_concurrent`). "Windows.exe destroyed" walks a thread from its ThreadDestroyed and
// after it died, a run of its own. The targets inside handlers and WalkTarget are
// conformance/programs/Targets.cs.
using System;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using System.Threading;

static class Blocking
{
    [DllImport("confprof")] public static extern void Block();
    [DllImport("confprof")] public static extern void Release();
}

partial class Program
{
    static ManualResetEvent gate = new ManualResetEvent(false);

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void SpinAt(int depth)
    {
        if (depth > 1) { SpinAt(depth - 1); Helpers.Sink++; return; }
        Spin();
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void WaitAt(int depth)
    {
        if (depth > 1) { WaitAt(depth - 1); Helpers.Sink++; return; }
        Native.RegisterTarget();
        Helpers.Ready = true;
        gate.WaitOne();
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void BlockAt(int depth)
    {
        if (depth > 1) { BlockAt(depth - 1); Helpers.Sink++; return; }
        Native.RegisterTarget();
        Helpers.Ready = true;
        Blocking.Block();
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void SleepAt(int depth)
    {
        if (depth > 1) { SleepAt(depth - 1); Helpers.Sink++; return; }
        Native.RegisterTarget();
        Helpers.Ready = true;
        try { Thread.Sleep(Timeout.Infinite); }
        catch (ThreadInterruptedException) { Helpers.Sink++; }
    }

    static void Main(string[] args)
    {
        if (args.Length > 0 && args[0] == "destroyed")
        {
            Destroyed();
            return;
        }
        Action<Thread> stop = t => Helpers.Stop = true;
        WalkTarget(() => SpinAt(5), "w_spin:nt_windows", stop);
        WalkTarget(() => WaitAt(4), "w_wait:nt_windows", t => { gate.Set(); });
        WalkTarget(() => BlockAt(3), "w_pinvoke:nt_windows", t => Blocking.Release());
        WalkTarget(SpinInCatch, "w_catch:nt_windows", stop);
        WalkTarget(SpinInFinallyOuter, "w_finally:nt_windows", stop);
        WalkTarget(SpinInFilter, "w_filter:nt_windows", stop);
        WalkTarget(() => SleepAt(2), "w_sleep:nt_windows", t => t.Interrupt());
        // Two profiler threads walking one target at once: the second starts while the
        // first is inside its first callback.
        WalkTarget(() => SpinAt(5), "w_concurrent_spin:nt_concurrent", stop);
        gate.Reset();
        WalkTarget(() => WaitAt(4), "w_concurrent_wait:nt_concurrent", t => { gate.Set(); });
    }

    // A thread that registers as the target and ends: a profiler thread walks it from its
    // ThreadDestroyed (the armed `td` case), and again once it is dead.
    static void Destroyed()
    {
        Native.Arm("td_inside:nt_target");
        var thread = new Thread(() => { Native.RegisterTarget(); Helpers.Sink++; });
        thread.Start();
        thread.Join();
        Thread.Sleep(100);
        Native.Run("td_after:nt_target");
    }
}
