// Hands a managed delegate to native code that calls it on a thread the runtime has never
// seen (the adoption probe, conformance/probes/adoption.c).
using System;
using System.Runtime.InteropServices;

class AdoptionProbe
{
    delegate void Callback();

    [DllImport("libprobe_adoption")]
    static extern void run_on_native_thread(IntPtr callback);

    [DllImport("libprobe_adoption")]
    static extern void delegate_ran();

    static Callback keep = () => delegate_ran();

    static void Main()
    {
        run_on_native_thread(Marshal.GetFunctionPointerForDelegate(keep));
    }
}
