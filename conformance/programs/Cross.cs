// Cross-thread call shapes: a worker spins in managed code at depth 7 while the main thread
// (by P/Invoke) and native threads started by the profiler walk it — with the runtime
// running, under SuspendRuntime, after ResumeRuntime — and from GarbageCollectionStarted.
using System;
using System.Runtime.CompilerServices;
using System.Threading;

class Program
{
    static volatile bool ready;
    static volatile bool stop;

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void SpinAt(int depth)
    {
        if (depth > 1) { SpinAt(depth - 1); Helpers.Sink++; return; }
        ready = true;
        while (!stop) { }
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void CollectAt()
    {
        GC.Collect();
    }

    static void Main()
    {
        var worker = new Thread(() => { Native.RegisterTarget(); SpinAt(7); });
        worker.Start();
        while (!ready) Thread.Sleep(1);
        Helpers.MatrixAt(2, "x_pi:target");
        Native.Run("x_nt:nt_target");
        Native.Run("x_nt_regctx:nt_target_regctx");
        Native.Run("x_nt_zero:nt_target_zero");
        Native.Run("x_nt_zero16:nt_target_zero16");
        Native.Run("x_nt_flags4:nt_target_flags4");
        Native.Run("x_nt_null:nt_target_null");
        Native.Run("x_susp:nt_suspended");
        Native.Arm("gc:gc");
        CollectAt();
        stop = true;
        worker.Join();
    }
}
