// A method with a loop, calling the OSR probe (conformance/probes/osr.c) in its first round
// and in its last, a million rounds later: on .NET 8 the loop has moved to an
// on-stack-replacement body by then. Then a method without a loop, called often enough to be
// promoted (with pauses for the background compilation), calling the probe from its last
// call: its tiers (tier 0, then tier 1; on .NET 8 an instrumented tier between, dynamic PGO).
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;

class OsrProbe
{
    [DllImport("libprobe_osr")]
    static extern void probe(int moment);

    [DllImport("libprobe_osr")]
    static extern void report();

    static int Sink;

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Loop(int rounds)
    {
        for (int i = 0; i < rounds; i++)
        {
            if (i == 0) probe(0);
            if (i == rounds - 1) probe(1);
            Sink += i & 1;
        }
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Hot(bool last)
    {
        if (last) probe(2);
        Sink++;
    }

    static void Main()
    {
        Loop(1000000);
        for (int round = 0; round < 20; round++)
        {
            for (int i = 0; i < 100; i++) Hot(false);
            System.Threading.Thread.Sleep(100);
        }
        Hot(true);
        report();
    }
}
