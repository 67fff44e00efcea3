// A method with a loop, calling the OSR probe (conformance/probes/osr.c) in its first round
// and in its last, a million rounds later: on .NET 8 the loop has moved to an
// on-stack-replacement body by then.
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

    static void Main()
    {
        Loop(1000000);
        report();
    }
}
