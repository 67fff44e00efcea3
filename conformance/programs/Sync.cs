// Same-thread call shapes: DoStackSnapshot from ObjectAllocated and from P/Invoke at several
// depths, managed -> native -> managed, inside catch/finally/filter, from a native thread, and
// GetFunctionFromIP / GetCurrentThreadID. "Sync.exe noflag" runs the shapes for a profiler
// whose event mask lacks ENABLE_STACK_SNAPSHOT.
using System;
using System.Runtime.CompilerServices;

class Program
{
    static readonly string[] ObjectAllocatedShapes = { "default", "regctx", "zero", "zero16", "seed2", "seed2size0", "nested" };
    static readonly string[] PInvokeShapes = { "default", "self", "regctx", "x86", "zero", "zero16", "null1232", "flags4", "flagshi", "sfalse1", "efail1", "other0" };
    static readonly Action Reentry = Inner;
    static string sandwichCase;

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Inner() { InnerAt(3); }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void InnerAt(int depth)
    {
        if (depth > 1) { InnerAt(depth - 1); Helpers.Sink++; return; }
        Native.Run(sandwichCase);
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Outer(int depth)
    {
        if (depth > 1) { Outer(depth - 1); Helpers.Sink++; return; }
        Native.InvokeCallback(Reentry);
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Thrower() { throw new InvalidOperationException("conformance"); }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void CatchAt(string name)
    {
        try { Thrower(); }
        catch (InvalidOperationException) { Native.Run(name); }
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void FinallyAt(string name)
    {
        try { Thrower(); }
        finally { Native.Run(name); }
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void FinallyOuter(string name)
    {
        try { FinallyAt(name); }
        catch (InvalidOperationException) { Helpers.Sink++; }
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static bool Filter(string name) { Native.Run(name); return true; }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void FilterAt(string name)
    {
        try { Thrower(); }
        catch (InvalidOperationException) when (Filter(name)) { Helpers.Sink++; }
    }

    static void Main(string[] args)
    {
        if (args.Length > 0 && args[0] == "noflag")
        {
            NoFlag();
            return;
        }
        foreach (var shape in ObjectAllocatedShapes)
        {
            Native.Arm("oa_d5_" + shape + ":" + shape);
            Helpers.AllocAt(5);
        }
        Native.Arm("oa_d2:default");
        Helpers.AllocAt(2);
        foreach (var shape in PInvokeShapes)
            Helpers.MatrixAt(5, "pi_d5_" + shape + ":" + shape);
        Helpers.MatrixAt(1, "pi_d1:default");
        Helpers.MatrixAt(10, "pi_d10:default");
        Helpers.MatrixAt(3, "pi_fip_managed:fip_managed");
        Helpers.MatrixAt(3, "pi_fip_native:fip_native");
        Helpers.MatrixAt(3, "pi_fip2:fip2_managed");
        Helpers.MatrixAt(3, "pi_threadid:threadid");
        sandwichCase = "sandwich:regctx";
        Outer(2);
        CatchAt("catch:default");
        FinallyOuter("finally:default");
        FilterAt("filter:default");
        Native.Run("nt_self:nt_default");
        Native.Run("nt_threadid:nt_threadid");
        Native.Run("nt_init:nt_init");
        Native.Run("nt_resume:nt_resume");
    }

    static void NoFlag()
    {
        Native.Arm("nf_oa:default");
        Helpers.AllocAt(5);
        Helpers.MatrixAt(5, "nf_pi:default");
        Helpers.MatrixAt(5, "nf_pi_x86:x86");
        Helpers.MatrixAt(5, "nf_pi_zero:zero");
        Helpers.MatrixAt(5, "nf_pi_nullcb:nullcb");
        Helpers.MatrixAt(5, "nf_pi_flagshi:flagshi");
        Native.Run("nf_nt_self:nt_default");
    }
}
