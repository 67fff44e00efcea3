// Shared by the conformance programs: the profiler's P/Invoke entry points and the
// recursion helpers. Every frame that must appear on a stack is NoInlining, and no recursive
// call is in tail position (the JIT may turn those into jumps).
using System;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;

class Marker { }

static class Native
{
    [DllImport("confprof")] public static extern int RunCase(string name);
    [DllImport("confprof")] public static extern void Arm(string name);
    [DllImport("confprof")] public static extern void RegisterTarget();
    [DllImport("confprof")] public static extern void InvokeCallback(Action callback);
    [DllImport("confprof")] public static extern void InvokeCallbackFramed(Action callback);
    [DllImport("confprof", EntryPoint = "InvokeCallbackFramed")] public static extern void InvokePointer(IntPtr callback);

    public static void Run(string name)
    {
        if (RunCase(name) != 0) throw new InvalidOperationException("unknown case " + name);
    }
}

static class Helpers
{
    public static int Sink;
    public static volatile bool Ready;
    public static volatile bool Stop;
    static object kept;

    // Recurses to the given depth, then spins in managed code until Stop (a cross-thread target).
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static void SpinAt(int depth)
    {
        if (depth > 1) { SpinAt(depth - 1); Sink++; return; }
        Ready = true;
        while (!Stop) { }
    }

    // Allocates a Marker at the given depth: ObjectAllocated runs the armed case there.
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static void AllocAt(int depth)
    {
        if (depth > 1) { AllocAt(depth - 1); Sink++; return; }
        kept = new Marker();
    }

    // Calls the profiler by P/Invoke at the given depth.
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static void MatrixAt(int depth, string name)
    {
        if (depth > 1) { MatrixAt(depth - 1, name); Sink++; return; }
        Native.Run(name);
    }
}
