"""Another running process, read from outside it or, on request, through an attach.

From outside: its runtimes, launch environment, command line, limits and children (:mod:`remote`),
and the counts in force that a library keeps in an exported variable, read from its memory without
stopping it (:mod:`inforce`); one precedence rule ranks what these give for each pool
(:mod:`standing`: in force > attached > launch environment > unknown). Through an attach (Python
3.14 ``sys.remote_exec``, opt-in): a script read inside it that leaves nothing behind
(:mod:`attach`). Every ``/proc`` file is opened through :mod:`parinfo.machine.procfs`; what the
process or its files say is hostile input. Sits above :mod:`parinfo.process`, whose library registry
and per-process readers it uses.
"""
