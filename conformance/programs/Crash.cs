// Shapes that kill or hang the process, one per run (the argument): a NULL callback reaching a
// frame, same-thread and cross-thread under SuspendRuntime; a bogus ThreadID; a leaked
// second SuspendRuntime followed by a GC.
using System;
using System.Threading;

class Program
{
    static void Main(string[] args)
    {
        var worker = new Thread(() => { Native.RegisterTarget(); Helpers.SpinAt(3); });
        worker.IsBackground = true;
        worker.Start();
        while (!Helpers.Ready) Thread.Sleep(1);
        switch (args[0])
        {
            case "nullcb": Helpers.MatrixAt(3, "crash_nullcb:nullcb"); break;
            case "nullcb_x": Native.Run("crash_nullcb_x:nt_suspended_null"); break;
            case "bogus": Native.Run("crash_bogus:nt_bogus"); break;
            case "double": Native.Run("hang_double:nt_double_suspend"); GC.Collect(); break;
        }
        Console.WriteLine("survived " + args[0]);
        Helpers.Stop = true;
    }
}
