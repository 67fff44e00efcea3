// Starts a thread that marks itself for the destroyed probe (conformance/probes/destroyed.c)
// and returns; once it has ended, asks the probe for its answers.
using System.Runtime.InteropServices;
using System.Threading;

class DestroyedProbe
{
    [DllImport("libprobe_destroyed")]
    static extern void mark_target();

    [DllImport("libprobe_destroyed")]
    static extern void report();

    static void Target() { mark_target(); }

    static void Main()
    {
        var target = new Thread(Target);
        target.Start();
        target.Join();
        report();
    }
}
