// Cross-thread call shapes: a worker spins in managed code at depth 7 while the main thread
// (by P/Invoke) and native threads started by the profiler walk it — with the runtime
// running, under SuspendRuntime, after ResumeRuntime — and from GarbageCollectionStarted.
using System;
using System.Runtime.CompilerServices;
using System.Threading;

class Program
{
    [MethodImpl(MethodImplOptions.NoInlining)]
    static void CollectAt()
    {
        GC.Collect();
    }

    static void Main()
    {
        var worker = new Thread(() => { Native.RegisterTarget(); Helpers.SpinAt(7); });
        worker.Start();
        while (!Helpers.Ready) Thread.Sleep(1);
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
        Helpers.Stop = true;
        worker.Join();
    }
}
