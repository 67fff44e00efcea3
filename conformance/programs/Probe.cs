// A program that does nothing: the runtime loads the profiler, which is all a probe needs.
class Probe
{
    static void Main() { }
}
