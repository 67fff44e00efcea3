// Names another thread, then calls a method for the first time, telling the events probe
// (conformance/probes/events.c) right before each.
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using System.Threading;

class EventsProbe
{
    [DllImport("libprobe_events")]
    static extern void mark(int what);

    [DllImport("libprobe_events")]
    static extern void report();

    static void Run() { Thread.Sleep(300); }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static int FirstCall(int x) { return x * 2 + 1; }

    static void Main()
    {
        var worker = new Thread(Run);
        worker.Start();
        mark(1);
        worker.Name = "worker";
        worker.Join();
        mark(2);
        FirstCall(20);
        report();
    }
}
