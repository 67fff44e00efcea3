// The runtime's own frames: what lies between a thread's start, a thread-pool work item, an
// async continuation, a reflection call, a static constructor, a finalizer or a wait and the
// managed code above it. Each shape walks its own thread by P/Invoke ("default"), except the
// wait, which a profiler thread walks under SuspendRuntime.
using System;
using System.Runtime.CompilerServices;
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

class Program
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
    }
}
