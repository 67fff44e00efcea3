// Cross-thread targets shared by Runtime.cs and the Windows lane's Windows.cs: a thread that
// makes itself the profiler's target and spins in managed code — plainly, inside a catch, a
// finally or a filter — and the helper that starts one, lets a profiler thread walk it and
// lets it go. One partial class Program with the programs' own, so that the frames keep the
// names their scenarios give them (`Program::SpinInCatch`).
using System;
using System.Runtime.CompilerServices;
using System.Threading;

partial class Program
{
    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Thrower() { throw new InvalidOperationException("conformance"); }

    // Starts `body`, which makes its thread the profiler's target, then spins or blocks; once
    // it has done so a while, a profiler thread walks it (case `name`); `release` then lets it
    // go.
    static void WalkTarget(ThreadStart body, string name, Action<Thread> release)
    {
        Helpers.Ready = false;
        Helpers.Stop = false;
        var thread = new Thread(body);
        thread.Start();
        while (!Helpers.Ready) Thread.Sleep(1);
        Thread.Sleep(100);
        Native.Run(name);
        release(thread);
        thread.Join();
    }

    // Makes this thread the profiler's target and spins until the walks are done.
    [MethodImpl(MethodImplOptions.NoInlining)]
    static bool Spin()
    {
        Native.RegisterTarget();
        Helpers.Ready = true;
        while (!Helpers.Stop) { }
        return true;
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void SpinInCatch()
    {
        try { Thrower(); }
        catch (InvalidOperationException) { Spin(); }
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void SpinInFinally()
    {
        try { Thrower(); }
        finally { Spin(); }
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void SpinInFinallyOuter()
    {
        try { SpinInFinally(); }
        catch (InvalidOperationException) { Helpers.Sink++; }
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void SpinInFilter()
    {
        try { Thrower(); }
        catch (InvalidOperationException) when (Spin()) { Helpers.Sink++; }
    }
}
