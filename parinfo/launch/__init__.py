"""The launcher: a program, or N pinned instances of it, run under a resolved Plan.

It owns what starts, watches and ends those processes and reads them back: the child's environment,
CPUs, start and signals (``child``); ``parinfo apply P -- CMD``'s entry, which execs one program or
runs the instances (``run``); the instances' start, signals and job control (``instances``) and the
relay of their prefixed output and logs (``relay``); ending every process they started (``reaping``,
with ``guard``, run as a file by path when the launcher may die first); and the read-back of what
each instance got (``verify``). It runs plans made by ``parinfo.profiles`` and is used by the CLI
and by ``parinfo tune``, which launches its trials through it. The start-up hook a launched Python
program runs stays in parinfo/profiles/hook/: ``parinfo.apply()`` loads its import watch in a running
process too.
"""
