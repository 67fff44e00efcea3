// A collectible assembly for Runtime.exe: loaded into its own AssemblyLoadContext, it calls
// back into the program, then the context is unloaded.
using System;
using System.Runtime.CompilerServices;

public static class Plugin
{
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static void Run(Action callback)
    {
        callback();
        GC.KeepAlive(callback);
    }
}
